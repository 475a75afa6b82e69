"""Raw per-request samples, bounded in memory, read by the operator with a cursor.

The operator runs its statistical tests on distributions, which histograms cannot give
exactly, so the router keeps the newest `capacity` samples. A reader passes the last ``seq`` it
saw; ``epoch`` changes when the router restarts, which resets the sequence. The page a reader
gets is `specpilot.wire.samples.SamplesPage`, the shape the admin ``/samples`` endpoint serves.
"""

from __future__ import annotations

import itertools
import uuid
from collections import deque

from specpilot.wire.samples import RequestSample, SamplesPage


class SampleLog:
    """A ring of the newest samples, numbered from 1 without gaps."""

    def __init__(self, capacity: int) -> None:
        self._ring: deque[RequestSample] = deque(maxlen=capacity)
        self._last = 0
        self.epoch = uuid.uuid4().hex[:12]

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
        )
