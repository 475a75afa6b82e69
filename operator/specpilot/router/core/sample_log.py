"""Raw per-request samples, bounded in memory, read by the operator with a cursor.

The operator runs its statistical tests on distributions, which histograms cannot give
exactly, so the router keeps the newest `capacity` samples. A reader passes the last ``seq`` it
saw; ``epoch`` changes when the router restarts, which resets the sequence. The page a reader
gets is `specpilot.wire.samples.SamplesPage`, the shape the admin ``/samples`` endpoint serves, with
the measured requests still in flight (`opened` to `closed`), each on the arm it is on when the page is
made.
"""

from __future__ import annotations

import itertools
import uuid
from collections import deque
from typing import Protocol

from specpilot.wire.names import Arm
from specpilot.wire.samples import OpenRequest, RequestSample, SamplesPage


class InFlight(Protocol):
    """A measured request being proxied, as the log reads it."""

    @property
    def at(self) -> float: ...  # wall-clock start, Unix seconds

    @property
    def scope(self) -> str: ...

    @property
    def arm(self) -> Arm: ...


class SampleLog:
    """A ring of the newest samples, numbered from 1 without gaps, and the requests still in flight."""

    def __init__(self, capacity: int) -> None:
        self._ring: deque[RequestSample] = deque(maxlen=capacity)
        self._last = 0
        self._open: dict[int, InFlight] = {}
        self.epoch = uuid.uuid4().hex[:12]

    def opened(self, request: InFlight) -> None:
        """A measured request is being proxied: listed as open until `closed`."""
        self._open[id(request)] = request

    def closed(self, request: InFlight) -> None:
        self._open.pop(id(request), None)

    def next_seq(self) -> int:
        """Reserve the sequence number of the next sample to `append`."""
        return self._last + 1

    def append(self, sample: RequestSample) -> None:
        self._ring.append(sample)
        self._last = sample.seq

    def since(self, cursor: int, limit: int) -> SamplesPage:
        """Up to `limit` samples with ``seq > cursor``, oldest first."""
        cursor = max(0, min(cursor, self._last))
        oldest = self._last - len(self._ring) + 1
        dropped = max(0, oldest - cursor - 1)
        start = max(0, cursor + 1 - oldest)
        samples = tuple(itertools.islice(self._ring, start, start + max(0, limit)))
        return SamplesPage(
            epoch=self.epoch,
            samples=samples,
            next_cursor=samples[-1].seq if samples else cursor,
            dropped=dropped,
            open=tuple(OpenRequest(at=r.at, scope=r.scope, arm=r.arm) for r in self._open.values()),
        )
