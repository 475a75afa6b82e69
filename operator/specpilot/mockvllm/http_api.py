"""HTTP surface of the mock: vLLM's OpenAI-compatible API, `/metrics`, and the admin endpoint.

Shapes follow vLLM 0.33 (see the reference): every response field present (nulls included),
SSE chunks ending with `data: [DONE]`, a usage chunk with `stream_options.include_usage`, errors
as `{"error": {message, type, param, code}}`, tool calls as `message.tool_calls` or streamed
`delta.tool_calls`. Requests are validated in `protocol`, answers planned in `answer_plan`, bodies
written in `responses`; the handlers here only wire those to the engine and the faults. The admin app (fault injection,
engine stats) listens on its own port so that traffic to the API never reaches it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from specpilot.mockvllm.answer_plan import Answer, Slips, plan
from specpilot.mockvllm.apimetrics import HttpMetrics, ToolParserMetrics
from specpilot.mockvllm.config import VLLM_VERSION, EngineLimits, ServeConfig
from specpilot.mockvllm.engine import Engine, EngineDead, QueueFull
from specpilot.mockvllm.faults import FaultBoard, FaultError, FaultKind, parse_fault
from specpilot.mockvllm.profile import DEFAULT_SCOPE, Profile
from specpilot.mockvllm.protocol import BadRequest, Generation, parse_generation
from specpilot.mockvllm.request import Request
from specpilot.mockvllm.responses import (
    ENGINE_DEAD_MESSAGE,
    chat_completion,
    completion,
    model_cards,
    stream_events,
)
from specpilot.mockvllm.textgen import draw_divergence, scope_tag, text_seed
from specpilot.mockvllm.tools import ToolMode, new_call_id, whole_call
from specpilot.wire.names import SCOPE_HEADER

_ERROR_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    429: "RateLimitError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}


@dataclass(frozen=True)
class ServerState:
    """What the handlers need: the flags, the resolved limits, the engine and the registry."""

    config: ServeConfig
    limits: EngineLimits
    profile: Profile
    engine: Engine
    faults: FaultBoard
    registry: CollectorRegistry
    http_metrics: HttpMetrics
    started: int
    tool_metrics: ToolParserMetrics | None = None  # with --tool-call-parser


def error_response(status: int, message: str, param: str | None = None) -> web.Response:
    """vLLM's error body, with the HTTP status equal to `code`."""
    kind = _ERROR_TYPES.get(status, HTTPStatus(status).phrase.replace(" ", "") + "Error")
    body = {"error": {"message": message, "type": kind, "param": param, "code": status}}
    return web.json_response(body, status=status)


class OpenAIHandlers:
    """The OpenAI-compatible endpoints, bound to one server's state."""

    def __init__(self, state: ServerState) -> None:
        self.state = state

    async def models(self, _: web.Request) -> web.Response:
        state = self.state
        cards = model_cards(state.config, max_model_len=state.limits.max_model_len, started=state.started)
        return web.json_response({"object": "list", "data": cards})

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "completion")

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "chat")

    async def _generate(self, http: web.Request, kind: str) -> web.StreamResponse:
        gen = await self._parse(http, kind)
        if isinstance(gen, web.Response):
            return gen
        engine, faults = self.state.engine, self.state.faults
        scope = http.headers.get(SCOPE_HEADER) or scope_tag(gen.prompt) or DEFAULT_SCOPE
        refused = await _admission_fault(self.state, scope)
        if refused is not None:
            return refused
        answer, stop = _plan(self.state, gen, scope)
        try:
            req = engine.submit(
                scope=scope,
                prompt_tokens=gen.prompt_tokens,
                max_tokens=gen.max_tokens,
                tokens=answer.tokens,
                stop=stop,
                ignore_eos=gen.ignore_eos,
                min_tokens=gen.min_tokens,
                stop_token_ids=gen.stop_token_ids,
                include_stop=gen.include_stop_str_in_output,
            )
        except QueueFull as exc:
            return error_response(503, f"Server is overloaded: the request queue is full ({exc.reason}).")
        except EngineDead:
            return error_response(500, ENGINE_DEAD_MESSAGE)
        prefix = "cmpl" if kind == "completion" else "chatcmpl"
        response_id = f"{prefix}-{http.headers.get('X-Request-Id') or uuid.uuid4().hex}"
        try:
            if gen.stream:
                return await self._stream(http, gen, req, answer, response_id)
            while not req.done:
                await req.next_text()
            if req.aborted:
                return error_response(500, ENGINE_DEAD_MESSAGE)
            return web.json_response(self._full_response(gen, req, answer, response_id))
        finally:
            # A no-op once finished; frees the engine when the client left early, unless a leak holds it.
            if not req.done and faults.strikes(FaultKind.CANCEL_LEAK, scope, engine.time()):
                engine.leak(req)
            else:
                engine.abort(req)

    async def _parse(self, http: web.Request, kind: str) -> Generation | web.Response:
        """The request's generation, or the error response vLLM gives an invalid one."""
        config = self.state.config
        try:
            body = await http.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return error_response(400, f"Invalid JSON body: {exc}")
        try:
            model = body.get("model") if isinstance(body, Mapping) else None
            if model is not None and model not in config.served_names:
                raise BadRequest(f"The model `{model}` does not exist.", status=404, param="model")
            return parse_generation(
                kind,
                body,
                self.state.limits,
                force_usage=config.enable_force_include_usage,
                tool_parser=config.tool_call_parser,
                auto_tools=config.enable_auto_tool_choice,
            )
        except BadRequest as exc:
            return error_response(exc.status, str(exc), exc.param)

    def _record_parse(self, gen: Generation, *, streaming: bool, tool_call: bool) -> None:
        """vLLM runs its tool parser (and counts the run) on "auto" answers only."""
        if self.state.tool_metrics is not None and gen.tool_choice.mode is ToolMode.AUTO:
            self.state.tool_metrics.record(streaming=streaming, tool_call=tool_call)

    def _full_response(self, gen: Generation, req: Request, answer: Answer, response_id: str) -> dict[str, Any]:
        model_name = self.state.config.model_name
        if gen.kind != "chat":
            return completion(gen, req, response_id=response_id, model_name=model_name)
        call = whole_call(answer.tool, new_call_id(), req.text) if answer.tool is not None else None
        self._record_parse(gen, streaming=False, tool_call=call is not None)
        return chat_completion(gen, req, answer, call=call, response_id=response_id, model_name=model_name)

    async def _stream(
        self, http: web.Request, gen: Generation, req: Request, answer: Answer, response_id: str
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
        )
        await response.prepare(http)

        def parsed(tool_call: bool) -> None:
            self._record_parse(gen, streaming=True, tool_call=tool_call)

        events = stream_events(
            gen, req, answer, response_id=response_id, model_name=self.state.config.model_name, parsed=parsed
        )
        with contextlib.suppress(ConnectionResetError):  # the client left; the caller aborts the request
            async for event in events:
                await response.write(b"data: " + event + b"\n\n")
            await response.write_eof()
        return response

    async def health(self, _: web.Request) -> web.Response:
        return web.Response(status=200 if self.state.engine.alive else 503)

    async def version(self, _: web.Request) -> web.Response:
        return web.json_response({"version": VLLM_VERSION})

    async def metrics(self, _: web.Request) -> web.Response:
        body = generate_latest(self.state.registry)
        if self.state.faults.garbled_metrics(self.state.engine.time()):
            body = _garble(body)
        response = web.Response(body=body)
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response


async def _admission_fault(state: ServerState, scope: str) -> web.Response | None:
    """Faults that strike a request before the engine takes it: a refusal or a stall answers it,
    a slow start delays it (None: it goes on)."""
    engine, faults = state.engine, state.faults
    refusal = faults.refusal(scope, engine.time())
    if refusal is not None:
        message = "Too many requests" if refusal == 429 else "Injected fault"
        return error_response(refusal, message)
    if faults.strikes(FaultKind.STALLS, scope, engine.time()):
        return await _stall()
    delay = faults.start_delay(scope, engine.time())
    if delay:
        await engine.clock.sleep_until(engine.time() + delay)
    return None


def _plan(state: ServerState, gen: Generation, scope: str) -> tuple[Answer, tuple[str, ...]]:
    """The answer, with the quality faults that strike it, and the stop strings the engine checks
    (none when a stop_overrun fault strikes)."""
    engine, faults = state.engine, state.faults
    # Greedy text depends on the prompt and server seed only, so every arm produces the same.
    key = state.config.seed if gen.temperature == 0 else gen.seed if gen.seed is not None else engine.next_seed()
    now = engine.time()
    answer = plan(
        gen,
        seed=text_seed(gen.prompt, key),
        mean_length=state.profile.model.mean_output_tokens,
        diverge_at=_diverge_at(state, gen, scope),
        slips=Slips(
            tool_json=bool(gen.tools) and faults.strikes(FaultKind.TOOL_JSON, scope, now),
            structured_invalid=gen.structured is not None and faults.strikes(FaultKind.STRUCTURED_INVALID, scope, now),
            loop_at=faults.repetition(scope, now),
        ),
    )
    overrun = bool(gen.stop) and faults.strikes(FaultKind.STOP_OVERRUN, scope, now)
    return answer, () if overrun else gen.stop


def _diverge_at(state: ServerState, gen: Generation, scope: str) -> int | None:
    """Where free text departs from the canonical text: a divergence fault, or (greedy only) the
    profile's natural variation at the size of the batch the request joins; the earlier wins."""
    engine, model = state.engine, state.profile.model
    positions = [state.faults.divergence(scope, engine.time())]
    if gen.temperature == 0 and model.greedy_divergence > 0:
        positions.append(
            draw_divergence(
                random.Random(engine.next_seed()),
                rate=model.greedy_divergence,
                batch=len(engine.scheduler.running) + len(engine.scheduler.waiting) + 1,
                horizon=min(gen.max_tokens, model.mean_output_tokens),
            )
        )
    return min((p for p in positions if p is not None), default=None)


async def _stall() -> web.Response:
    """Hold a request without an answer (a stalls fault): the server cancels the handler when its
    client goes away, and an hour bounds a client that never does."""
    await asyncio.sleep(3600)
    return error_response(504, "Injected stall")


def _garble(exposition: bytes) -> bytes:
    """An exposition as a broken exporter serves it: vLLM's values NaN, and the text cut mid-line."""
    lines = [
        line.rsplit(b" ", 1)[0] + b" NaN" if line.startswith(b"vllm:") else line for line in exposition.splitlines()
    ]
    text = b"\n".join(lines)
    return text[: len(text) * 2 // 3]


def _instrument(state: ServerState) -> Middleware:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.monotonic()
        response: web.StreamResponse
        try:
            key = state.config.api_key
            if key and request.path.startswith("/v1") and request.headers.get("Authorization") != f"Bearer {key}":
                response = web.json_response({"error": "Unauthorized"}, status=401)
            else:
                response = await handler(request)
        except web.HTTPException as exc:  # unknown route or method: FastAPI's body
            response = web.json_response({"detail": exc.reason}, status=exc.status)
        resource = request.match_info.route.resource
        state.http_metrics.observe(
            method=request.method,
            handler=resource.canonical if resource is not None else "none",
            status=response.status,
            request_bytes=request.content_length or 0,
            response_bytes=response.content_length or 0,
            seconds=(time.monotonic() - started) / state.engine.clock.time_scale,
        )
        return response

    return middleware


def build_app(state: ServerState) -> web.Application:
    """The API server application."""
    handlers = OpenAIHandlers(state)
    app = web.Application(middlewares=[_instrument(state)])
    app.router.add_get("/v1/models", handlers.models)
    app.router.add_post("/v1/completions", handlers.completions)
    app.router.add_post("/v1/chat/completions", handlers.chat_completions)
    app.router.add_get("/health", handlers.health)
    app.router.add_get("/ping", handlers.health)
    app.router.add_post("/ping", handlers.health)
    app.router.add_get("/version", handlers.version)
    app.router.add_get("/metrics", handlers.metrics)
    return app


def build_admin_app(state: ServerState) -> web.Application:
    """Fault injection and engine statistics, for tests and SREs rehearsing incidents."""
    engine, board = state.engine, state.faults

    async def list_faults(_: web.Request) -> web.Response:
        return web.json_response({"now_s": engine.time(), "faults": [f.to_dict() for f in board.listing()]})

    async def add_faults(request: web.Request) -> web.Response:
        try:
            body = await request.json()
            specs = [parse_fault(item) for item in (body if isinstance(body, list) else [body])]
        except (json.JSONDecodeError, FaultError) as exc:
            return error_response(400, str(exc))
        added = [board.add(spec, engine.time()).to_dict() for spec in specs]
        engine.wake()
        return web.json_response({"faults": added}, status=201)

    async def clear_faults(_: web.Request) -> web.Response:
        board.clear()
        engine.wake()
        return web.json_response({"faults": []})

    async def remove_fault(request: web.Request) -> web.Response:
        if not board.remove(request.match_info["fault_id"]):
            return error_response(404, f"no fault {request.match_info['fault_id']!r}")
        engine.wake()
        return web.json_response({"removed": request.match_info["fault_id"]})

    async def stats(_: web.Request) -> web.Response:
        return web.json_response(engine.stats())

    app = web.Application()
    app.router.add_get("/faults", list_faults)
    app.router.add_post("/faults", add_faults)
    app.router.add_delete("/faults", clear_faults)
    app.router.add_delete("/faults/{fault_id}", remove_fault)
    app.router.add_get("/engine", stats)
    return app
