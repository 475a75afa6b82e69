"""HTTP surface of the mock: vLLM's OpenAI-compatible API, `/metrics`, and the admin endpoint.

Shapes follow vLLM 0.33 (see the reference): every response field present (nulls included),
SSE chunks ending with `data: [DONE]`, a usage chunk with `stream_options.include_usage`, errors
as `{"error": {message, type, param, code}}`. The admin app (fault injection, engine stats)
listens on its own port so that traffic to the API never reaches it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from specpilot.mockvllm.config import VLLM_VERSION, EngineLimits, ServeConfig
from specpilot.mockvllm.engine import Engine, EngineDead, QueueFull, Request
from specpilot.mockvllm.faults import FaultBoard, FaultError, parse_fault
from specpilot.mockvllm.metrics import HttpMetrics
from specpilot.mockvllm.profile import DEFAULT_SCOPE, Profile
from specpilot.mockvllm.textgen import TokenSource, chat_prompt, count_tokens, scope_tag, text_seed
from specpilot.wire.names import SCOPE_HEADER

_ERROR_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    429: "RateLimitError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}
ENGINE_DEAD_MESSAGE = "EngineCore encountered an issue. See stack trace (above) for the root cause."
_CHAT_ROLES = {"system", "developer", "user", "assistant", "tool"}


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


class BadRequest(Exception):
    """A request vLLM would answer with an error status."""

    def __init__(self, message: str, status: int = 400, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.param = param


def error_response(status: int, message: str, param: str | None = None) -> web.Response:
    """vLLM's error body, with the HTTP status equal to `code`."""
    kind = _ERROR_TYPES.get(status, HTTPStatus(status).phrase.replace(" ", "") + "Error")
    body = {"error": {"message": message, "type": kind, "param": param, "code": status}}
    return web.json_response(body, status=status)


@dataclass(frozen=True)
class Generation:
    """A validated completion or chat request."""

    kind: str  # "completion" or "chat"
    prompt: str
    prompt_tokens: int
    max_tokens: int
    temperature: float
    seed: int | None
    stop: tuple[str, ...]
    ignore_eos: bool
    stream: bool
    include_usage: bool
    continuous_usage: bool


def _number(body: Mapping[str, Any], key: str, default: float | None) -> float | None:
    value = body.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadRequest(f"'{key}' must be a number, got {value!r}", param=key)
    return float(value)


def _integer(body: Mapping[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise BadRequest(f"'{key}' must be an integer, got {value!r}", param=key)
    return value


def _completion_prompt(body: Mapping[str, Any]) -> tuple[str, int]:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if isinstance(prompt, str):
        if not prompt:
            raise BadRequest("Prompt cannot be empty", param="prompt")
        return prompt, count_tokens(prompt)
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return " ".join(map(str, prompt)), len(prompt)
    if isinstance(prompt, list) and len(prompt) > 1:
        raise BadRequest("this server takes one prompt per request", param="prompt")
    raise BadRequest("'prompt' must be a string, a list of token ids, or a list with one of those", param="prompt")


def _chat_prompt(body: Mapping[str, Any]) -> tuple[str, int]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list", param="messages")
    rendered: list[tuple[str, str]] = []
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping) or message.get("role") not in _CHAT_ROLES:
            raise BadRequest(f"messages[{index}] needs a 'role' in {sorted(_CHAT_ROLES)}", param="messages")
        content = message.get("content")
        if isinstance(content, list):
            texts = [p.get("text") if isinstance(p, Mapping) and p.get("type") == "text" else None for p in content]
            if not all(isinstance(t, str) for t in texts):
                raise BadRequest(f"messages[{index}].content: only text parts are supported", param="messages")
            content = "".join(str(t) for t in texts)
        if content is not None and not isinstance(content, str):
            raise BadRequest(f"messages[{index}].content must be a string or text parts", param="messages")
        rendered.append((str(message["role"]), content or ""))
    return chat_prompt(rendered)


def parse_generation(kind: str, body: Any, limits: EngineLimits, *, force_usage: bool) -> Generation:
    """Validate a completion or chat body the way vLLM's protocol and SamplingParams do."""
    if not isinstance(body, Mapping):
        raise BadRequest("the request body must be a JSON object")
    prompt, prompt_tokens = _completion_prompt(body) if kind == "completion" else _chat_prompt(body)
    if (_integer(body, "n") or 1) != 1:
        raise BadRequest("this server supports n=1 only", param="n")
    temperature = _number(body, "temperature", 1.0)
    if temperature is not None and temperature < 0:
        raise BadRequest(f"temperature must be non-negative, got {temperature}.", param="temperature")
    top_p = _number(body, "top_p", 1.0)
    if top_p is not None and not 0 < top_p <= 1:
        raise BadRequest(f"top_p must be in (0, 1], got {top_p}.", param="top_p")
    requested = _integer(body, "max_completion_tokens") if kind == "chat" else None
    if requested is None:
        requested = _integer(body, "max_tokens")
    if requested is None and kind == "completion":
        requested = 16
    if requested is not None and requested < 1:
        raise BadRequest(f"max_tokens must be at least 1, got {requested}.", param="max_tokens")
    length = limits.max_model_len
    if prompt_tokens >= length:
        raise BadRequest(
            f"This model's maximum context length is {length} tokens. However, your request has "
            f"{prompt_tokens} input tokens. Please reduce the length of the input messages."
        )
    if requested is not None and requested > length - prompt_tokens:
        raise BadRequest(
            f"'max_tokens' or 'max_completion_tokens' is too large: {requested}. This model's maximum "
            f"context length is {length} tokens and your request has {prompt_tokens} input tokens "
            f"({requested} > {length} - {prompt_tokens}).",
            param="max_tokens",
        )
    stop = body.get("stop") or ()
    if isinstance(stop, str):
        stop = (stop,)
    if not isinstance(stop, list | tuple) or not all(isinstance(s, str) and s for s in stop):
        raise BadRequest("'stop' must be a string or a list of non-empty strings", param="stop")
    stream = body.get("stream", False)
    options = body.get("stream_options")
    if options is not None and not stream:
        raise BadRequest("Stream options can only be defined when `stream=True`.", param="stream_options")
    options = options if isinstance(options, Mapping) else {}
    return Generation(
        kind=kind,
        prompt=prompt,
        prompt_tokens=prompt_tokens,
        max_tokens=requested if requested is not None else length - prompt_tokens,
        temperature=1.0 if temperature is None else temperature,
        seed=_integer(body, "seed"),
        stop=tuple(stop),
        ignore_eos=bool(body.get("ignore_eos", False)),
        stream=bool(stream),
        include_usage=bool(options.get("include_usage")) or force_usage,
        continuous_usage=bool(options.get("continuous_usage_stats")),
    )


class OpenAIHandlers:
    """The OpenAI-compatible endpoints, bound to one server's state."""

    def __init__(self, state: ServerState) -> None:
        self.state = state

    def _check_model(self, body: Any) -> None:
        model = body.get("model") if isinstance(body, Mapping) else None
        if model is not None and model not in self.state.config.served_names:
            raise BadRequest(f"The model `{model}` does not exist.", status=404, param="model")

    async def models(self, _: web.Request) -> web.Response:
        state = self.state
        cards = [
            {
                "id": name,
                "object": "model",
                "created": state.started,
                "owned_by": "vllm",
                "root": state.config.model,
                "parent": None,
                "max_model_len": state.limits.max_model_len,
                "permission": [
                    {
                        "id": f"modelperm-{uuid.uuid4().hex}",
                        "object": "model_permission",
                        "created": state.started,
                        "allow_create_engine": False,
                        "allow_sampling": True,
                        "allow_logprobs": True,
                        "allow_search_indices": False,
                        "allow_view": True,
                        "allow_fine_tuning": False,
                        "organization": "*",
                        "group": None,
                        "is_blocking": False,
                    }
                ],
            }
            for name in state.config.served_names
        ]
        return web.json_response({"object": "list", "data": cards})

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "completion")

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "chat")

    async def _generate(self, http: web.Request, kind: str) -> web.StreamResponse:
        state = self.state
        try:
            body = await http.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return error_response(400, f"Invalid JSON body: {exc}")
        try:
            self._check_model(body)
            gen = parse_generation(kind, body, state.limits, force_usage=state.config.enable_force_include_usage)
        except BadRequest as exc:
            return error_response(exc.status, str(exc), exc.param)
        engine = state.engine
        scope = http.headers.get(SCOPE_HEADER) or scope_tag(gen.prompt) or DEFAULT_SCOPE
        refusal = state.faults.refusal(scope, engine.time())
        if refusal is not None:
            message = "Too many requests" if refusal == 429 else "Injected fault"
            return error_response(refusal, message)
        if state.faults.stalls(scope, engine.time()):
            return await _stall()
        delay = state.faults.start_delay(scope, engine.time())
        if delay:
            await engine.clock.sleep_until(engine.time() + delay)
        # Greedy text depends on the prompt and server seed only, so every arm produces the same.
        key = state.config.seed if gen.temperature == 0 else gen.seed if gen.seed is not None else engine.next_seed()
        tokens = TokenSource(
            text_seed(gen.prompt, key),
            mean_length=state.profile.model.mean_output_tokens,
            diverge_at=state.faults.divergence(scope, engine.time()),
        )
        try:
            req = engine.submit(
                scope=scope,
                prompt_tokens=gen.prompt_tokens,
                max_tokens=gen.max_tokens,
                tokens=tokens,
                stop=gen.stop,
                ignore_eos=gen.ignore_eos,
            )
        except QueueFull as exc:
            return error_response(503, f"Server is overloaded: the request queue is full ({exc.reason}).")
        except EngineDead:
            return error_response(500, ENGINE_DEAD_MESSAGE)
        prefix = "cmpl" if kind == "completion" else "chatcmpl"
        response_id = f"{prefix}-{http.headers.get('X-Request-Id') or uuid.uuid4().hex}"
        try:
            if gen.stream:
                return await self._stream(http, gen, req, response_id)
            while not req.done:
                await req.next_text()
            if req.aborted:
                return error_response(500, ENGINE_DEAD_MESSAGE)
            return web.json_response(self._full_response(gen, req, response_id))
        finally:
            engine.abort(req)  # a no-op once finished; frees the engine when the client left early

    def _usage(self, gen: Generation, req: Request) -> dict[str, Any]:
        return {
            "prompt_tokens": gen.prompt_tokens,
            "total_tokens": gen.prompt_tokens + req.output_tokens,
            "completion_tokens": req.output_tokens,
        }

    def _full_response(self, gen: Generation, req: Request, response_id: str) -> dict[str, Any]:
        chat = gen.kind == "chat"
        base = {
            "id": response_id,
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": self.state.config.model_name,
        }
        usage = {**self._usage(gen, req), "prompt_tokens_details": None, "completion_tokens_details": None}
        finish = str(req.finish_reason)
        if not chat:
            choice = {
                "index": 0,
                "text": req.text,
                "logprobs": None,
                "finish_reason": finish,
                "stop_reason": req.stop_reason,
                "token_ids": None,
                "prompt_logprobs": None,
                "prompt_token_ids": None,
                "routed_experts": None,
                "weight_versions": None,
            }
            return {
                **base,
                "choices": [choice],
                "service_tier": None,
                "system_fingerprint": None,
                "usage": usage,
                "kv_transfer_params": None,
                "ec_transfer_params": None,
                "metrics": None,
            }
        message = {
            "role": "assistant",
            "content": req.text,
            "refusal": None,
            "annotations": None,
            "audio": None,
            "function_call": None,
            "reasoning": None,
        }
        choice = {
            "index": 0,
            "message": message,
            "logprobs": None,
            "finish_reason": finish,
            "stop_reason": req.stop_reason,
            "token_ids": None,
        }
        return {
            **base,
            "choices": [choice],
            "service_tier": None,
            "system_fingerprint": None,
            "usage": usage,
            "prompt_logprobs": None,
            "prompt_token_ids": None,
            "prompt_text": None,
            "kv_transfer_params": None,
            "metrics": None,
        }

    async def _stream(self, http: web.Request, gen: Generation, req: Request, response_id: str) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
        )
        await response.prepare(http)
        with contextlib.suppress(ConnectionResetError):  # the client left; the caller aborts the request
            async for event in self._events(gen, req, response_id):
                await response.write(b"data: " + event + b"\n\n")
            await response.write_eof()
        return response

    async def _events(self, gen: Generation, req: Request, response_id: str) -> AsyncIterator[bytes]:
        """The SSE payloads of one streamed request, one content chunk per engine step."""
        chat = gen.kind == "chat"
        base = {
            "id": response_id,
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": int(time.time()),
            "model": self.state.config.model_name,
        }

        def chunk(choices: list[dict[str, Any]], usage: dict[str, Any] | None) -> bytes:
            body: dict[str, Any] = {**base, "choices": choices}
            if usage is not None:
                body["usage"] = usage
            return json.dumps(body).encode()

        first = True
        while not req.done or first:
            delta = await req.next_text()
            if req.aborted:
                error = {"message": ENGINE_DEAD_MESSAGE, "type": "InternalServerError", "param": None, "code": 500}
                yield json.dumps({"error": error}).encode()
                break
            usage = self._usage(gen, req) if gen.continuous_usage else None
            if chat and first:
                role = {"role": "assistant", "content": ""}
                yield chunk([{"index": 0, "delta": role, "logprobs": None, "finish_reason": None}], usage)
            first = False
            if not delta and not req.done:
                continue
            choice: dict[str, Any] = {"index": 0, "delta": {"content": delta}} if chat else {"index": 0, "text": delta}
            choice.update(logprobs=None, finish_reason=None)
            if req.done:
                choice.update(finish_reason=str(req.finish_reason), stop_reason=req.stop_reason)
            yield chunk([choice], usage)
        if req.finish_reason is not None and gen.include_usage:
            yield chunk([], self._usage(gen, req))
        yield b"[DONE]"

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
