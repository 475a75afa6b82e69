"""The OpenAI-compatible proxy: classify, split, forward, measure.

Completions and chat completions (POST with a JSON body) are classified into a scope, sent to
an arm by the effective routes and measured. Every other ``/v1`` request goes to the baseline arm
unmeasured. Request bodies are bounded and arrive whole (`specpilot.router.server`); responses are
relayed piece by piece as the engine sends them, from the upstream connection's read callback
straight to the client's transport (`specpilot.router.upstream`), with backpressure: while the
client's write buffer is full the upstream connection stops reading.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Mapping
from typing import Any

import orjson

from specpilot.router.core.choice import UNAVAILABLE, Endpoint, affinity_draw, choose_arm, classify_scope
from specpilot.router.core.measure import StreamMeter, usage_tokens
from specpilot.router.core.outcome import Facts, Failure, StreamEnd, other_status_label, request_outcome
from specpilot.router.core.samples import SampleLog
from specpilot.router.core.state import RouterState
from specpilot.router.metrics import RouterMetrics
from specpilot.router.reader import Request
from specpilot.router.server import ERROR_TYPES, ClientConnection
from specpilot.router.upstream import UpstreamConnection, UpstreamPool
from specpilot.wire.buckets import FineCounts
from specpilot.wire.names import SCOPE_HEADER, Arm
from specpilot.wire.routerconfig import RouterConfig
from specpilot.wire.samples import Fallback, RequestSample, deadline_met

log = logging.getLogger("specpilot.router")

MEASURED_PATHS = frozenset({"/v1/completions", "/v1/chat/completions"})
# The engine's endpoints beside /v1 that clients, load tools and load balancers use: to the ordinary arm,
# unmeasured. /health the router answers itself, from its readiness and its upstreams'.
ENGINE_PATHS = frozenset({"/ping", "/version", "/tokenize", "/detokenize"})
HEALTH_PATH = "/health"
SERVED = sorted({HEALTH_PATH, *ENGINE_PATHS})
ARM_HEADER = "X-Specpilot-Arm"
HOP_BY_HOP = frozenset(
    h.lower()
    for h in (
        "Connection",
        "Keep-Alive",
        "Proxy-Authenticate",
        "Proxy-Authorization",
        "Proxy-Connection",
        "TE",
        "Trailer",
        "Transfer-Encoding",
        "Upgrade",
        "Host",
        "Content-Length",
        "Expect",
    )
)
_HOP_BY_HOP_BYTES = frozenset(h.encode() for h in HOP_BY_HOP)
_ARM_HEADER = ARM_HEADER.encode()
_USAGE_OPTION = b'{"stream_options":{"include_usage":true},'
_MAX_ATTEMPTS = 3
_MAX_KEPT_RESPONSE = 8 << 20  # a whole (non-streamed) answer is kept up to this size to read its usage
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


class _Refused(Exception):
    """The router answers the request itself, without routing it."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message


class _Failed(Exception):
    """The upstream exchange failed; `before_response`: no byte of a response came (safe to retry)."""

    def __init__(self, exc: Exception, *, before_response: bool) -> None:
        super().__init__(repr(exc))
        self.exc, self.before_response = exc, before_response


class _Exchange:
    """One proxied request as it goes: the upstream response's `Sink`, and the facts of its outcome."""

    __slots__ = (
        "arm",
        "at",
        "cancelled",
        "client",
        "conn",
        "deadline",
        "delivered",
        "endpoint",
        "failure",
        "fallback",
        "finished",
        "keep",
        "kept",
        "measured",
        "meter",
        "model",
        "prompt_tokens",
        "responded",
        "scope",
        "started",
        "status",
        "stream",
        "strip_usage",
        "timed_out",
        "tokens",
    )

    def __init__(
        self,
        client: ClientConnection,
        *,
        measured: bool,
        started: float,
        scope: str,
        arm: Arm,
        model: str = "",
        stream: bool = False,
        deadline: float | None = None,
        strip_usage: bool = False,
    ) -> None:
        self.client, self.measured = client, measured
        self.scope, self.arm, self.model, self.stream, self.deadline = scope, arm, model, stream, deadline
        self.strip_usage = strip_usage
        self.started = started
        self.at = time.time() - (time.monotonic() - started)
        self.endpoint: Endpoint | None = None
        self.fallback: Fallback | None = None
        self.conn: UpstreamConnection | None = None
        self.finished: asyncio.Future[None] | None = None
        self.status = 0
        self.responded = False  # the response head went to the client
        self.delivered = False  # the client has the whole answer
        self.failure: Failure | None = None
        self.timed_out = False
        self.cancelled = False
        self.meter: StreamMeter | None = None
        self.keep: list[bytes] | None = None
        self.kept = 0
        self.tokens: int | None = None
        self.prompt_tokens: int | None = None

    def facts(self) -> Facts:
        meter = self.meter
        stream = None
        if meter is not None:
            stream = StreamEnd.ERROR_EVENT if meter.error else StreamEnd.DONE if meter.done else StreamEnd.UNFINISHED
        return Facts(
            status=self.status,
            responded=self.responded,
            delivered=self.delivered,
            failure=self.failure,
            timed_out=self.timed_out,
            cancelled=self.cancelled,
            stream=stream,
        )

    def send(self, conn: UpstreamConnection, request: bytes, *, head_only: bool) -> asyncio.Future[None]:
        self.conn = conn
        self.finished = asyncio.get_running_loop().create_future()
        self.client.flow.attach(conn.transport)
        conn.send(request, self, head_only=head_only)
        return self.finished

    def detach(self) -> None:
        """Stop relaying; an exchange still under way upstream is abandoned (the engine cancels it)."""
        conn, self.conn = self.conn, None
        if conn is not None:
            self.client.flow.detach(conn.transport)
            conn.abandon()

    def _done(self) -> None:
        """The connection is done with this exchange (back in the pool, or closed)."""
        if self.conn is not None:
            self.client.flow.detach(self.conn.transport)
            self.conn = None

    # Sink

    def head(self, status: int, reason: bytes, headers: list[tuple[bytes, bytes]]) -> None:
        self.status = status
        length: int | None = None
        event_stream = False
        lines: list[bytes] = []
        for name, value in headers:
            lower = name.lower()
            if lower == b"content-length":
                length = int(value) if value.isdigit() else None
            elif lower == b"content-type":
                event_stream = value.startswith(b"text/event-stream")
            if lower not in _HOP_BY_HOP_BYTES:
                lines += (name, b": ", value, b"\r\n")
        if self.measured:
            lines += (_ARM_HEADER, b": ", self.arm.value.encode(), b"\r\n")
            lines += (SCOPE_HEADER.encode(), b": ", self.scope.encode(), b"\r\n")
            if self.stream and event_stream:
                self.meter = StreamMeter(strip_usage=self.strip_usage)
                length = None  # the usage chunk the router asked for may be taken out
            elif status < 300:
                self.keep = []
        self.client.respond(status, reason.decode("latin-1"), b"".join(lines), length)
        self.responded = True

    def body(self, data: bytes) -> None:
        meter = self.meter
        if meter is not None:
            out = meter.feed(data, time.monotonic())
            if out:
                self.client.write(out)
                self.delivered = meter.done  # [DONE] is out: whatever happens next, the client has it all
            return
        keep = self.keep
        if keep is not None:
            self.kept += len(data)
            if self.kept <= _MAX_KEPT_RESPONSE:
                keep.append(data)
            else:
                self.keep = None
        self.client.write(data)

    def end(self) -> None:
        self._done()
        meter = self.meter
        if meter is not None:
            self.client.write(meter.finish())
        else:
            self.delivered = True
            if self.keep is not None:
                self.tokens, self.prompt_tokens = usage_tokens(b"".join(self.keep))
        self.client.finish()
        if self.finished is not None and not self.finished.done():
            self.finished.set_result(None)

    def failed(self, exc: Exception, *, before_response: bool) -> None:
        self._done()
        if self.finished is not None and not self.finished.done():
            self.finished.set_exception(_Failed(exc, before_response=before_response))

    # Ending a response that has started

    def cut(self, message: str) -> None:
        """An SSE error event when streaming, else a cut connection (a cut body is not a whole one)."""
        if self.meter is None:
            self.client.cut()
            return
        status = 504 if self.timed_out else 502
        error = {"error": {"message": message, "type": ERROR_TYPES[status], "param": None, "code": status}}
        self.client.write(b"data: " + orjson.dumps(error) + b"\n\ndata: [DONE]\n\n")
        self.client.finish()


class Proxy:
    """The handler of the traffic port; one per router process."""

    def __init__(
        self,
        *,
        state: RouterState,
        metrics: RouterMetrics,
        samples: SampleLog,
        config: RouterConfig,
        pool: UpstreamPool,
    ) -> None:
        self._state = state
        self._metrics = metrics
        self._samples = samples
        self._config = config
        self._pool = pool

    async def handle(self, request: Request, client: ClientConnection) -> None:
        try:
            if request.path == HEALTH_PATH:
                self._health(client)
                return
            if not request.path.startswith("/v1/") and request.path not in ENGINE_PATHS:
                client.error(404, f"not found: the router serves /v1/ and {', '.join(SERVED)}")
                return
            if any(segment in (".", "..") for segment in request.path.split("/")):
                # "/v1/../metrics" must not reach the engine's other endpoints.
                raise _Refused(400, "bad_path", "path must not hold '.' or '..' segments")
            if request.method == "POST" and request.path in MEASURED_PATHS:
                await self._measured(request, client)
            else:
                await self._other(request, client)
        except _Refused as refused:
            self._metrics.refused.labels(refused.reason).inc()
            client.error(refused.status, refused.message)

    def _health(self, client: ClientConnection) -> None:
        """As vLLM's: 200 with no body while the router is ready (its routing sources synced and an
        ordinary-decoding endpoint ready), else 503."""
        if not self._state.ready:
            client.error(503, f"not ready: waiting for the routing sources or a ready {self._state.ordinary} endpoint")
            return
        client.respond(200, "OK", b"", 0)
        client.finish()

    # Measured requests

    async def _measured(self, request: Request, client: ClientConnection) -> None:
        started = time.monotonic()
        body = request.body
        try:
            doc = orjson.loads(body)  # UTF-8 only, as the OpenAI API has it
        except ValueError as exc:
            raise _Refused(400, "malformed_json", f"request body is not valid JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise _Refused(400, "malformed_json", "request body must be a JSON object")
        model = doc.get("model")
        model = model if isinstance(model, str) else ""
        stream = doc.get("stream") is True
        headers = request.headers
        routes = self._state.routes()
        scope = classify_scope(routes, named=headers.get(self._config.scope_header), path=request.path, headers=headers)
        route = routes.route(scope)
        key = headers.get(self._config.affinity_header) if self._config.affinity_header else None
        arm, fallback = choose_arm(route, affinity_draw(scope, key) if key else random.random())
        strip_usage = False
        if stream:
            body, strip_usage = _ask_for_usage(doc, body)
        ex = _Exchange(
            client,
            measured=True,
            started=started,
            scope=scope,
            arm=arm,
            model=model,
            stream=stream,
            deadline=route.deadline_seconds,
            strip_usage=strip_usage,
        )
        ex.fallback = fallback
        head = _forwarded(request, {SCOPE_HEADER: scope, "Accept-Encoding": "identity"}, len(body))
        tally, counted = self._metrics.tally, (scope, arm.value)
        tally.enter(counted)
        try:
            await self._exchange(ex, request, head, body, retry=True)
        finally:
            tally.leave(counted)
            self._record(ex)

    def _record(self, ex: _Exchange) -> None:
        e2e = time.monotonic() - ex.started
        outcome, status = request_outcome(ex.facts())
        meter = ex.meter
        ttft = decode = None
        if meter is not None:
            ex.tokens = meter.usage_tokens if meter.usage_tokens is not None else meter.content_chunks
            ex.prompt_tokens = meter.usage_prompt_tokens
            ttft, decode = meter.timing(ex.started)
        sample = RequestSample(
            seq=self._samples.next_seq(),
            at=ex.at,
            scope=ex.scope,
            arm=ex.arm,
            endpoint=ex.endpoint.address if ex.endpoint is not None else "",
            model=ex.model[:200],
            stream=ex.stream,
            status=status,
            outcome=outcome,
            e2e=e2e,
            ttft=ttft,
            output_tokens=ex.tokens,
            prompt_tokens=ex.prompt_tokens,
            tokens_from_usage=ex.tokens is not None and (meter is None or meter.usage_tokens is not None),
            decode=decode,
            deadline_met=deadline_met(outcome, e2e, ex.deadline),
            fallback=ex.fallback.value if ex.fallback is not None else None,
            chunk_gaps=meter.chunk_gaps() if meter is not None else FineCounts(),
        )
        self._samples.append(sample)
        self._metrics.tally.observe(sample)
        if ex.fallback is not None:
            self._metrics.count_fallback(ex.scope, ex.fallback)

    # Other /v1 requests

    async def _other(self, request: Request, client: ClientConnection) -> None:
        ordinary = self._state.ordinary
        if self._state.pick(ordinary) is None:
            raise _Refused(503, "no_endpoint", f"no ready endpoint in arm {ordinary}")
        ex = _Exchange(client, measured=False, started=time.monotonic(), scope="", arm=ordinary)
        head = _forwarded(request, {}, len(request.body))
        try:
            await self._exchange(ex, request, head, request.body, retry=False)
        finally:
            self._metrics.other_requests.labels(other_status_label(ex.facts())).inc()

    # The exchange with upstream

    async def _exchange(self, ex: _Exchange, request: Request, head: bytes, body: bytes, *, retry: bool) -> None:
        """Send to the arm's endpoints, answer the client, note the facts; the client leaving cancels it."""
        try:
            async with asyncio.timeout(self._config.request_timeout):
                await self._attempts(ex, request, head, body, retry=retry)
        except TimeoutError:
            if not ex.delivered:
                ex.timed_out = True
                message = f"upstream did not finish within {self._config.request_timeout:g} s"
                if ex.responded:
                    ex.cut(message)
                else:
                    ex.client.error(504, message)
        except asyncio.CancelledError:
            ex.cancelled = True
            raise
        finally:
            ex.detach()
            if ex.endpoint is not None:
                self._state.release(ex.endpoint)

    async def _attempts(self, ex: _Exchange, request: Request, head: bytes, body: bytes, *, retry: bool) -> None:
        """Try the chosen arm; when that fails before any response, another endpoint, then the ordinary arm.

        A refused connect never reached the engine; a connection closed before any response byte
        is almost always an idle keep-alive connection of a pod shutting down. Either way nothing
        reached the client, so the request moves on (the failed endpoint sits out a while). On
        success the endpoint stays acquired (`_exchange` releases it).
        """
        failure: Exception | None = None
        tried: frozenset[Endpoint] = frozenset()
        for _ in range(_MAX_ATTEMPTS if retry else 1):
            endpoint = self._state.pick(ex.arm, tried)
            if endpoint is None and ex.arm is not self._state.ordinary:
                ex.fallback = UNAVAILABLE[ex.arm]
                ex.arm = self._state.ordinary
                endpoint = self._state.pick(ex.arm, tried)
            if endpoint is None:
                break
            self._state.acquire(endpoint)
            ex.endpoint = endpoint
            try:
                try:
                    conn = await self._pool.connect(endpoint.host, endpoint.port)
                except (OSError, TimeoutError) as exc:
                    raise _Failed(exc, before_response=True) from None
                start = b"%s %s HTTP/1.1\r\nHost: %s\r\n" % (
                    request.method.encode(),
                    request.target,
                    endpoint.address.encode(),
                )
                await ex.send(conn, start + head + body, head_only=request.method == "HEAD")
                return
            except _Failed as failed:
                ex.detach()
                if not failed.before_response or not retry:
                    self._failed(ex, failed.exc)
                    return
                self._state.release(endpoint)
                ex.endpoint = None
                self._state.eject(endpoint)
                tried |= {endpoint}
                self._metrics.retries.labels(ex.arm.value).inc()
                log.warning(
                    "%s (%s) failed before answering: %r; trying another endpoint", endpoint.address, ex.arm, failed.exc
                )
                failure = failed.exc
        if failure is not None:
            self._failed(ex, failure)
        else:
            ex.failure = Failure.NO_ENDPOINT
            ex.client.error(503, f"no ready endpoint in arm {ex.arm.value}")

    def _failed(self, ex: _Exchange, exc: Exception) -> None:
        if ex.delivered:
            return
        ex.failure = Failure.UPSTREAM
        if ex.responded:
            ex.cut(f"upstream failed mid-response: {type(exc).__name__}")
        else:
            ex.client.error(502, f"upstream failed: {type(exc).__name__}")


def _forwarded(request: Request, replace: Mapping[str, str], length: int) -> bytes:
    """The header block sent upstream: the client's end-to-end headers, `replace` set, the body's length."""
    headers = request.headers
    replaced = {name.lower() for name in replace}
    lines = [
        f"{name}: {value}\r\n"
        for name, value in headers.items()
        if name.lower() not in HOP_BY_HOP and name.lower() not in replaced
    ]
    lines += (f"{name}: {value}\r\n" for name, value in replace.items())
    if length or request.method in _BODY_METHODS or "Content-Length" in headers or "Transfer-Encoding" in headers:
        lines.append(f"Content-Length: {length}\r\n")
    lines.append("\r\n")
    return "".join(lines).encode("latin-1")


def _ask_for_usage(doc: Mapping[str, Any], body: bytes) -> tuple[bytes, bool]:
    """The body with ``stream_options.include_usage`` set, and whether the router added it."""
    options = doc.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") is True:
        return body, False
    if options is None and "stream_options" not in doc:
        start = body.index(b"{")
        return _USAGE_OPTION + body[start + 1 :], True
    # Written again whole: read by the standard library, which keeps integers of any size exact
    # (orjson reads those past 64 bits as floats).
    exact = json.loads(body)
    patched = {**exact, "stream_options": {**(options if isinstance(options, dict) else {}), "include_usage": True}}
    return json.dumps(patched, ensure_ascii=False, separators=(",", ":")).encode(), True
