"""The OpenAI-compatible proxy: classify, split, forward, measure.

Completions and chat completions (POST with a JSON body) are classified into a scope, sent to
an arm by the effective routes and measured. Every other ``/v1`` request goes to the baseline arm
unmeasured. Request bodies are bounded and arrive whole (`specpilot.router.server`); responses are
relayed piece by piece as the engine sends them, from the upstream connection's read callback
straight to the client's transport (`specpilot.router.upstream`), with backpressure: while the
client's write buffer is full the upstream connection stops reading. `specpilot.router.relay` sends
each request to its arm's endpoints, `specpilot.router.exchange` relays the answer and notes how it
ended, and `specpilot.router.rewrite` holds what is changed on the way. A scope whose route names a
mirror arm has each request the speculative arm takes copied there (`specpilot.router.mirror`).
"""

from __future__ import annotations

import functools
import random
import time
from dataclasses import replace
from typing import Any

import orjson

from specpilot.router.core.choice import affinity_draw, choose_arm, classify_scope, mirror_arm
from specpilot.router.core.outcome import Failure, other_status_label
from specpilot.router.core.sample_log import SampleLog
from specpilot.router.core.state import RouterState
from specpilot.router.exchange import Exchange, request_sample
from specpilot.router.metrics import RouterMetrics
from specpilot.router.mirror import Mirror
from specpilot.router.reader import Request
from specpilot.router.recipient import NOBODY
from specpilot.router.relay import Relay
from specpilot.router.rewrite import ask_for_usage, forwarded
from specpilot.router.server import ClientConnection
from specpilot.router.upstream import UpstreamPool
from specpilot.wire.names import SCOPE_HEADER
from specpilot.wire.routerconfig import RouterConfig

MEASURED_PATHS = frozenset({"/v1/completions", "/v1/chat/completions"})
# The engine's endpoints beside /v1 that clients, load tools and load balancers use: to the ordinary arm,
# unmeasured. /health the router answers itself, from its readiness and its upstreams'.
ENGINE_PATHS = frozenset({"/ping", "/version", "/tokenize", "/detokenize"})
HEALTH_PATH = "/health"
SERVED = sorted({HEALTH_PATH, *ENGINE_PATHS})


class _Refused(Exception):
    """The router answers the request itself, without routing it."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message


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
        self._relay = Relay(state=state, metrics=metrics, pool=pool, timeout=config.request_timeout)
        self.mirror = Mirror(state=state, counter=metrics.mirrored_requests, bound=config.max_mirrored)

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
        doc = _json_object(body)
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
            body, strip_usage = ask_for_usage(doc, body)
        ex = Exchange(
            client=client,
            measured=True,
            started=started,
            scope=scope,
            arm=arm,
            model=model,
            stream=stream,
            deadline=route.deadline_seconds,
            strip_usage=strip_usage,
            fallback=fallback,
        )
        head = forwarded(request, {SCOPE_HEADER: scope, "Accept-Encoding": "identity"}, len(body))
        mirror = mirror_arm(route, arm)
        if mirror is not None:
            copy = replace(ex, client=NOBODY, arm=mirror)  # not started yet: the same request, to nobody
            send = functools.partial(self._relayed, copy, request, head, body, divert=False)
            self.mirror.copy(scope=scope, arm=mirror, send=send)
        await self._relayed(ex, request, head, body, divert=True)

    async def _relayed(self, ex: Exchange, request: Request, head: bytes, body: bytes, *, divert: bool) -> None:
        """Relay a measured exchange and record its sample (`divert`: see `Relay.run`)."""
        tally, counted = self._metrics.tally, (ex.scope, ex.arm.value)
        tally.enter(counted)
        self._samples.opened(ex)
        try:
            await self._relay.run(ex, request, head, body, retry=True, divert=divert)
        finally:
            tally.leave(counted)
            self._samples.closed(ex)
            if divert or ex.failure is not Failure.NO_ENDPOINT:  # a copy that found no endpoint was not sent
                self._record(ex)

    def _record(self, ex: Exchange) -> None:
        e2e = time.monotonic() - ex.started
        sample = request_sample(ex, seq=self._samples.next_seq(), e2e=e2e)
        self._samples.append(sample)
        self._metrics.tally.observe(sample)
        if ex.fallback is not None:
            self._metrics.count_fallback(ex.scope, ex.fallback)

    # Other /v1 requests

    async def _other(self, request: Request, client: ClientConnection) -> None:
        ordinary = self._state.ordinary
        if self._state.pick(ordinary) is None:
            raise _Refused(503, "no_endpoint", f"no ready endpoint in arm {ordinary}")
        ex = Exchange(client=client, measured=False, started=time.monotonic(), scope="", arm=ordinary)
        head = forwarded(request, {}, len(request.body))
        try:
            await self._relay.run(ex, request, head, request.body, retry=False)
        finally:
            self._metrics.other_requests.labels(other_status_label(ex.facts())).inc()


def _json_object(body: bytes) -> dict[str, Any]:
    """A measured request's body: a JSON object, else the request is refused."""
    try:
        doc = orjson.loads(body)  # UTF-8 only, as the OpenAI API has it
    except ValueError as exc:
        raise _Refused(400, "malformed_json", f"request body is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise _Refused(400, "malformed_json", "request body must be a JSON object")
    return doc
