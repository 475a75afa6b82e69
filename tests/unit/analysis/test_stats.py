"""The judge's statistics: the spending schedule, the ratio estimator, the interval of a ratio of
histogram quantiles, and the exact tails."""

from __future__ import annotations

import math
import random

import pytest

from specpilot.analysis.stats import (
    EARLY_SHARE,
    BucketQuantile,
    binomial_sf,
    exceedance_pvalue,
    log_ratio_of_sums,
    nearest_rank,
    ratio_interval,
    spent_alpha,
    z_quantile,
)


@pytest.mark.parametrize("failure_limit", [1, 3, 10], ids=lambda h: f"failureLimit={h}")
def test_spending_sums_to_alpha_over_every_look(failure_limit: int) -> None:
    looks = 200_000
    spent = math.fsum(spent_alpha(t, alpha=0.05, failure_limit=failure_limit) for t in range(1, looks + 1))
    remainder = 0.05 * (1 - EARLY_SHARE) * failure_limit / looks  # what the telescoping sum leaves
    assert spent + remainder == pytest.approx(0.05, rel=1e-9)


def test_spending_gives_the_first_failure_limit_looks_their_share_then_decays() -> None:
    levels = [spent_alpha(t, alpha=0.05, failure_limit=3) for t in range(1, 8)]
    assert levels[0] == levels[1] == levels[2] > levels[3] > levels[4] > levels[5] > levels[6]
    assert sum(levels[:3]) == pytest.approx(0.05 * EARLY_SHARE)
    assert z_quantile(1 - levels[0]) == pytest.approx(2.24, abs=0.01)
    assert z_quantile(1 - spent_alpha(200, alpha=0.05, failure_limit=3)) == pytest.approx(4.77, abs=0.01)


def test_spending_refuses_look_zero() -> None:
    with pytest.raises(ValueError, match="look"):
        spent_alpha(0, alpha=0.05, failure_limit=3)


def test_log_ratio_of_sums_is_the_ratio_estimator_with_its_delta_method_variance() -> None:
    estimate = log_ratio_of_sums([2.0, 4.0, 6.0, 9.0], [1, 2, 3, 4])
    assert estimate is not None
    assert estimate.ratio == pytest.approx(21 / 10)
    r = 21 / 10
    residuals = [2 - r, 4 - 2 * r, 6 - 3 * r, 9 - 4 * r]
    variance_r = 4 * sum(e * e for e in residuals) / 3 / 10**2
    assert estimate.variance == pytest.approx(variance_r / r**2)
    assert estimate.count == 4


@pytest.mark.parametrize(
    ("numerators", "denominators"),
    [([1.0], [1]), ([0.0, 0.0], [1, 1]), ([1.0, 1.0], [0, 0])],
    ids=["one-pair", "no-time", "no-tokens"],
)
def test_log_ratio_of_sums_needs_two_pairs_and_positive_sums(numerators: list[float], denominators: list[int]) -> None:
    assert log_ratio_of_sums(numerators, denominators) is None


@pytest.mark.parametrize(("q", "expected"), [(0.5, 5), (0.95, 10), (0.99, 10), (0.1, 1)])
def test_nearest_rank(q: float, expected: float) -> None:
    assert nearest_rank([float(v) for v in range(1, 11)], q) == expected


def quantile(value: float, low: float, high: float) -> BucketQuantile:
    return BucketQuantile(value=value, low=low, high=high)


@pytest.mark.parametrize(
    ("numerator", "denominator", "expected"),
    [
        (quantile(0.04975, 0.025, 0.05), quantile(0.02485, 0.01, 0.025), (1.0, 5.0)),
        (quantile(0.0875, 0.075, 0.1), quantile(0.02485, 0.01, 0.025), (3.0, 10.0)),
        (quantile(0.1, 0.1, math.inf), quantile(0.02485, 0.01, 0.025), (4.0, math.inf)),
        (quantile(0.04975, 0.025, 0.05), quantile(0.1, 0.1, math.inf), (0.0, 0.5)),
        (quantile(0.04975, 0.025, 0.05), quantile(0.005, 0.0, 0.01), (2.5, math.inf)),
        (quantile(0.0, -math.inf, 0.0), quantile(0.02485, 0.01, 0.025), (0.0, 0.0)),
    ],
    ids=["straddling-edges", "wholly-above", "numerator-unbounded", "denominator-unbounded", "from-zero", "at-zero"],
)
def test_ratio_interval_is_what_the_two_buckets_allow(
    numerator: BucketQuantile, denominator: BucketQuantile, expected: tuple[float, float]
) -> None:
    assert ratio_interval(numerator, denominator) == pytest.approx(expected)


def test_ratio_interval_needs_a_denominator_above_zero() -> None:
    with pytest.raises(ValueError, match="above zero"):
        ratio_interval(quantile(0.03, 0.025, 0.05), quantile(0.0, -math.inf, 0.0))


def _binomial_sf_by_definition(count: int, trials: int, rate: float) -> float:
    return math.fsum(math.comb(trials, x) * rate**x * (1 - rate) ** (trials - x) for x in range(count, trials + 1))


@pytest.mark.parametrize(
    ("count", "trials", "rate"),
    [(0, 10, 0.3), (1, 10, 0.3), (6, 200, 0.01), (3, 200, 0.01), (40, 200, 0.01), (150, 200, 0.5), (5, 5, 0.5)],
)
def test_binomial_sf_matches_its_definition(count: int, trials: int, rate: float) -> None:
    assert binomial_sf(count, trials, rate) == pytest.approx(_binomial_sf_by_definition(count, trials, rate), rel=1e-9)


@pytest.mark.parametrize(
    ("count", "rate", "expected"), [(1, 0.0, 0.0), (0, 0.0, 1.0), (10, 1.0, 1.0), (11, 1.0, 0.0)], ids=str
)
def test_binomial_sf_at_degenerate_rates(count: int, rate: float, expected: float) -> None:
    assert binomial_sf(count, 10, rate) == expected


def _exceedance_by_definition(above: int, trials: int, rank: int, reference: int) -> float:
    a, b = reference - rank + 1, rank

    def beta(x: float, y: float) -> float:
        return math.exp(math.lgamma(x) + math.lgamma(y) - math.lgamma(x + y))

    return math.fsum(math.comb(trials, x) * beta(x + a, trials - x + b) / beta(a, b) for x in range(above, trials + 1))


@pytest.mark.parametrize(
    ("above", "trials", "rank", "reference"),
    [
        (0, 200, 198, 200),
        (1, 200, 198, 200),
        (3, 200, 198, 200),
        (10, 200, 198, 200),
        (12, 200, 190, 200),
        (50, 200, 190, 200),
        (20, 1000, 990, 1000),
        (30, 50, 25, 60),
    ],
)
def test_exceedance_pvalue_matches_the_beta_binomial_tail(above: int, trials: int, rank: int, reference: int) -> None:
    expected = _exceedance_by_definition(above, trials, rank, reference)
    assert exceedance_pvalue(above, trials, rank=rank, reference=reference) == pytest.approx(expected, rel=1e-7)


def test_exceedance_pvalue_is_exact_for_identical_samples() -> None:
    # Under identical distributions the count is beta-binomial whatever the distribution: the test
    # rejects at its level, or less often (the count is discrete), never more.
    rng = random.Random(7)
    level, trials, rejections = 0.05, 4000, 0
    for _ in range(trials):
        reference = sorted(rng.expovariate(1.0) for _ in range(100))
        cut = reference[94]  # rank 95: the nearest-rank p95
        above = sum(rng.expovariate(1.0) > cut for _ in range(100))
        rejections += exceedance_pvalue(above, 100, rank=95, reference=100) < level
    assert rejections / trials <= level + 3 * math.sqrt(level * (1 - level) / trials)
