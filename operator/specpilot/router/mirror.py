"""Mirrored copies: a scope whose route names a mirror arm has every request the speculative arm takes
sent to that arm too, at the same moment, so both compared arms serve the same requests.

A copy runs in the background, beside the request it copies: the client leaving does not end it (its
own answer or the request timeout does), and its answer goes to nobody. It is measured as any
measured request is. It is never passed to another arm: with no ready endpoint in the mirror arm, or
with `bound` copies already in flight, it is not sent. Each copy is counted by what became of it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from enum import StrEnum

from prometheus_client import Counter

from specpilot.router.core.state import RouterState
from specpilot.wire.names import Arm

log = logging.getLogger("specpilot.router")


class Mirrored(StrEnum):
    """What became of a copy (the ``result`` label)."""

    SENT = "sent"
    NO_ENDPOINT = "no_endpoint"
    OVER_BOUND = "over_bound"


class Mirror:
    """The copies in flight, at most `bound`; `stop` cancels them."""

    def __init__(self, *, state: RouterState, counter: Counter, bound: int) -> None:
        self._state = state
        self._counter = counter
        self._bound = bound
        self._copies: set[asyncio.Task[None]] = set()

    def copy(self, *, scope: str, arm: Arm, send: Callable[[], Coroutine[object, object, None]]) -> None:
        """Start `send()` (the copy's measured exchange with `arm`) in the background, unless it cannot go."""
        if len(self._copies) >= self._bound:
            result = Mirrored.OVER_BOUND
        elif not self._state.endpoints()[arm]:
            result = Mirrored.NO_ENDPOINT
        else:
            result = Mirrored.SENT
            task = asyncio.get_running_loop().create_task(send(), name=f"mirror-{scope}")
            self._copies.add(task)
            task.add_done_callback(self._done)
        self._counter.labels(scope, result.value).inc()

    def _done(self, task: asyncio.Task[None]) -> None:
        self._copies.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("mirrored copy failed", exc_info=task.exception())

    async def stop(self) -> None:
        """Cancel the copies in flight and wait until they have ended."""
        copies = list(self._copies)
        for task in copies:
            task.cancel()
        await asyncio.gather(*copies, return_exceptions=True)
