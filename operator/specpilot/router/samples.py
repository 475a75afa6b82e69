"""Raw per-request samples, bounded in memory, read by the operator with a cursor.

The operator runs its statistical tests on distributions, which histograms cannot give
exactly, so the router keeps the newest `capacity` samples. A reader passes the last ``seq`` it
saw; ``epoch`` changes when the router restarts, which resets the sequence.
"""

from __future__ import annotations

import itertools
import uuid
from collections import deque
from dataclasses import dataclass

from specpilot.router.measure import Sample


@dataclass(frozen=True)
class Page:
    """Samples after a cursor, and how many were lost to the bound before being read."""

    epoch: str
    samples: tuple[Sample, ...]
    next_cursor: int
    dropped: int


class SampleLog:
    """A ring of the newest samples, numbered from 1 without gaps."""

    def __init__(self, capacity: int) -> None:
        self._ring: deque[Sample] = deque(maxlen=capacity)
        self._last = 0
        self.epoch = uuid.uuid4().hex[:12]

    def next_seq(self) -> int:
        """Reserve the sequence number of the next sample to `append`."""
        return self._last + 1

    def append(self, sample: Sample) -> None:
        self._ring.append(sample)
        self._last = sample.seq

    def since(self, cursor: int, limit: int) -> Page:
        """Up to `limit` samples with ``seq > cursor``, oldest first."""
        cursor = max(0, min(cursor, self._last))
        oldest = self._last - len(self._ring) + 1
        dropped = max(0, oldest - cursor - 1)
        start = max(0, cursor + 1 - oldest)
        samples = tuple(itertools.islice(self._ring, start, start + max(0, limit)))
        return Page(self.epoch, samples, samples[-1].seq if samples else cursor, dropped)
