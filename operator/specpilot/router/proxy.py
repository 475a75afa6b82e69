"""The OpenAI-compatible proxy: classify, split, forward, measure.

Completions and chat completions (POST with a JSON body) are classified into a scope, sent to
an arm by the effective routes and measured; their bodies are bounded, so they are read whole
(the engine cannot start before the whole JSON is there anyway). Every other ``/v1`` request is
streamed through to the baseline arm unmeasured. Responses always stream, with backpressure.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
from aiohttp import hdrs, web
from multidict import CIMultiDict, CIMultiDictProxy

from specpilot.router.decide import UNAVAILABLE, Endpoint, Fallback, affinity_draw, choose_arm, classify_scope
from specpilot.router.measure import StreamMeter, usage_tokens
from specpilot.router.metrics import RouterMetrics
from specpilot.router.samples import SampleLog
from specpilot.router.state import RouterState
from specpilot.wire.names import SCOPE_HEADER, Arm
from specpilot.wire.routerconfig import RouterConfig
from specpilot.wire.samples import RequestOutcome, RequestSample, deadline_met, outcome_for_status

log = logging.getLogger("specpilot.router")

MEASURED_PATHS = frozenset({"/v1/completions", "/v1/chat/completions"})
ARM_HEADER = "X-Specpilot-Arm"
HOP_BY_HOP = frozenset(
    h.lower()
    for h in (
        "Connection",
        "Keep-Alive",
        "Proxy-Authenticate",
        "Proxy-Authorization",
        "TE",
        "Trailer",
        "Transfer-Encoding",
        "Upgrade",
        "Host",
        "Content-Length",
    )
)
_SKIP_AUTO = frozenset({hdrs.USER_AGENT, hdrs.ACCEPT, hdrs.ACCEPT_ENCODING, hdrs.CONTENT_TYPE})
_USAGE_OPTION = b'{"stream_options":{"include_usage":true},'
_MAX_ATTEMPTS = 3
_MAX_KEPT_RESPONSE = 8 << 20  # a whole (non-streamed) answer is kept up to this size to read its usage
_ERROR_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    413: "RequestEntityTooLargeError",
    502: "BadGatewayError",
    503: "ServiceUnavailableError",
    504: "GatewayTimeoutError",
}


def error_response(status: int, message: str) -> web.Response:
    """An error in the OpenAI/vLLM shape: ``{"error": {message, type, param, code}}``."""
    kind = _ERROR_TYPES.get(status, "Error")
    body = {"error": {"message": message, "type": kind, "param": None, "code": status}}
    return web.json_response(body, status=status)


class _Refused(Exception):
    """The router answers the request itself, without routing it."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message


class _Exchange:
    """One measured request as it goes; becomes a `RequestSample` at the end."""

    __slots__ = (
        "arm",
        "at",
        "deadline",
        "delivered",
        "endpoint",
        "fallback",
        "meter",
        "model",
        "outcome",
        "prompt_tokens",
        "scope",
        "started",
        "status",
        "stream",
        "tokens",
    )

    def __init__(
        self, *, started: float, scope: str, arm: Arm, model: str, stream: bool, deadline: float | None
    ) -> None:
        self.scope, self.arm, self.model, self.stream, self.deadline = scope, arm, model, stream, deadline
        self.started = started
        self.at = time.time() - (time.monotonic() - started)
        self.endpoint: Endpoint | None = None
        self.fallback: Fallback | None = None
        self.status = 0
        self.outcome = RequestOutcome.OK
        self.meter: StreamMeter | None = None
        self.tokens: int | None = None
        self.prompt_tokens: int | None = None
        self.delivered = False  # the client has the whole answer


class Proxy:
    """The ``/v1`` handler; one per router process."""

    def __init__(
        self,
        *,
        state: RouterState,
        metrics: RouterMetrics,
        samples: SampleLog,
        config: RouterConfig,
        session: aiohttp.ClientSession,
    ) -> None:
        self._state = state
        self._metrics = metrics
        self._samples = samples
        self._config = config
        self._session = session

    async def handle(self, request: web.Request) -> web.StreamResponse:
        try:
            if any(segment in (".", "..") for segment in request.path.split("/")):
                # "/v1/../metrics" must not reach the engine's other endpoints.
                raise _Refused(400, "bad_path", "path must not hold '.' or '..' segments")
            if request.method == "POST" and request.path in MEASURED_PATHS:
                return await self._measured(request)
            return await self._other(request)
        except _Refused as refused:
            self._metrics.refused.labels(refused.reason).inc()
            return error_response(refused.status, refused.message)

    # Measured requests

    async def _measured(self, request: web.Request) -> web.StreamResponse:
        started = time.monotonic()
        body = await self._read_body(request)
        try:
            doc = json.loads(body.decode())  # UTF-8 only, as the OpenAI API has it
        except ValueError as exc:
            raise _Refused(400, "malformed_json", f"request body is not valid JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise _Refused(400, "malformed_json", "request body must be a JSON object")
        model = doc.get("model")
        model = model if isinstance(model, str) else ""
        stream = doc.get("stream") is True
        routes = self._state.routes()
        scope = classify_scope(
            routes,
            named=request.headers.get(self._config.scope_header),
            path=request.path,
            headers=request.headers,
        )
        route = routes.route(scope)
        key = request.headers.get(self._config.affinity_header) if self._config.affinity_header else None
        arm, fallback = choose_arm(route, affinity_draw(scope, key) if key else random.random())
        ex = _Exchange(
            started=started, scope=scope, arm=arm, model=model, stream=stream, deadline=route.deadline_seconds
        )
        ex.fallback = fallback
        strip_usage = False
        if stream:
            body, strip_usage = _ask_for_usage(doc, body)
        headers = self._upstream_headers(request.headers, scope)
        headers[hdrs.ACCEPT_ENCODING] = "identity"
        in_flight = self._metrics.in_flight.labels(scope, arm.value)
        in_flight.inc()
        try:
            return await self._exchange(request, ex, headers, body, strip_usage)
        except asyncio.CancelledError:
            if not ex.delivered:
                ex.outcome = RequestOutcome.CLIENT_CANCEL
            raise
        finally:
            in_flight.dec()
            self._record(ex)

    async def _exchange(
        self, request: web.Request, ex: _Exchange, headers: CIMultiDict[str], body: bytes, strip_usage: bool
    ) -> web.StreamResponse:
        resp: web.StreamResponse | None = None
        try:
            async with asyncio.timeout(self._config.request_timeout):
                upstream = await self._connect(request, ex, headers, body)
                if upstream is None:
                    ex.outcome, ex.status = RequestOutcome.NO_ENDPOINT, 503
                    return error_response(503, f"no ready endpoint in arm {ex.arm.value}")
                try:
                    ex.status = upstream.status
                    ex.outcome = outcome_for_status(upstream.status)
                    resp = self._response(upstream, ex)
                    await resp.prepare(request)
                    if ex.stream and upstream.content_type == "text/event-stream":
                        await self._relay_stream(upstream, resp, ex, strip_usage)
                    else:
                        await self._relay_body(upstream, resp, ex)
                finally:
                    upstream.close()
                with contextlib.suppress(ConnectionError):  # the answer is whole; a client gone now changes nothing
                    await resp.write_eof()
                return resp
        except _ClientGone:
            if not ex.delivered:
                ex.outcome = RequestOutcome.CLIENT_CANCEL
            return _prepared(resp)
        except aiohttp.ClientError as exc:  # before TimeoutError: aiohttp's socket timeouts are both
            return resp if ex.delivered and resp is not None else await self._failed(request, resp, ex, exc)
        except TimeoutError:
            if ex.delivered and resp is not None:
                return resp
            ex.outcome = RequestOutcome.TIMEOUT
            message = f"upstream did not finish within {self._config.request_timeout:g} s"
            if resp is None:
                ex.status = 504
                return error_response(504, message)
            return await self._cut(request, resp, ex, message)
        except OSError as exc:
            return resp if ex.delivered and resp is not None else await self._failed(request, resp, ex, exc)
        finally:
            if ex.endpoint is not None:
                self._state.release(ex.endpoint)

    async def _connect(
        self, request: web.Request, ex: _Exchange, headers: CIMultiDict[str], body: bytes
    ) -> aiohttp.ClientResponse | None:
        """Send to the chosen arm; when that fails before any response, try another endpoint, then baseline.

        A refused connect never reached the engine; a connection closed before any response byte
        is almost always an idle keep-alive connection of a pod shutting down. Either way nothing
        reached the client, so the request moves on (the failed endpoint sits out a while). On
        success the endpoint stays acquired (`RouterState.release` when the exchange ends).
        """
        failure: Exception | None = None
        tried: frozenset[Endpoint] = frozenset()
        for _ in range(_MAX_ATTEMPTS):
            endpoint = self._state.pick(ex.arm, tried)
            if endpoint is None and ex.arm is not Arm.BASELINE:
                ex.fallback = UNAVAILABLE[ex.arm]
                ex.arm = Arm.BASELINE
                endpoint = self._state.pick(ex.arm, tried)
            if endpoint is None:
                break
            self._state.acquire(endpoint)
            ex.endpoint = endpoint
            try:
                upstream = await self._session.request(
                    request.method,
                    f"http://{endpoint.address}{request.rel_url}",
                    headers=headers,
                    data=body,
                    allow_redirects=False,
                    skip_auto_headers=_SKIP_AUTO,
                )
            except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError, aiohttp.ConnectionTimeoutError) as exc:
                self._state.release(endpoint)
                ex.endpoint = None
                self._state.eject(endpoint)
                tried |= {endpoint}
                self._metrics.retries.labels(ex.arm.value).inc()
                log.warning(
                    "%s (%s) failed before answering: %r; trying another endpoint", endpoint.address, ex.arm, exc
                )
                failure = exc
                continue
            return upstream
        if failure is not None:
            raise failure
        return None

    def _response(self, upstream: aiohttp.ClientResponse, ex: _Exchange) -> web.StreamResponse:
        headers = CIMultiDict(
            (name, value) for name, value in upstream.headers.items() if name.lower() not in HOP_BY_HOP
        )
        headers[ARM_HEADER] = ex.arm.value
        headers[SCOPE_HEADER] = ex.scope
        resp = web.StreamResponse(status=upstream.status, reason=upstream.reason, headers=headers)
        if upstream.content_length is not None and not (ex.stream and upstream.content_type == "text/event-stream"):
            resp.content_length = upstream.content_length
        return resp

    async def _relay_stream(
        self, upstream: aiohttp.ClientResponse, resp: web.StreamResponse, ex: _Exchange, strip_usage: bool
    ) -> None:
        meter = ex.meter = StreamMeter(strip_usage=strip_usage)
        content, clock = upstream.content, time.monotonic
        while data := await content.readany():
            out = meter.feed(data, clock())
            if out:
                await _send(resp, out)
                ex.delivered = meter.done  # [DONE] is out: whatever happens next, the client has it all
        rest = meter.finish()
        if rest:
            await _send(resp, rest)

    async def _relay_body(self, upstream: aiohttp.ClientResponse, resp: web.StreamResponse, ex: _Exchange) -> None:
        keep: list[bytes] | None = [] if upstream.status < 300 else None
        kept = 0
        while data := await upstream.content.readany():
            if keep is not None:
                kept += len(data)
                keep = keep if kept <= _MAX_KEPT_RESPONSE else None
                if keep is not None:
                    keep.append(data)
            await _send(resp, data)
        ex.delivered = True
        if keep is not None:
            ex.tokens, ex.prompt_tokens = usage_tokens(b"".join(keep))

    async def _failed(
        self, request: web.Request, resp: web.StreamResponse | None, ex: _Exchange, exc: Exception
    ) -> web.StreamResponse:
        ex.outcome = RequestOutcome.UPSTREAM_ERROR
        if resp is None:
            ex.status = 502
            return error_response(502, f"upstream failed: {type(exc).__name__}")
        return await self._cut(request, resp, ex, f"upstream failed mid-response: {type(exc).__name__}")

    async def _cut(
        self, request: web.Request, resp: web.StreamResponse, ex: _Exchange, message: str
    ) -> web.StreamResponse:
        """End a response that has started: an SSE error event when streaming, else a cut connection."""
        if ex.meter is not None:
            status = 504 if ex.outcome is RequestOutcome.TIMEOUT else 502
            error = {"error": {"message": message, "type": _ERROR_TYPES[status], "param": None, "code": status}}
            try:
                await resp.write(b"data: " + json.dumps(error).encode() + b"\n\ndata: [DONE]\n\n")
                await resp.write_eof()
                return resp
            except ConnectionError:
                return resp
        _abort(request)
        return resp

    def _record(self, ex: _Exchange) -> None:
        e2e = time.monotonic() - ex.started
        meter = ex.meter
        ttft = decode = None
        if meter is not None:
            if ex.outcome is RequestOutcome.OK and (meter.error or not meter.done):
                ex.outcome = RequestOutcome.UPSTREAM_ERROR  # an error event, or a stream that ended without [DONE]
            ex.tokens = meter.usage_tokens if meter.usage_tokens is not None else meter.content_chunks
            ex.prompt_tokens = meter.usage_prompt_tokens
            if meter.first_content is not None and meter.last_content is not None:
                ttft = meter.first_content - ex.started
                decode = meter.last_content - meter.first_content
        sample = RequestSample(
            seq=self._samples.next_seq(),
            at=ex.at,
            scope=ex.scope,
            arm=ex.arm,
            endpoint=ex.endpoint.address if ex.endpoint is not None else "",
            model=ex.model[:200],
            stream=ex.stream,
            status=ex.status,
            outcome=ex.outcome,
            e2e=e2e,
            ttft=ttft,
            output_tokens=ex.tokens,
            prompt_tokens=ex.prompt_tokens,
            tokens_from_usage=ex.tokens is not None and (meter is None or meter.usage_tokens is not None),
            decode=decode,
            deadline_met=deadline_met(ex.outcome, e2e, ex.deadline),
            fallback=ex.fallback.value if ex.fallback is not None else None,
        )
        self._samples.append(sample)
        self._metrics.observe(sample)
        if ex.fallback is not None:
            self._metrics.count_fallback(ex.scope, ex.fallback)

    # Other /v1 requests

    async def _other(self, request: web.Request) -> web.StreamResponse:
        limit = self._config.max_body_bytes
        length = request.content_length
        if length is not None and length > limit:
            raise _Refused(413, "body_too_large", f"request body over {limit} bytes")
        headers = self._upstream_headers(request.headers, None)
        if length is not None:
            headers[hdrs.CONTENT_LENGTH] = str(length)
        endpoint = self._state.pick(Arm.BASELINE)
        if endpoint is None:
            raise _Refused(503, "no_endpoint", "no ready endpoint in arm baseline")
        body = _LimitedBody(request, limit) if request.body_exists else None
        resp: web.StreamResponse | None = None
        status, failure = "error", "upstream failed"
        self._state.acquire(endpoint)
        try:
            async with (
                asyncio.timeout(self._config.request_timeout),
                self._session.request(
                    request.method,
                    f"http://{endpoint.address}{request.rel_url}",
                    headers=headers,
                    data=body,
                    allow_redirects=False,
                    skip_auto_headers=_SKIP_AUTO,
                ) as upstream,
            ):
                status = str(upstream.status)
                resp = web.StreamResponse(status=upstream.status, reason=upstream.reason)
                resp.headers.extend((k, v) for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP)
                if upstream.content_length is not None:
                    resp.content_length = upstream.content_length
                await resp.prepare(request)
                while data := await upstream.content.readany():
                    await _send(resp, data)
                await resp.write_eof()
                return resp
        except _ClientGone:
            status = "client_cancel"
            return _prepared(resp)
        except aiohttp.ClientError as exc:  # before TimeoutError: aiohttp's socket timeouts are both
            status, failure = "error", f"upstream failed: {type(exc).__name__}"
        except TimeoutError:
            status, failure = "timeout", "upstream did not answer in time"
        except OSError as exc:
            status, failure = "error", f"upstream failed: {type(exc).__name__}"
        finally:
            self._state.release(endpoint)
            self._metrics.other_requests.labels(status).inc()
        if body is not None and body.exceeded:
            raise _Refused(413, "body_too_large", f"request body over {limit} bytes")
        if resp is None:
            return error_response(504 if status == "timeout" else 502, failure)
        _abort(request)
        return resp

    # Helpers

    async def _read_body(self, request: web.Request) -> bytes:
        limit = self._config.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            raise _Refused(413, "body_too_large", f"request body over {limit} bytes")
        try:
            return await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise _Refused(413, "body_too_large", f"request body over {limit} bytes") from None

    def _upstream_headers(self, incoming: CIMultiDictProxy[str], scope: str | None) -> CIMultiDict[str]:
        headers = CIMultiDict((k, v) for k, v in incoming.items() if k.lower() not in HOP_BY_HOP)
        if scope is not None:
            headers[SCOPE_HEADER] = scope
        return headers


class _ClientGone(Exception):
    """The client went away while its response was being written."""


class _LimitedBody:
    """A request body passed on as it arrives, stopped once it grows past the limit."""

    def __init__(self, request: web.Request, limit: int) -> None:
        self._request, self._limit = request, limit
        self.exceeded = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        total = 0
        async for data in self._request.content.iter_any():
            total += len(data)
            if total > self._limit:
                self.exceeded = True
                raise ValueError("request body too large")
            yield data


async def _send(resp: web.StreamResponse, data: bytes) -> None:
    try:
        await resp.write(data)
    except ConnectionError:
        raise _ClientGone from None


def _prepared(resp: web.StreamResponse | None) -> web.StreamResponse:
    return resp if resp is not None else web.Response(status=499)


def _abort(request: web.Request) -> None:
    """Close the client connection so a cut body is not mistaken for a whole one."""
    if request.protocol is not None:
        request.protocol.force_close()


def _ask_for_usage(doc: Mapping[str, Any], body: bytes) -> tuple[bytes, bool]:
    """The body with ``stream_options.include_usage`` set, and whether the router added it."""
    options = doc.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") is True:
        return body, False
    if options is None and "stream_options" not in doc:
        start = body.index(b"{")
        return _USAGE_OPTION + body[start + 1 :], True
    patched = {**doc, "stream_options": {**(options if isinstance(options, dict) else {}), "include_usage": True}}
    return json.dumps(patched, ensure_ascii=False, separators=(",", ":")).encode(), True
