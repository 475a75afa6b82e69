"""The open-loop run: send each planned request at its time, never waiting for earlier ones.

Bounded by a duration and a request count (whichever comes first); requests still in flight at
the end are awaited up to their timeout, so unfinished work is counted rather than dropped from
view. A stop event (the command sets it on SIGINT) ends the load at once: no more arrivals, the
requests in flight cancelled and counted as such, and the result still returned. A live progress
line goes to a stream (stderr by default).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TextIO

import aiohttp

from specpilot.loadgen.sender import ClientOutcome, Target, send
from specpilot.loadgen.summary import by_scope, summarize
from specpilot.loadgen.workload import PlannedRequest


@dataclass(frozen=True)
class RunLimits:
    """When to stop sending; durations in model seconds (wall = model * the target's time scale)."""

    duration_s: float
    max_requests: int | None = None
    max_in_flight: int = 4096


class _Progress:
    """Counts for the live line."""

    def __init__(self) -> None:
        self.sent = 0
        self.dropped = 0
        self.statuses: Counter[str] = Counter()

    def line(self, elapsed: float) -> str:
        done = sum(self.statuses.values())
        s = self.statuses
        return (
            f"[{elapsed:7.1f}s] sent {self.sent} done {done} ok {s['ok']} timeout {s['timeout']} "
            f"rejected {s['rejected']} error {s['error']} in-flight {self.sent - done}"
        )


async def _report(progress: _Progress, out: TextIO, started: float, scale: float, interval: float) -> None:
    tty = out.isatty()
    while True:
        await asyncio.sleep(interval)
        line = progress.line((time.monotonic() - started) / scale)
        out.write(f"\r{line}" if tty else f"{line}\n")
        out.flush()


async def run(
    target: Target,
    planned: Iterable[PlannedRequest],
    limits: RunLimits,
    *,
    progress_to: TextIO | None = None,
    progress_interval_s: float = 1.0,
    stop: asyncio.Event | None = None,
) -> dict[str, Any]:
    """Replay `planned` open-loop against `target` until the limits or `stop`; return the result document."""
    stop = stop or asyncio.Event()
    scale = target.time_scale
    progress = _Progress()
    outcomes: list[ClientOutcome] = []
    started = time.monotonic()
    reporter = None
    if progress_to is not None:
        reporter = asyncio.create_task(_report(progress, progress_to, started, scale, progress_interval_s))
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None)) as session:
        cancelled = await _replay(
            session, target, planned, limits, stop=stop, progress=progress, outcomes=outcomes, started=started
        )
    elapsed = (time.monotonic() - started) / scale
    if reporter is not None and progress_to is not None:
        reporter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reporter
        progress_to.write(("\r" if progress_to.isatty() else "") + progress.line(elapsed) + "\n")
    return {
        "elapsed_s": elapsed,
        "stopped": stop.is_set(),  # the load ended early, on a signal
        "sent": progress.sent,
        "cancelled": cancelled,  # in flight when it stopped: not in the outcomes
        "dropped": progress.dropped,
        "overall": summarize(outcomes, elapsed),
        "scopes": by_scope(outcomes, elapsed),
    }


async def _replay(
    session: aiohttp.ClientSession,
    target: Target,
    planned: Iterable[PlannedRequest],
    limits: RunLimits,
    *,
    stop: asyncio.Event,
    progress: _Progress,
    outcomes: list[ClientOutcome],
    started: float,
) -> int:
    """Send each planned request at its time (dropped past the in-flight limit), then settle those in
    flight; return how many were cancelled in flight at a stop."""
    tasks: set[asyncio.Task[None]] = set()

    async def one(request: PlannedRequest, index: int) -> None:
        outcome = await send(session, target, request, index)
        outcomes.append(outcome)
        progress.statuses[outcome.status] += 1

    for index, request in enumerate(planned):
        if request.at >= limits.duration_s or (limits.max_requests is not None and index >= limits.max_requests):
            break
        delay = started + request.at * target.time_scale - time.monotonic()
        if delay > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)
        if stop.is_set():
            break
        if len(tasks) >= limits.max_in_flight:
            progress.dropped += 1
            continue
        progress.sent += 1
        task = asyncio.create_task(one(request, index))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    return await _settle(tasks, stop)


async def _settle(tasks: set[asyncio.Task[None]], stop: asyncio.Event) -> int:
    """Await the requests in flight, or cancel them at a stop; how many a stop cancelled."""
    if stop.is_set():
        for task in tasks:
            task.cancel()
        ended = await asyncio.gather(*tasks, return_exceptions=True)
        return sum(isinstance(end, asyncio.CancelledError) for end in ended)
    if tasks:
        await asyncio.gather(*tasks)
    return 0
