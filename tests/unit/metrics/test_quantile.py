"""`histogram_quantile` against PromQL's documented behaviour, special cases included."""

from __future__ import annotations

import math

import pytest

from specpilot.metrics.quantile import histogram_quantile

INF = math.inf
BUCKETS = [(1.0, 20.0), (2.0, 60.0), (INF, 100.0)]


@pytest.mark.parametrize(
    ("q", "buckets", "expected"),
    [
        (0.5, BUCKETS, 1.75),  # rank 50 in (1, 2]: 1 + (50 - 20) / 40
        (0.1, BUCKETS, 0.5),  # lowest bucket interpolated from 0
        (0.2, BUCKETS, 1.0),  # rank on a bucket's count: its upper bound
        (0.6, BUCKETS, 2.0),
        (0.9, BUCKETS, 2.0),  # in the +Inf bucket: the highest finite bound
        (1.0, BUCKETS, 2.0),
        (0.0, BUCKETS, 0.0),
        (0.0, [(1.0, 0.0), (2.0, 10.0), (INF, 10.0)], math.nan),  # 0/0 in an empty lowest bucket, as in Go
        (0.5, [(-1.0, 20.0), (2.0, 60.0), (INF, 100.0)], 1.25),
        (0.1, [(-1.0, 20.0), (2.0, 60.0), (INF, 100.0)], -1.0),  # lowest bound <= 0: that bound
        (0.1, [(0.0, 20.0), (2.0, 60.0), (INF, 100.0)], 0.0),
        (-0.1, BUCKETS, -INF),
        (1.1, BUCKETS, INF),
        (math.nan, BUCKETS, math.nan),
        (0.5, [(1.0, 0.0), (INF, 0.0)], math.nan),  # no observations
        (0.5, [(1.0, 1.0), (2.0, 2.0)], math.nan),  # no +Inf bucket
        (0.5, [(INF, 5.0)], math.nan),  # fewer than two buckets
        (0.5, [], math.nan),
        (0.5, [(INF, 100.0), (2.0, 60.0), (1.0, 20.0)], 1.75),  # any order
        (0.5, [(1.0, 10.0), (1.0, 10.0), (2.0, 40.0), (INF, 40.0)], 1.0),  # equal bounds merged
        (0.75, [(1.0, 20.0), (2.0, 10.0), (3.0, 40.0), (INF, 40.0)], 2.5),  # a dip is raised to the count before
        (1.0, [(1.0, 100.0), (2.0, 100.0 + 1e-11), (INF, 100.0 + 1e-11)], 1.0),  # float noise is no observation
        (0.5, [(0.001, 0.0), (0.005, 0.0), (0.01, 4.0), (INF, 4.0)], 0.0075),
    ],
    ids=[
        "median",
        "lowest-from-zero",
        "on-a-bound",
        "top-finite",
        "in-inf-bucket",
        "q-one",
        "q-zero",
        "q-zero-empty-lowest",
        "negative-lowest-interpolated",
        "negative-lowest",
        "zero-lowest",
        "q-below-zero",
        "q-above-one",
        "q-nan",
        "no-observations",
        "no-inf",
        "only-inf",
        "no-buckets",
        "unsorted",
        "coalesced",
        "monotonic",
        "precision",
        "empty-low-buckets",
    ],
)
def test_histogram_quantile_matches_promql(q: float, buckets: list[tuple[float, float]], expected: float) -> None:
    assert histogram_quantile(q, buckets) == pytest.approx(expected, nan_ok=True)
