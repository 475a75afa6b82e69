"""Histogram buckets that the mock vLLM serves and the router's histograms share or extend, and the
fine buckets the router and the operator count latencies in.

vLLM 0.33's bounds (vllm/v1/metrics/buckets.py) for time to first token, inter-token latency and
end-to-end request latency: the mock serves them as vLLM does, and the router's per-scope histograms
use the same bounds (or a superset) so that the router's figures and an engine's compare bucket for
bucket.

The fine buckets (`fine_bucket`) are log-spaced, 2.9% wide from 1 ms up: the router counts each
stream's chunk gaps in them (`FineCounts`, in its samples) and the operator its evidence's times to
first token, so a quantile read from either is exact to one bucket's width.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

TIME_TO_FIRST_TOKEN = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
INTER_TOKEN_LATENCY = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
REQUEST_LATENCY = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)

FINE_PER_OCTAVE = 24  # a fine bucket is 2.9% wide
FINE_FLOOR_S = 0.001  # values below count in the lowest bucket
FINE_BUCKETS = 20 * FINE_PER_OCTAVE  # up to 17 minutes; values above count in the highest


def fine_bucket(seconds: float) -> int:
    """The fine bucket of a time: 1 ms up, FINE_PER_OCTAVE to the octave."""
    index = math.floor(FINE_PER_OCTAVE * math.log2(max(seconds, FINE_FLOOR_S) / FINE_FLOOR_S))
    return min(index, FINE_BUCKETS - 1)


def fine_bucket_bounds(index: int) -> tuple[float, float]:
    """The times fine bucket `index` holds, [low, high)."""
    return FINE_FLOOR_S * 2 ** (index / FINE_PER_OCTAVE), FINE_FLOOR_S * 2 ** ((index + 1) / FINE_PER_OCTAVE)


def coarse_key(index: int, width: int) -> int:
    """The key a fine bucket is counted under when each key spans `width` fine buckets."""
    return index // width * width


@dataclass(frozen=True, slots=True)
class FineCounts:
    """Times counted per fine bucket, sparse: each key is the lowest fine bucket of the `width` (a power
    of two) that it spans."""

    counts: Mapping[int, int] = field(default_factory=dict)
    width: int = 1

    @classmethod
    def pooled(cls, parts: Iterable[FineCounts]) -> FineCounts:
        """Every part's counts together, at the widest part's width."""
        parts = tuple(parts)
        width = max((part.width for part in parts), default=1)
        pooled: Counter[int] = Counter()
        for part in parts:
            pooled.update(part.widened(width).counts)
        return cls(dict(pooled), width)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def bounds(self, key: int) -> tuple[float, float]:
        """The times a key holds, [low, high)."""
        return fine_bucket_bounds(key)[0], fine_bucket_bounds(key + self.width - 1)[1]

    def quantile(self, q: float) -> tuple[float, float] | None:
        """The bounds of the key the q-quantile (nearest rank) lies in; None without counts."""
        rank, seen = max(1, math.ceil(q * self.total)), 0
        for key in sorted(self.counts):
            seen += self.counts[key]
            if seen >= rank:
                return self.bounds(key)
        return None

    def placed(self, q: float) -> float | None:
        """The q-quantile (nearest rank) placed within its key by rank, the key's counts spread evenly
        over its width on a log scale: a key of one count reads its geometric middle, and counts kept in
        wider keys read nearly what finer ones do. None without counts."""
        rank, seen = max(1, math.ceil(q * self.total)), 0
        for key in sorted(self.counts):
            count = self.counts[key]
            if count and seen + count >= rank:
                low, high = self.bounds(key)
                return float(low * (high / low) ** ((rank - seen - 0.5) / count))
            seen += count
        return None

    def widened(self, width: int) -> FineCounts:
        """These counts in keys of `width` fine buckets (a multiple of this width)."""
        if width == self.width:
            return self
        wider: Counter[int] = Counter()
        for index, count in self.counts.items():
            wider[coarse_key(index, width)] += count
        return FineCounts(dict(wider), width)

    def bounded(self, max_keys: int) -> FineCounts:
        """These counts, in keys twice as wide as often as it takes to leave at most `max_keys` of them."""
        out = self
        while len(out.counts) > max(1, max_keys):
            out = out.widened(2 * out.width)
        return out
