"""Sending an exchange to its arm's endpoints: retries before any response, the request timeout, and the
client's answer when the engine cannot give one."""

from __future__ import annotations

import asyncio
import logging

from specpilot.router.core.choice import UNAVAILABLE, Endpoint
from specpilot.router.core.outcome import Failure
from specpilot.router.core.state import RouterState
from specpilot.router.exchange import Exchange, Failed
from specpilot.router.metrics import RouterMetrics
from specpilot.router.reader import Request
from specpilot.router.rewrite import request_line
from specpilot.router.upstream import UpstreamPool

log = logging.getLogger("specpilot.router")

_MAX_ATTEMPTS = 3


class Relay:
    """Sends each exchange upstream and sees it through to an answer for the client."""

    def __init__(self, *, state: RouterState, metrics: RouterMetrics, pool: UpstreamPool, timeout: float) -> None:
        self._state = state
        self._metrics = metrics
        self._pool = pool
        self._timeout = timeout

    async def run(
        self, ex: Exchange, request: Request, head: bytes, body: bytes, *, retry: bool, divert: bool = True
    ) -> None:
        """Send to the arm's endpoints, answer the client, note the facts; the client leaving cancels it.

        `divert`: an arm with no endpoint passes the request to the ordinary arm; else it is not sent
        (a mirrored copy, which only its own arm may take).
        """
        try:
            async with asyncio.timeout(self._timeout):
                await self._attempts(ex, request, head, body, retry=retry, divert=divert)
        except TimeoutError:
            if not ex.delivered:
                ex.timed_out = True
                message = f"upstream did not finish within {self._timeout:g} s"
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

    async def _attempts(
        self, ex: Exchange, request: Request, head: bytes, body: bytes, *, retry: bool, divert: bool
    ) -> None:
        """Try the chosen arm; when that fails before any response, another endpoint, then the ordinary arm.

        A refused connect never reached the engine; a connection closed before any response byte
        is almost always an idle keep-alive connection of a pod shutting down. Either way nothing
        reached the client, so the request moves on (the failed endpoint sits out a while). On
        success the endpoint stays acquired (`run` releases it).
        """
        failure: Exception | None = None
        tried: frozenset[Endpoint] = frozenset()
        for _ in range(_MAX_ATTEMPTS if retry else 1):
            endpoint = self._state.pick(ex.arm, tried)
            if endpoint is None and divert and ex.arm is not self._state.ordinary:
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
                    raise Failed(exc, before_response=True) from None
                start = request_line(request, endpoint.address)
                await ex.send(conn, start + head + body, head_only=request.method == "HEAD")
                return
            except Failed as failed:
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

    def _failed(self, ex: Exchange, exc: Exception) -> None:
        if ex.delivered:
            return
        ex.failure = Failure.UPSTREAM
        if ex.responded:
            ex.cut(f"upstream failed mid-response: {type(exc).__name__}")
        else:
            ex.client.error(502, f"upstream failed: {type(exc).__name__}")
