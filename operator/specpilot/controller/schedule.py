"""A pilot's loops beside its reconcile: measuring and probing, each on its own schedule.

Each loop calls its step, waits the seconds the step returns (or until the pilot's daemon stops), and
calls it again; a step that raises is logged and retried. Measuring and probing run as separate
tasks, so a probe round held up by a slow score webhook or a cancel case's bound never delays a
collection (`Controller.probe`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

log = logging.getLogger("specpilot.operator")

RETRY_SECONDS = 5.0


class Stopped(Protocol):
    """The daemon's stop flag: false until the pilot's daemon stops, and awaitable until then."""

    def __bool__(self) -> bool: ...

    def wait(self) -> Awaitable[Any]: ...


async def first(*waits: Awaitable[Any]) -> None:
    """Until the first of `waits` finishes; the others are cancelled."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


async def repeat(step: Callable[[], Awaitable[float]], stopped: Stopped, *, what: str) -> None:
    """`step` again and again, each time after the seconds the last one returned, until `stopped`."""
    while not stopped:
        try:
            delay = await step()
        except Exception:
            log.exception("%s failed, retrying", what)
            delay = RETRY_SECONDS
        await first(asyncio.sleep(delay), stopped.wait())
