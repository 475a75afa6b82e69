"""Quantiles of classic histograms, exactly as PromQL's ``histogram_quantile`` computes them.

An SRE reading a pilot's figures next to a Grafana panel must see the same number, so this
follows Prometheus' ``bucketQuantile`` step by step, special cases included: q < 0 is -Inf,
q > 1 is +Inf, q NaN, fewer than two buckets, no +Inf bucket or no observations are NaN; the
lowest bucket starts at 0 when its bound is positive (else its bound is returned); a rank past
the highest finite bucket is that bucket's bound; buckets with one bound are merged, counts that
differ by a relative 1e-12 are taken as equal and a count below the one before is raised to it.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable

# Relative difference below which two cumulative counts are float noise (Prometheus' value).
_SMALL_DELTA = 1e-12


def histogram_quantile(q: float, buckets: Iterable[tuple[float, float]]) -> float:
    """The q-quantile of (upper bound, cumulative count) buckets, in any order."""
    if math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    ordered = sorted(buckets, key=lambda bucket: bucket[0])
    if not ordered or ordered[-1][0] != math.inf:
        return math.nan
    bounds, counts = _coalesce(ordered)
    _correct_precision(counts)
    _ensure_monotonic(counts)
    if len(bounds) < 2:
        return math.nan
    observations = counts[-1]
    if observations == 0:
        return math.nan
    rank = q * observations
    b = bisect.bisect_left(counts, rank, 0, len(counts) - 1)  # first bucket whose count reaches the rank
    if b == len(counts) - 1:
        return bounds[-2]
    if b == 0 and bounds[0] <= 0:
        return bounds[0]
    start, end, count = 0.0, bounds[b], counts[b]
    if b > 0:
        start = bounds[b - 1]
        count -= counts[b - 1]
        rank -= counts[b - 1]
    # Go divides floats without raising: 0/0 (q = 0 in an empty lowest bucket) is NaN there too.
    return start + (end - start) * (rank / count) if count else math.nan


def _coalesce(ordered: list[tuple[float, float]]) -> tuple[list[float], list[float]]:
    bounds: list[float] = []
    counts: list[float] = []
    for bound, count in ordered:
        if bounds and bounds[-1] == bound:
            counts[-1] += count
        else:
            bounds.append(bound)
            counts.append(count)
    return bounds, counts


def _correct_precision(counts: list[float]) -> None:
    before = counts[0]
    for i in range(1, len(counts)):
        delta = abs(counts[i] - before)
        if delta == 0:
            continue
        if counts[i] and delta / counts[i] <= _SMALL_DELTA:  # Go: delta/0 is +Inf, never small
            counts[i] = before
        else:
            before = counts[i]


def _ensure_monotonic(counts: list[float]) -> None:
    highest = counts[0]
    for i in range(1, len(counts)):
        if counts[i] > highest:
            highest = counts[i]
        elif counts[i] < highest:
            counts[i] = highest
