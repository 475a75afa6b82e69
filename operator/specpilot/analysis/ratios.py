"""Ratio checks, speculative arm against the arm it is compared with (the control arm, or production's
baseline without one) on the same scope's requests: time per committed token, and the TTFT and
end-to-end quantiles. `compared` names that arm in every reason and evidence line.

Each is a one-sided test of "the ratio is within its threshold" at the level `stats.spent_alpha` gives
look `look` of the scope's pilot, from 1 - confidence per check: the levels of all looks there will
ever be sum to 1 - confidence, so identical arms fail even one window of a check with at most that
chance, however the windows overlap and however long the pilot goes on, and they flip a scope (which
takes failureLimit failing windows in a row) far more rarely.

- Fail: the evidence shows the ratio above its threshold at the look's level.
- Pass: it does not, with at least minSamples usable requests on each arm. "Not shown slower" passes
  (identical arms under a threshold of 1.0 are never shown within it, and must not be held forever);
  the stage gate's minRequests and minDuration are what make promotion wait for enough evidence, and
  the reason says whether the ratio was shown within its threshold or only not shown above it.
- Inconclusive: too few or non-finite values on either arm; it spends no look.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from specpilot.analysis.checks import Check, inconclusive
from specpilot.analysis.stats import (
    BucketQuantile,
    exceedance_pvalue,
    log_ratio_of_sums,
    nearest_rank,
    ratio_interval,
    spent_alpha,
    z_quantile,
)
from specpilot.analysis.window import ArmEngine, ArmRequests
from specpilot.api.reasons import MetricName
from specpilot.api.spec import Analysis, QuantileRatio
from specpilot.api.status import Verdict
from specpilot.wire.buckets import FINE_BUCKETS, FINE_FLOOR_S, FineCounts, fine_bucket_bounds
from specpilot.wire.names import Arm


@dataclass(frozen=True, kw_only=True)
class RatioPolicy:
    """How ratio checks are tested: the spending schedule and the samples each window needs."""

    confidence: float
    failure_limit: int
    min_samples: int

    @classmethod
    def of(cls, analysis: Analysis) -> RatioPolicy:
        return cls(
            confidence=analysis.confidence, failure_limit=analysis.failure_limit, min_samples=analysis.min_samples
        )

    def alpha(self, look: int) -> float:
        """The level spent at look `look` (1-based) of the scope's pilot."""
        return spent_alpha(look, alpha=1 - self.confidence, failure_limit=self.failure_limit)


def time_per_token_check(
    speculative: ArmRequests,
    compared: ArmRequests,
    *,
    compared_arm: Arm,
    max_ratio: float,
    policy: RatioPolicy,
    look: int,
) -> Check:
    """Accumulated decode time over accumulated committed tokens, speculative / compared.

    Log ratio of two ratio estimators, standard error by the delta method from the per-request
    residuals, a one-sided z-test of log(max_ratio)."""
    metric = MetricName.TIME_PER_COMMITTED_TOKEN_RATIO
    arms = {Arm.SPECULATIVE.value: speculative, compared_arm.value: compared}
    for name, arm in arms.items():
        problem = _unusable(arm.decode_seconds, policy.min_samples, name) or _unpaired(arm, name)
        if problem:
            return inconclusive(metric, f"time per committed token: {problem}")
    spec = log_ratio_of_sums(speculative.decode_seconds, speculative.committed_tokens)
    base = log_ratio_of_sums(compared.decode_seconds, compared.committed_tokens)
    if spec is None or base is None:
        return inconclusive(metric, "time per committed token: an arm recorded no decode time")
    log_ratio = spec.value - base.value
    se = math.sqrt(spec.variance + base.variance)
    alpha = policy.alpha(look)
    z_fail, z_within = z_quantile(1 - alpha), z_quantile(policy.confidence)
    ratio, lower, upper = math.exp(log_ratio), math.exp(log_ratio - z_fail * se), math.exp(log_ratio + z_within * se)
    evidence = (
        f"ratio {ratio:.3f}, lower bound {lower:.3f} (level {alpha:.2g} at look {look}), "
        f"upper bound {upper:.3f} at {policy.confidence:g}; {spec.count}/{base.count} requests"
    )
    limit = math.log(max_ratio)
    if log_ratio - z_fail * se > limit:
        verdict, reason = Verdict.FAIL, f"time per committed token ratio {ratio:.3f} is shown above {max_ratio:g}"
    elif log_ratio + z_within * se <= limit:
        verdict, reason = Verdict.PASS, f"time per committed token ratio {ratio:.3f} is shown within {max_ratio:g}"
    else:
        verdict, reason = Verdict.PASS, f"time per committed token ratio {ratio:.3f} is not shown above {max_ratio:g}"
    return Check(metric=metric, verdict=verdict, observed=ratio, threshold=max_ratio, evidence=evidence, reason=reason)


def quantile_check(
    metric: MetricName,
    speculative: Sequence[float],
    compared: Sequence[float],
    *,
    compared_arm: Arm,
    limit: QuantileRatio,
    policy: RatioPolicy,
    look: int,
) -> Check:
    """The speculative arm's q-quantile against max_ratio x the compared arm's.

    A precedence test: count the speculative values above max_ratio x the compared arm's nearest-rank
    q-quantile; with a ratio at the threshold that count is beta-binomial whatever the latency
    distribution, and a tail of them shows the ratio above it. A window of 200 requests holds two
    values above its p99, so p99 checks flip on clear tail regressions, not on noise."""
    label = f"{_LABEL[metric]} p{limit.quantile * 100:g}"
    for name, values in ((Arm.SPECULATIVE.value, speculative), (compared_arm.value, compared)):
        problem = _unusable(values, policy.min_samples, name)
        if problem:
            return inconclusive(metric, f"{label}: {problem}")
    spec, base = sorted(speculative), sorted(compared)
    base_q, spec_q = nearest_rank(base, limit.quantile), nearest_rank(spec, limit.quantile)
    if base_q <= 0:
        return inconclusive(metric, f"{label}: the {compared_arm} arm's quantile is zero")
    cut = limit.max_ratio * base_q
    above = len(spec) - bisect_right(spec, cut)
    rank = max(1, math.ceil(limit.quantile * len(base)))
    p_value = exceedance_pvalue(above, len(spec), rank=rank, reference=len(base))
    alpha = policy.alpha(look)
    ratio = spec_q / base_q
    evidence = (
        f"{above} of {len(spec)} speculative above {limit.max_ratio:g} x {compared_arm} {label} ({cut:.4g}s); "
        f"p={p_value:.2g} (level {alpha:.2g} at look {look}); {len(spec)}/{len(base)} requests"
    )
    if p_value < alpha:
        verdict, reason = Verdict.FAIL, f"{label} ratio {ratio:.3f} is shown above {limit.max_ratio:g}"
    else:
        verdict, reason = Verdict.PASS, f"{label} ratio {ratio:.3f} is not shown above {limit.max_ratio:g}"
    return Check(
        metric=metric, verdict=verdict, observed=ratio, threshold=limit.max_ratio, evidence=evidence, reason=reason
    )


_LABEL = {MetricName.TTFT_RATIO: "TTFT", MetricName.END_TO_END_RATIO: "end-to-end"}


def _unusable(values: Sequence[float], min_samples: int, arm: str) -> str | None:
    if len(values) < min_samples:
        return f"the {arm} arm has {len(values)} usable requests, fewer than minSamples {min_samples}"
    # One pass each: a NaN or an infinity anywhere makes the sum non-finite.
    if not math.isfinite(sum(values)) or min(values) < 0:
        return f"the {arm} arm reported non-finite or negative times"
    return None


def _unpaired(arm: ArmRequests, name: str) -> str | None:
    if len(arm.committed_tokens) != len(arm.decode_seconds):
        return f"the {name} arm's decode times and committed tokens are not paired"
    if min(arm.committed_tokens) <= 0:
        return f"the {name} arm reported requests without committed tokens"
    return None


def inter_token_latency_check(
    speculative: ArmRequests,
    compared: ArmRequests,
    *,
    engines: tuple[ArmEngine, ArmEngine],
    compared_arm: Arm,
    limit: QuantileRatio,
    min_samples: int,
) -> Check:
    """The gap between streamed chunks at the limit's quantile, speculative over compared.

    From the router's chunk gaps of the scope's streams when each arm has at least `min_samples` ok
    streams with gaps: per scope, each quantile exact to a fine bucket (2.9%). Else from the engines'
    inter-token-latency histograms (`engines`: speculative, then compared), arm-wide, for traffic that
    is not streamed and routers that do not count gaps. Either way each quantile is known only to lie in
    its bucket, so the ratio only to lie in the interval the two buckets allow (`stats.ratio_interval`):
    the check fails when that whole interval is above max_ratio, passes when it is all within, and is
    inconclusive when it straddles max_ratio (vLLM's edges at 25 and 50 ms read p99s just below each
    as a ratio of 2 whatever the gaps were). No look is spent: a stream's gaps are not independent
    draws, and the histograms hold no per-request values, so neither is tested as a sample. A
    speculative step delivers several tokens at once, so its gaps are longer by nature; the default
    limit (2x) is loose for that reason."""
    found = gap_quantiles(
        speculative,
        compared,
        engines=engines,
        compared_arm=compared_arm,
        quantile=limit.quantile,
        min_samples=min_samples,
    )
    if isinstance(found, str):
        return inconclusive(MetricName.INTER_TOKEN_LATENCY_RATIO, found)
    spec, base, source = found
    return _interval_check(spec, base, source=source, compared_arm=compared_arm, limit=limit)


def gap_quantiles(
    speculative: ArmRequests,
    compared: ArmRequests,
    *,
    engines: tuple[ArmEngine, ArmEngine],
    compared_arm: Arm,
    quantile: float,
    min_samples: int,
) -> tuple[BucketQuantile, BucketQuantile, str] | str:
    """Each arm's gap between streamed chunks at `quantile` (speculative, then compared) and a sentence
    naming where it was read: the router's chunk gaps of the scope when each arm has `min_samples` ok
    streams with gaps, else the engines' histograms arm-wide (`engines`: speculative, then compared);
    or why neither can tell. The check and the evidence read the same figures."""
    label = f"inter-token latency p{quantile * 100:g}"
    streams = f"{speculative.gap_streams}/{compared.gap_streams}"
    if min(speculative.gap_streams, compared.gap_streams) >= min_samples:
        spec, base = (_gap_quantile(arm.chunk_gaps, quantile) for arm in (speculative, compared))
        gaps = f"{speculative.chunk_gaps.total}/{compared.chunk_gaps.total}"
        return spec, base, f"the router's chunk gaps of the scope: {gaps} gaps over {streams} streams"
    if speculative.routed < min_samples:
        return (
            f"{label}: {speculative.routed} requests of the scope on the speculative arm, "
            f"fewer than minSamples {min_samples}"
        )
    for name, engine in zip((Arm.SPECULATIVE.value, compared_arm.value), engines, strict=True):
        if engine.inconclusive:
            return f"{label}: {name} engines: {engine.inconclusive}"
        if engine.inter_token_latency is None or not math.isfinite(engine.inter_token_latency.value):
            return f"{label}: no {name} engine steps in the window"
    spec_q, base_q = (engine.inter_token_latency for engine in engines)
    assert spec_q is not None and base_q is not None
    source = (
        f"the engines' histograms, arm-wide: the router counted chunk gaps on {streams} streams of the scope, "
        f"fewer than minSamples {min_samples}"
    )
    return spec_q, base_q, source


def _gap_quantile(gaps: FineCounts, q: float) -> BucketQuantile:
    """The q-quantile of gaps counted in fine buckets, at its bucket's geometric middle; the lowest bucket
    holds every shorter gap (events read together are a gap of zero), the highest every longer one."""
    bounds = gaps.quantile(q)
    assert bounds is not None, "a stream with gaps counted some"
    low, high = bounds
    return BucketQuantile(
        value=math.sqrt(low * high),
        low=low if low > FINE_FLOOR_S else 0.0,
        high=high if high < fine_bucket_bounds(FINE_BUCKETS - 1)[1] else math.inf,
    )


def _interval_check(
    spec: BucketQuantile, base: BucketQuantile, *, source: str, compared_arm: Arm, limit: QuantileRatio
) -> Check:
    """The verdict on the ratio of two quantiles by the interval their buckets allow."""
    metric = MetricName.INTER_TOKEN_LATENCY_RATIO
    label = f"inter-token latency p{limit.quantile * 100:g}"
    if base.value <= 0:
        return inconclusive(metric, f"{label}: the {compared_arm} arm's quantile is zero", evidence=source)
    ratio = spec.value / base.value
    low, high = ratio_interval(spec, base)
    between = f"between {_end(low)} and {_end(high)}"
    evidence = (
        f"speculative {_ms(spec.value)} ms in {_bucket_ms(spec)}, {compared_arm} {_ms(base.value)} ms "
        f"in {_bucket_ms(base)} ({source}): ratio {ratio:.3f}, {between} as the buckets allow"
    )
    if low > limit.max_ratio:
        verdict, reason = Verdict.FAIL, f"{label} ratio {ratio:.3f} is above {limit.max_ratio:g} ({between})"
    elif high <= limit.max_ratio:
        verdict, reason = Verdict.PASS, f"{label} ratio {ratio:.3f} is within {limit.max_ratio:g} ({between})"
    else:
        verdict = Verdict.INCONCLUSIVE
        reason = (
            f"{label} ratio {ratio:.3f} against {limit.max_ratio:g}: the buckets cannot resolve it: "
            f"{compared_arm} p{limit.quantile * 100:g} in {_bucket_ms(base)} ms, speculative in {_bucket_ms(spec)} ms, "
            f"ratio {between}"
        )
    return Check(
        metric=metric,
        verdict=verdict,
        observed=ratio,
        threshold=limit.max_ratio,
        evidence=evidence,
        reason=reason,
        hard=False,
    )


def _bucket_ms(quantile: BucketQuantile) -> str:
    """The quantile's bucket in milliseconds, as (low, high]."""
    low, high = (_ms(edge) for edge in (quantile.low, quantile.high))
    return f"({low}, {high}]"


def _ms(seconds: float) -> str:
    """Seconds in milliseconds: three figures, whole from a second, or +Inf and -Inf."""
    if math.isinf(seconds):
        return f"{seconds:+}".replace("inf", "Inf")
    return f"{seconds * 1000:.3g}" if abs(seconds) < 1 else f"{seconds * 1000:.0f}"


def _end(ratio: float) -> str:
    """An end of a ratio's interval: three figures, whole above 1000, or +Inf."""
    if math.isinf(ratio):
        return "+Inf"
    return f"{ratio:.3g}" if ratio < 1000 else f"{ratio:.0f}"
