"""`bucket_quantile`: PromQL's ``histogram_quantile`` point, special cases included, and the bucket
it lies in."""

from __future__ import annotations

import itertools
import math

import pytest

from specpilot.analysis.stats import BucketQuantile
from specpilot.metrics.quantile import bucket_quantile
from specpilot.wire.buckets import INTER_TOKEN_LATENCY

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
def test_the_point_is_promqls(q: float, buckets: list[tuple[float, float]], expected: float) -> None:
    got = bucket_quantile(q, buckets)
    assert (math.nan if got is None else got.value) == pytest.approx(expected, nan_ok=True)


def itl(*counts: float) -> list[tuple[float, float]]:
    """Cumulative buckets over vLLM's inter-token-latency bounds from the count in each, the rest empty."""
    padded = itertools.chain(counts, itertools.repeat(0.0))
    return list(zip((*INTER_TOKEN_LATENCY, INF), itertools.accumulate(padded), strict=False))


@pytest.mark.parametrize(
    ("q", "buckets", "expected"),
    [
        (0.99, itl(0, 1000), BucketQuantile(value=0.02485, low=0.01, high=0.025)),
        (0.99, itl(0, 0, 1000), BucketQuantile(value=0.04975, low=0.025, high=0.05)),
        (0.5, BUCKETS, BucketQuantile(value=1.75, low=1.0, high=2.0)),
        (0.2, BUCKETS, BucketQuantile(value=1.0, low=0.0, high=1.0)),  # on a bucket's count: that bucket
        (0.1, BUCKETS, BucketQuantile(value=0.5, low=0.0, high=1.0)),  # the lowest bucket starts at 0
        (0.9, BUCKETS, BucketQuantile(value=2.0, low=2.0, high=INF)),  # past the highest finite bound
        (0.1, [(-1.0, 20.0), (2.0, 60.0), (INF, 100.0)], BucketQuantile(value=-1.0, low=-INF, high=-1.0)),
    ],
    ids=[
        "itl-p99-just-below-25ms",
        "itl-p99-just-below-50ms",
        "within-a-bucket",
        "on-a-bound",
        "lowest-from-zero",
        "in-inf-bucket",
        "non-positive-lowest",
    ],
)
def test_bucket_quantile_gives_the_point_and_its_bucket(
    q: float, buckets: list[tuple[float, float]], expected: BucketQuantile
) -> None:
    got = bucket_quantile(q, buckets)
    assert got is not None
    assert (got.value, got.low, got.high) == pytest.approx((expected.value, expected.low, expected.high))


@pytest.mark.parametrize("q", [-0.1, 1.1, math.nan])
def test_bucket_quantile_takes_quantiles_only(q: float) -> None:
    with pytest.raises(ValueError, match="between 0 and 1"):
        bucket_quantile(q, BUCKETS)
