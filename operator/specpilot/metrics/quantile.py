"""Quantiles of classic histograms, as PromQL's ``histogram_quantile`` computes them, with the bucket
each lies in.

An SRE reading a pilot's figures next to a Grafana panel must see the same number, so the point
follows Prometheus' ``bucketQuantile`` step by step, special cases included: fewer than two buckets,
no +Inf bucket or no observations have no quantile (NaN there); the lowest bucket starts at 0 when
its bound is positive (else its bound is the point); a rank past the highest finite bucket is that
bucket's bound; buckets with one bound are merged, counts that differ by a relative 1e-12 are taken
as equal and a count below the one before is raised to it. A q outside [0, 1] is refused (PromQL
answers it with an infinity; a pilot's quantile is validated well inside).

The bucket is what the counts allow; the point is only PromQL's linear guess within it, so a
comparison of two quantiles carries the buckets (`stats.ratio_interval`).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable

from specpilot.analysis.stats import BucketQuantile

# Relative difference below which two cumulative counts are float noise (Prometheus' value).
_SMALL_DELTA = 1e-12


def bucket_quantile(q: float, buckets: Iterable[tuple[float, float]]) -> BucketQuantile | None:
    """The q-quantile of (upper bound, cumulative count) buckets, in any order, with the bucket it lies
    in; None where PromQL's answer is NaN."""
    if not 0 <= q <= 1:
        raise ValueError(f"a quantile is between 0 and 1, not {q}")
    ordered = sorted(buckets, key=lambda bucket: bucket[0])
    if not ordered or ordered[-1][0] != math.inf:
        return None
    bounds, counts = _coalesce(ordered)
    _correct_precision(counts)
    _ensure_monotonic(counts)
    if len(bounds) < 2:
        return None
    observations = counts[-1]
    if observations == 0:
        return None
    rank = q * observations
    b = bisect.bisect_left(counts, rank, 0, len(counts) - 1)  # first bucket whose count reaches the rank
    if b == len(counts) - 1:
        return BucketQuantile(value=bounds[-2], low=bounds[-2], high=math.inf)
    if b == 0 and bounds[0] <= 0:
        return BucketQuantile(value=bounds[0], low=-math.inf, high=bounds[0])
    start, end, count = 0.0, bounds[b], counts[b]
    if b > 0:
        start = bounds[b - 1]
        count -= counts[b - 1]
        rank -= counts[b - 1]
    if not count:  # q = 0 in an empty lowest bucket: 0/0, NaN in Go
        return None
    return BucketQuantile(value=start + (end - start) * (rank / count), low=start, high=end)


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
