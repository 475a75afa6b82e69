"""The router's per-request samples as the operator has read them, and where it may have missed some.

Each router pod serves its newest samples at ``/samples?since=<cursor>``; the ledger keeps, per
router pod, the epoch and the cursor to ask for next, and every sample that finished within its
time horizon (older ones are let go, so memory stays bounded). Samples can be lost three ways,
and each loss is kept as a gap with the time span it may cover, so that a window overlapping it
is told why instead of being judged on a partial count:

- the page says ``dropped > 0``: the router's ring pushed samples out before they were read;
- the epoch changed: the router restarted, and what it had not yet served is gone (the cursor
  goes back to 0 and the page, read with the old epoch's cursor, is read again from the start);
- the router pod went away (`forget`) with samples possibly unread.

Each page also lists the requests still in flight when it was made; the ledger keeps the newest page's
list per pod, so that the requests that arrived in a window are every sample read that started in it
and every request of the newest lists that did (`LedgerView.arrivals`): the two never overlap, since a
request leaves the router's list when its sample is made.

A failed read loses nothing by itself (the next read resumes at the cursor), but until a read
succeeds again the pod counts as read only up to its last good read, with the failure as reason.
Pure: the caller does the reading and passes ``at`` (when the page was read).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from specpilot.metrics.arm_requests import finished_at
from specpilot.wire.names import Arm
from specpilot.wire.samples import OpenRequest, RequestSample, SamplesPage

_BEGINNING = datetime.min.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class _Gap:
    """Samples of one router pod that finished within [start, end] may be missing."""

    start: datetime
    end: datetime
    reason: str


@dataclass(slots=True)
class _Router:
    epoch: str | None = None
    cursor: int = 0
    seen_until: datetime | None = None  # every sample that finished before this has been read
    failure: tuple[datetime, str] | None = None  # the last failed read since the last good one
    samples: deque[RequestSample] = field(default_factory=deque)
    open: tuple[OpenRequest, ...] = ()  # in flight at the newest read


class SampleLedger:
    """Samples per router pod within a time horizon, the cursors to read on from, and the gaps."""

    def __init__(self, *, horizon: timedelta) -> None:
        self.horizon = horizon  # may grow (a rehearsal added): what is already let go stays gone
        self._routers: dict[str, _Router] = {}
        self._gone: list[deque[RequestSample]] = []  # samples of forgotten pods, still inside the horizon
        self._gaps: list[_Gap] = []
        self._now = _BEGINNING

    def cursor(self, pod: str) -> int:
        """The ``since`` to ask the pod for next (0 for a pod not read yet)."""
        router = self._routers.get(pod)
        return router.cursor if router is not None else 0

    def record(self, pod: str, page: SamplesPage, *, at: datetime, limit: int) -> int:
        """Take a page read at `at` with ``limit=<limit>``; returns the cursor to ask for next.

        A full page means more is waiting: read again at once with the cursor returned (ask for
        no more than the router's 10,000 per page, or a full page looks complete).
        """
        router = self._routers.setdefault(pod, _Router())
        watermark = router.seen_until or _BEGINNING
        router.failure = None
        if router.epoch is not None and page.epoch != router.epoch:
            span = _span(watermark, at)
            self._gaps.append(
                _Gap(
                    watermark,
                    at,
                    f"router {pod} restarted (epoch {router.epoch} to {page.epoch}): samples {span} were lost",
                )
            )
            router.epoch, router.cursor, router.seen_until = page.epoch, 0, max(watermark, at)
            router.open = page.open
            self._prune(at)
            return 0
        router.epoch = page.epoch
        if page.dropped > 0:
            oldest = _utc(finished_at(page.samples[0])) if page.samples else at
            span = _span(watermark, oldest)
            reason = f"router {pod}: {page.dropped} samples {span} were pushed out of its buffer unread"
            self._gaps.append(_Gap(watermark, oldest, reason))
        router.samples.extend(page.samples)
        router.open = page.open
        router.cursor = page.next_cursor
        full = bool(page.samples) and len(page.samples) >= limit
        covered = _utc(finished_at(page.samples[-1])) if full else at
        router.seen_until = max(watermark, covered)
        self._prune(at)
        return router.cursor

    def record_failure(self, pod: str, reason: str, *, at: datetime) -> None:
        """A read of the pod failed at `at`; it stays read only up to its last good read."""
        self._routers.setdefault(pod, _Router()).failure = (at, reason)
        self._prune(at)

    def forget(self, pod: str, *, at: datetime) -> None:
        """The router pod is gone: what it had not served is lost; what was read is kept."""
        router = self._routers.pop(pod, None)
        if router is None:
            return
        self._gone.append(router.samples)
        watermark = router.seen_until or _BEGINNING
        if watermark < at:
            self._gaps.append(
                _Gap(watermark, at, f"router {pod} went away: samples {_span(watermark, at)} were never read")
            )
        self._prune(at)

    def samples(self, start: datetime, end: datetime) -> tuple[RequestSample, ...]:
        """Every sample read, of any pod, that finished within [start, end)."""
        return self.view().samples(start, end)

    def gaps(self, start: datetime, end: datetime) -> tuple[str, ...]:
        """Why the samples of [start, end) may be incomplete; empty when they are complete."""
        return self.view().gaps(start, end)

    def view(self) -> LedgerView:
        """What the ledger holds now, frozen: later reads and pruning leave it as it is."""
        return LedgerView(
            samples_read=tuple(self._all()),
            open=tuple(request for router in self._routers.values() for request in router.open),
            routers=tuple(
                _Seen(pod, router.seen_until, router.failure) for pod, router in sorted(self._routers.items())
            ),
            lost=tuple(self._gaps),
            kept_from=self._now - self.horizon if self._now - _BEGINNING > self.horizon else _BEGINNING,
        )

    def _all(self) -> Iterator[RequestSample]:
        for router in self._routers.values():
            yield from router.samples
        for samples in self._gone:
            yield from samples

    def _prune(self, at: datetime) -> None:
        """Let go of samples and gaps older than the horizon (samples arrive in the order they finished)."""
        self._now = max(self._now, at)
        cutoff = self._now - self.horizon
        oldest = cutoff.timestamp()
        for samples in (*(router.samples for router in self._routers.values()), *self._gone):
            while samples and finished_at(samples[0]) < oldest:
                samples.popleft()
        self._gone = [samples for samples in self._gone if samples]
        self._gaps = [gap for gap in self._gaps if gap.end >= cutoff]


@dataclass(frozen=True, slots=True)
class _Seen:
    pod: str
    until: datetime | None
    failure: tuple[datetime, str] | None


@dataclass(frozen=True, slots=True)
class LedgerView:
    """The samples read and the gaps, as the ledger held them at one moment."""

    samples_read: tuple[RequestSample, ...]
    routers: tuple[_Seen, ...]
    lost: tuple[_Gap, ...]
    kept_from: datetime  # samples that finished earlier have been let go
    open: tuple[OpenRequest, ...] = ()  # in flight at each pod's newest read

    @classmethod
    def empty(cls) -> LedgerView:
        return cls(samples_read=(), routers=(), lost=(), kept_from=_BEGINNING)

    def arrivals(self, start: datetime, end: datetime, *, scopes: Collection[str] | None = None) -> Counter[Arm]:
        """Requests per arm, of `scopes` (else every scope), that started within [start, end): finished or
        still in flight."""
        since, until = start.timestamp(), end.timestamp()
        started = (
            *((s.arm, s.scope) for s in self.samples_read if since <= s.at < until),
            *((r.arm, r.scope) for r in self.open if since <= r.at < until),
        )
        return Counter(arm for arm, scope in started if scopes is None or scope in scopes)

    def samples(self, start: datetime, end: datetime) -> tuple[RequestSample, ...]:
        """Every sample read, of any pod, that finished within [start, end)."""
        since, until = start.timestamp(), end.timestamp()
        return tuple(sample for sample in self.samples_read if since <= finished_at(sample) < until)

    def gaps(self, start: datetime, end: datetime) -> tuple[str, ...]:
        """Why the samples of [start, end) may be incomplete; empty when they are complete."""
        if not self.routers:
            return ("no router pod is being read",)
        reasons: list[str] = []
        if start < self.kept_from:
            reasons.append(f"the window starts before {_time(self.kept_from)}, the oldest time samples are kept for")
        for router in self.routers:
            if router.until is None or router.until < end:
                seen = "not read yet" if router.until is None else f"read only up to {_time(router.until)}"
                failed = ""
                if router.failure is not None:
                    failed = f"; its last read failed at {_time(router.failure[0])}: {router.failure[1]}"
                reasons.append(f"router {router.pod}: {seen}{failed}")
        reasons.extend(gap.reason for gap in self.lost if gap.start <= end and gap.end >= start)
        return tuple(reasons)


def _utc(unix: float) -> datetime:
    return datetime.fromtimestamp(unix, UTC)


def _span(start: datetime, end: datetime) -> str:
    if start == _BEGINNING:
        return f"that finished before {_time(end)}"
    return f"that finished between {_time(start)} and {_time(end)}"


def _time(at: datetime) -> str:
    return at.isoformat(timespec="seconds")
