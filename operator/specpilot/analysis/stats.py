"""The statistics the judge rests on: an alpha-spending schedule across looks, the ratio of two ratio
estimators, a distribution-free test of a quantile ratio, the interval a ratio of two histogram
quantiles allows, and exact binomial tails.

Why spending: the operator judges the same scope every interval on windows that overlap (window = 5 x
interval shares 80% of its requests with the next one), for hours. A test at a fixed 95% per window
eventually fails identical arms. Spending gives look t of a scope's pilot the level alpha_t, with
sum(alpha_t) = alpha over every look there will ever be, so by the union bound the chance that any
look fails identical arms stays below alpha however the windows overlap and however long the pilot
runs: no independence between windows is assumed. The price is a threshold that grows slowly with the
number of looks; `ratios` says how the judge spends, and `bench/judge.py` measures what it costs.

Pure functions of numbers, stdlib only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import NormalDist

_NORMAL = NormalDist()


# Share of alpha the first failureLimit looks of a pilot spend between them. A speculation config that
# is slower is slower from its first windows, and those are where it must flip within failureLimit + 1
# windows; the rest is spread over every later look, so that a regression appearing once the scope is
# speculative still flips, a few windows later (`bench/judge.py` measures both).
EARLY_SHARE = 0.75


def spent_alpha(look: int, *, alpha: float, failure_limit: int) -> float:
    """The level of look `look` (1-based) in a schedule that spends `alpha` over all looks.

    With h = failure_limit: alpha_t = alpha * EARLY_SHARE / h for the first h looks (a flip needs h
    failing windows in a row, so none of them should be the one that holds it back), then
    alpha * (1 - EARLY_SHARE) * h / (t * (t - 1)), a sum that telescopes to the rest of alpha."""
    if look < 1:
        raise ValueError(f"look must be at least 1, not {look}")
    h = max(failure_limit, 1)
    if look <= h:
        return alpha * EARLY_SHARE / h
    return alpha * (1 - EARLY_SHARE) * h / (look * (look - 1))


def z_quantile(level: float) -> float:
    """The standard normal quantile at `level` (e.g. 0.95 -> 1.645)."""
    return _NORMAL.inv_cdf(level)


@dataclass(frozen=True, slots=True)
class LogRatio:
    """log(sum(numerator) / sum(denominator)) over paired values, and the delta-method variance."""

    value: float
    variance: float
    count: int

    @property
    def ratio(self) -> float:
        return math.exp(self.value)


def log_ratio_of_sums(numerators: Sequence[float], denominators: Sequence[float]) -> LogRatio | None:
    """The ratio estimator r = sum(x) / sum(y) on its log scale, with Var(log r) from the residuals
    e_i = x_i - r * y_i: Var(r) = n * s_e^2 / (sum y)^2. None when a sum is not positive or fewer
    than two pairs leave no variance to estimate."""
    n = len(numerators)
    total_x = math.fsum(numerators)
    total_y = math.fsum(denominators)
    if n < 2 or total_x <= 0 or total_y <= 0:
        return None
    r = total_x / total_y
    residual = math.fsum((x - r * y) ** 2 for x, y in zip(numerators, denominators, strict=True))
    variance_r = n * residual / (n - 1) / total_y**2
    return LogRatio(value=math.log(r), variance=variance_r / r**2, count=n)


def nearest_rank(sorted_values: Sequence[float], q: float) -> float:
    """The q-quantile of ascending values by nearest rank: the ceil(q * n)-th smallest value."""
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[rank - 1]


@dataclass(frozen=True, slots=True, kw_only=True)
class BucketQuantile:
    """A quantile read from a histogram: the interpolated point and the bucket (low, high] it lies in.

    The bucket is all the counts can tell: the point is PromQL's interpolation within it. `high` is
    +inf in the +Inf bucket (where the point is the highest finite bound), `low` -inf below a lowest
    bound that is not positive."""

    value: float
    low: float
    high: float


def ratio_interval(numerator: BucketQuantile, denominator: BucketQuantile) -> tuple[float, float]:
    """The interval of numerator / denominator that the buckets of two non-negative quantities allow:
    the numerator's low over the denominator's high to the numerator's high over the denominator's low.

    A side the buckets leave open is open in the ratio: a denominator in the +Inf bucket puts the low
    end at 0, one in a bucket from zero puts the high end at +inf."""
    if denominator.high <= 0:
        raise ValueError(f"the denominator's bucket must reach above zero, not ({denominator.low}, {denominator.high}]")
    low = max(numerator.low, 0.0) / denominator.high
    high = numerator.high / denominator.low if denominator.low > 0 else math.inf
    return low, high


def exceedance_pvalue(above: int, trials: int, *, rank: int, reference: int) -> float:
    """P(M >= above) when M counts which of `trials` values exceed the `rank`-th smallest of
    `reference` values drawn from the same continuous distribution (a precedence test).

    The reference value cuts off a tail whose mass U is Beta(reference - rank + 1, rank) distributed,
    and M given U is Binomial(trials, U), so M is beta-binomial: exact and distribution-free when the
    two samples share their distribution at the boundary of the null hypothesis."""
    a, b = reference - rank + 1, rank

    def log_pmf(x: int) -> float:
        return _log_choose(trials, x) + _log_beta(x + a, trials - x + b) - _log_beta(a, b)

    def step(x: int) -> float:
        return (trials - x) / (x + 1) * (x + a) / (trials - x - 1 + b)

    return _upper_tail(log_pmf, step, above, trials, mean=trials * a / (a + b))


def binomial_sf(count: int, trials: int, rate: float) -> float:
    """P(X >= count) for X ~ Binomial(trials, rate)."""
    if rate <= 0 or rate >= 1:
        return 1.0 if count <= 0 or (rate >= 1 and count <= trials) else 0.0
    log_rate, log_rest, odds = math.log(rate), math.log1p(-rate), rate / (1 - rate)

    def log_pmf(x: int) -> float:
        return _log_choose(trials, x) + x * log_rate + (trials - x) * log_rest

    def step(x: int) -> float:
        return (trials - x) / (x + 1) * odds

    return _upper_tail(log_pmf, step, count, trials, mean=trials * rate)


def _upper_tail(
    log_pmf: Callable[[int], float], step: Callable[[int], float], above: int, trials: int, *, mean: float
) -> float:
    """P(X >= above) for a unimodal X on 0..trials, given its log pmf and step(x) = pmf(x+1) / pmf(x).

    Sums the shorter side, starting next to the mean and walking away from it, so no term underflows
    before it stops mattering; the walk stops once terms no longer change the sum."""
    if above <= 0:
        return 1.0
    if above > trials:
        return 0.0
    if above <= mean:
        x, term, below = above - 1, math.exp(log_pmf(above - 1)), 0.0
        while True:
            below += term
            if x == 0 or term < below * 1e-16:
                return min(1.0, max(0.0, 1.0 - below))
            x -= 1
            term /= step(x)
    x, term, tail = above, math.exp(log_pmf(above)), 0.0
    while True:
        tail += term
        if x == trials or term < tail * 1e-16:
            return min(1.0, tail)
        term *= step(x)
        x += 1


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def _log_choose(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
