"""A decision per scope and one for the pilot, from the evidence store, with sentences of reasons.

The speculative arm is compared with the control arm (the baseline's engine at its size and share),
or, for a pilot without one, with production's baseline; only at the same offered load, never
beyond the loads the compared arm ran at (`bands.compare`). A scope is decided by the first of an
ordered list of small rules (`RULES`) over its facts (`Facts`), each alone; the order, and why, is
stated once, above `RULES` (docs/reference/decision-rules.md is generated from it). An adoption in
low-load windows states what bounds it (`Bound`: speed, the TTFT limit, end-to-end time, a latency or
error limit, or a load not measured) with its figure; a flip for a latency or error limit above the wins
brackets where that limit fails (`limitFailure`), and only a flip for speed brackets the crossover.

A band is a win only when speculation is faster by `bands.MIN_GAIN` or more, beyond the spread of
both arms' windows at analysis.confidence: two identical arms are never adopted on noise. A thin band
above the full ones (fewer than `bands.MIN_INDEPENDENT` windows' worth of requests) is reported and
decided on nowhere: no adoption reaches its loads, no crossover is read against it (its few windows
understate its spread), and it dilutes no win below it. A thin band faster as a win is, with no full win
beside it, is evidence with a remedy (InsufficientEvidence: a longer stage, or the rehearsal up to a flip).

Every adoption states the share of production's windows whose load lies within it.

Where the pilot runs an alternative arm (the speculative arm's GPU budget spent without speculation,
at the same share), each scope's decision also says whether those GPUs do better without speculation:
the alternative against the speculative arm in the same load bins, tested both ways as a band's win
is (`judge_alternative`). It is stated beside the outcome and does not change it.

The pilot adopts in low-load windows if any scope does (at the lowest limit: the engine's
speculation cannot differ per scope), adopts within the envelope of its adopting scopes if those
all win at every load, and defers otherwise, for the reason most of its scopes share.

Pure: takes the evidence and the fallback records, returns the status models.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from itertools import takewhile

from specpilot.analysis.bands import (
    MIN_GAIN,
    MIN_INDEPENDENT,
    Band,
    Comparison,
    Crossover,
    bands,
    compare,
    counts_quantile,
    crossover,
)
from specpilot.analysis.evidence import (
    BINS_PER_OCTAVE,
    ArmTotals,
    Evidence,
    ScopeEvidence,
    add_counts,
    bin_bounds,
    load_bin,
    production_quantile,
    rehearsal_peak,
    ttft_bucket_bounds,
)
from specpilot.analysis.scheduled import ScheduledArm, judge_schedule
from specpilot.analysis.stats import exceedance_pvalue
from specpilot.api.reasons import FallbackReason, MetricName
from specpilot.api.spec import QuantileRatio, SpeculationPilotSpec, Thresholds
from specpilot.api.status import (
    AdoptionBound,
    AlternativeDecision,
    AlternativeVerdict,
    Bound,
    Decision,
    DecisionOutcome,
    DecisionTrigger,
    DeferReason,
    Envelope,
    FallbackRecord,
    LimitFailure,
    LoadSpan,
    RehearsalStatus,
    ScopeDecision,
    ScopeState,
    ScopeStatus,
)
from specpilot.wire.names import Arm

DEFAULT_TTFT = Thresholds().ttft
MIN_END_TO_END_GAIN = MIN_GAIN  # below 3% end to end, speculation is not worth its memory and risk
SETTLED = frozenset({ScopeState.SPECULATIVE, ScopeState.ROLLED_BACK})


@dataclass(frozen=True, kw_only=True)
class DecodeShare:
    """Where a scope's request time goes on the compared arm, and what the decode gain implies."""

    ttft: float  # mean time to first token, seconds (queue and prefill, as the router sees them)
    decode: float  # mean decode time (first to last token), seconds
    e2e: float  # mean end-to-end time, seconds
    share: float  # decode / e2e
    decode_ratio: float | None  # speculative / compared time per committed token
    observed_gain: float | None  # compared / speculative mean end-to-end time

    def at(self, comparisons: Sequence[Comparison]) -> DecodeShare:
        """The decode ratio and the observed gain read over `comparisons`' matched bands, the loads a
        decision is about (every window's totals include loads it does not adopt or refuse at)."""
        ratio, gain = _pooled_ratio(comparisons), observed_gain(comparisons)
        return replace(self, decode_ratio=ratio, observed_gain=gain) if ratio is not None else self

    @property
    def decode_gain(self) -> float | None:
        return 1 / self.decode_ratio if self.decode_ratio else None

    @property
    def implied_gain(self) -> float | None:
        return implied_gain(self.share, self.decode_ratio) if self.decode_ratio is not None else None


def implied_gain(share: float, decode_ratio: float) -> float:
    """End-to-end gain when the decode share of request time runs `decode_ratio` times as long:
    7 s fixed + 3 s decode, decode halved -> 10 / 8.5 = 1.18x."""
    return 1 / (1 - share * (1 - decode_ratio))


def _tpct(totals: ArmTotals | None) -> float | None:
    return totals.decode_seconds / totals.committed_tokens if totals and totals.committed_tokens else None


def decode_share(scope: ScopeEvidence, compared: Arm = Arm.BASELINE) -> DecodeShare | None:
    """The compared arm's timing breakdown of the scope's ok requests, and the decode ratio and observed
    gain over every window."""
    base = scope.totals.get(compared)
    spec = scope.totals.get(Arm.SPECULATIVE)
    if base is None or not base.ok or not base.decoded or not base.streams or base.e2e_seconds <= 0:
        return None
    e2e = base.e2e_seconds / base.ok
    decode = base.decode_seconds / base.decoded
    base_tpct, spec_tpct = _tpct(base), _tpct(spec)
    return DecodeShare(
        ttft=base.ttft_seconds / base.streams,
        decode=decode,
        e2e=e2e,
        share=min(1.0, decode / e2e),
        decode_ratio=spec_tpct / base_tpct if spec_tpct is not None and base_tpct else None,
        observed_gain=e2e / (spec.e2e_seconds / spec.ok) if spec is not None and spec.ok and spec.e2e_seconds else None,
    )


@dataclass(frozen=True, kw_only=True)
class ArmCost:
    """What one arm costs and delivers for a scope."""

    arm: Arm
    gpus: int | None
    kv_blocks: int | None  # per replica
    on_time_per_gpu_hour: float | None  # best measured band: Little's law throughput x on-time share
    at_load: float | None  # the band's load


@dataclass(frozen=True, kw_only=True)
class CostView:
    arms: tuple[ArmCost, ...]
    kv_cost: float | None  # share of the baseline's KV blocks the draft takes: 1 - spec / base


def _on_time_per_gpu_hour(band: Band, gpus_per_replica: float) -> float | None:
    if not band.e2e or not band.routed or gpus_per_replica <= 0:
        return None
    return band.load / band.e2e * (band.on_time / band.routed) * 3600 / gpus_per_replica


def cost_view(evidence: Evidence, arm_bands: Mapping[Arm, Sequence[Band]], replicas: Mapping[Arm, int]) -> CostView:
    """GPUs, KV blocks and the best on-time completions per GPU-hour, per arm, for one scope."""
    out = []
    for arm in (Arm.BASELINE, Arm.SPECULATIVE, Arm.CONTROL, Arm.ALTERNATIVE):
        gpus = evidence.gpus.get(arm)
        if gpus is None and arm in (Arm.CONTROL, Arm.ALTERNATIVE):
            continue
        # The alternative's bins hold the pair's load per speculative replica (the same share, its own replicas).
        count = replicas.get(Arm.SPECULATIVE if arm is Arm.ALTERNATIVE else arm)
        per_replica = gpus / count if gpus and count else 1.0
        best: tuple[float, float] | None = None
        for band in arm_bands.get(arm, ()):
            value = _on_time_per_gpu_hour(band, per_replica)
            if value is not None and (best is None or value > best[0]):
                best = (value, band.load)
        out.append(
            ArmCost(
                arm=arm,
                gpus=gpus,
                kv_blocks=evidence.kv_blocks.get(arm),
                on_time_per_gpu_hour=best[0] if best else None,
                at_load=best[1] if best else None,
            )
        )
    base, spec = evidence.kv_blocks.get(Arm.BASELINE), evidence.kv_blocks.get(Arm.SPECULATIVE)
    return CostView(arms=tuple(out), kv_cost=1 - spec / base if base and spec is not None else None)


@dataclass(frozen=True, kw_only=True)
class ScopeFindings:
    """A scope's bands, comparisons, crossover, timing breakdown and decision."""

    scope: str
    compared: Arm  # the arm the speculative arm was compared with
    bands: Mapping[Arm, tuple[Band, ...]]
    comparisons: tuple[Comparison, ...]
    crossover: Crossover | None
    share: DecodeShare | None
    decision: ScopeDecision


def _load(value: float) -> str:
    return f"{value:.2f} requests per second per replica"


# What the arm speculation is compared with is called, in decisions and reports.
COMPARED_NAMES = {Arm.CONTROL: "the control arm", Arm.BASELINE: "the production baseline"}


def _arm(arm: Arm) -> str:
    return COMPARED_NAMES[arm]


def _coverage_sentence(comparisons: Sequence[Comparison], compared: Arm) -> str | None:
    """A caveat when the compared arm never ran at some of the speculative arm's loads."""
    unmeasured = [c for c in comparisons if not c.measured]
    if not unmeasured:
        return None
    loads = ", ".join(f"{c.band.low:.2f} to {c.band.high:.2f}" for c in unmeasured)
    return (
        f"{len(unmeasured)} of {len(comparisons)} speculative load band(s) ({loads}) are unmeasured: "
        f"{_arm(compared)} never ran there, and nothing is read beyond the loads it ran at."
    )


def _production_sentence(production: Mapping[int, int], top: float) -> tuple[str | None, float | None]:
    """How much of production's observed time lies at or below `top`, and the sentence saying so."""
    total = sum(production.values())
    if not total:
        return None, None
    # A bin counts as covered when its geometric middle lies at or below the top.
    covered = sum(n for index, n in production.items() if math.prod(bin_bounds(index)) ** 0.5 <= top) / total
    p50, p95, high = (production_quantile(production, q) for q in (0.5, 0.95, 1.0))
    sentence = (
        f"Production's baseline ran at or below {_load(top)} in {covered:.0%} of its windows "
        f"(p50 {p50:.2f}, p95 {p95:.2f}, max {high:.2f})."
    )
    return sentence, covered


def _share_sentence(share: DecodeShare | None) -> str | None:
    if share is None or share.decode_gain is None or share.implied_gain is None:
        return None
    observed = f" (observed {share.observed_gain:.2f}x)" if share.observed_gain else ""
    return (
        f"Decoding is {share.share:.0%} of its request time on the compared arm ({share.decode:.2f} s of "
        f"{share.e2e:.2f} s): the decode-only gain of {share.decode_gain:.2f}x implies "
        f"{share.implied_gain:.2f}x end to end{observed}."
    )


def _figures(share: DecodeShare | None) -> tuple[float | None, float | None, float | None]:
    return (share.share, share.decode_gain, share.implied_gain) if share else (None, None, None)


def _defer(reason: DeferReason, sentence: str, share: DecodeShare | None, *extra: str | None) -> ScopeDecision:
    figures = _figures(share)
    return ScopeDecision(
        outcome=DecisionOutcome.DEFER,
        defer_reason=reason,
        decode_share=figures[0],
        decode_gain=figures[1],
        implied_gain=figures[2],
        reasons=[sentence, *(s for s in (_share_sentence(share), *extra) if s)],
    )


# Flips for what the arms' speed or latency showed: a scope still rolled back for one is not adopted.
_SPEED_FLIPS = frozenset({FallbackReason.THRESHOLD_EXCEEDED, FallbackReason.HARD_LIMIT})


# Metrics whose flip says speculation was slower, not that a latency or error limit failed.
_SPEED_METRICS = frozenset({MetricName.TIME_PER_COMMITTED_TOKEN_RATIO})


def _speed_flip(name: str, fallbacks: Sequence[FallbackRecord]) -> FallbackRecord | None:
    """The scope's latest flip, when it was for speed or latency."""
    latest = next((record for record in reversed(fallbacks) if record.scope == name), None)
    return latest if latest is not None and latest.reason in _SPEED_FLIPS else None


def flip_load(record: FallbackRecord) -> float | None:
    """Where a flip says speculation lost: the speculative arm's own load in the flipping window, never the
    pair's mean. The router splits a scope's requests at random, so the compared arms' loads differ by
    chance within a window, and time per committed token rises with load on either arm. Speculation
    slower while it carried no more load than the control arm lost at its own load (the control arm
    would be no faster there); while it carried more, its own load is the highest the loss may be put at,
    and the mean would claim the loss at a load neither arm ran."""
    return record.loads.get(Arm.SPECULATIVE)


def _observed(record: FallbackRecord) -> str:
    if record.observed is None or record.threshold is None:
        return ""
    return f", {record.observed:.3g} against {record.threshold:.3g}"


def _ratios(comparisons: Sequence[Comparison]) -> str:
    return ", ".join(f"{c.ratio:.2f}x at {c.band.load:.2f}" for c in comparisons if c.ratio is not None)


def _pooled(comparisons: Sequence[Comparison], figure: Callable[[Band], float | None]) -> tuple[float, float] | None:
    """A band figure summed over the matched bands where both arms have it, each band weighted by its
    windows: (speculative, compared); None where no band has it on both."""
    pairs = [
        (c.band.windows, spec, ref)
        for c in comparisons
        if c.compared is not None and (spec := figure(c.band)) and (ref := figure(c.compared))
    ]
    if not pairs:
        return None
    return sum(n * spec for n, spec, _ in pairs), sum(n * ref for n, _, ref in pairs)


@dataclass(frozen=True, kw_only=True)
class TtftTail:
    """The speculative arm's TTFT quantile against the compared arm's over every request of the matched
    bands, and whether that is shown above the limit."""

    ratio: float
    requests: int  # distinct speculative requests (the counts over the windows' overlap)
    p_value: float  # of "within the limit": the judge's precedence test (`ratios.quantile_check`)


def ttft_tail(comparisons: Sequence[Comparison], *, limit: QuantileRatio, overlap: float) -> TtftTail | None:
    """Pooled from the bands' per-bucket counts, so every request weighs the same (a window's p99 over
    a few dozen requests is its slowest one). Requests count once, not once per window they fall in,
    and a value counts above the limit only when its whole bucket is. None where no matched band has
    TTFTs on both arms."""
    spec: dict[int, int] = {}
    ref: dict[int, int] = {}
    for c in comparisons:
        if c.compared is not None and c.band.ttft and c.compared.ttft:
            spec, ref = add_counts(spec, c.band.ttft), add_counts(ref, c.compared.ttft)
    width = next((c.band.ttft_width for c in comparisons), 1)
    spec_q, ref_q = counts_quantile(spec, limit.quantile, width), counts_quantile(ref, limit.quantile, width)
    if spec_q is None or ref_q is None:
        return None
    cut = limit.max_ratio * ref_q
    above = sum(count for index, count in spec.items() if ttft_bucket_bounds(index)[0] >= cut)
    share = 1 / max(1.0, overlap)
    trials, reference = (max(1, round(sum(counts.values()) * share)) for counts in (spec, ref))
    rank = max(1, math.ceil(limit.quantile * reference))
    p_value = exceedance_pvalue(min(trials, round(above * share)), trials, rank=rank, reference=reference)
    return TtftTail(ratio=spec_q / ref_q, requests=trials, p_value=p_value)


def observed_gain(comparisons: Sequence[Comparison]) -> float | None:
    """The compared arm's mean end-to-end time over the speculative arm's, over matched bands (each
    weighted by its windows): what users saw, at the loads compared."""
    pooled = _pooled(comparisons, lambda band: band.e2e)
    return pooled[1] / pooled[0] if pooled is not None else None


def _seen_sentence(
    gain: float | None, tail: float | None, ttft: QuantileRatio, compared: Arm, top: float
) -> str | None:
    """What users saw at the loads adopted (up to `top`), as the report shows it."""
    parts = []
    if gain is not None:
        parts.append(f"requests finished {gain:.2f}x as fast end to end as on {_arm(compared)}")
    if tail is not None:
        parts.append(
            f"time to first token p{ttft.quantile * 100:g} ran {tail:.2f}x {_arm(compared)}'s "
            f"(limit {ttft.max_ratio:.2f}x)"
        )
    return f"At the loads adopted (measured up to {top:.2f}), {' and '.join(parts)}." if parts else None


@dataclass(frozen=True)
class Blocked:
    """Why a scope's wins are not adopted as they stand, and what bounds an adoption below them."""

    reason: DeferReason
    sentence: str
    bound: Bound


def _adoption_blocked(
    name: str,
    comparisons: Sequence[Comparison],
    compared: Arm,
    *,
    tail: TtftTail | None,
    ttft: QuantileRatio,
    confidence: float,
) -> Blocked | None:
    """Why a scope that decodes faster at `comparisons` is still not adopted: its own figures there
    would contradict it (its end-to-end time, or its TTFT tail above the limit), or its TTFT tail is
    above the limit within its noise, so more windows must decide."""
    gain = observed_gain(comparisons)
    loads = f"every load it wins at (up to {comparisons[-1].band.load:.2f})" if comparisons else "the loads it wins at"
    if gain is not None and gain < 1:
        return Blocked(
            DeferReason.NO_NET_GAIN,
            f"{name}: speculation decodes faster ({_ratios(comparisons)}), yet its requests took longer end to "
            f"end than on {_arm(compared)} over {loads} (observed gain {gain:.2f}x).",
            Bound(kind=AdoptionBound.END_TO_END, observed=gain, limit=1.0),
        )
    if tail is None or tail.ratio <= ttft.max_ratio:
        return None
    runs = (
        f"{name}: its time to first token p{ttft.quantile * 100:g} runs {tail.ratio:.2f}x {_arm(compared)}'s over "
        f"{loads}, above the {ttft.max_ratio:.2f}x limit"
    )
    bound = Bound(
        kind=AdoptionBound.TTFT_LIMIT, metric=MetricName.TTFT_RATIO, observed=tail.ratio, limit=ttft.max_ratio
    )
    if tail.p_value < 1 - confidence:
        return Blocked(
            DeferReason.NO_NET_GAIN, f"{runs}, shown over {tail.requests} requests (p={tail.p_value:.2g}).", bound
        )
    return Blocked(
        DeferReason.INSUFFICIENT_EVIDENCE,
        f"{runs} but not shown above it over {tail.requests} requests at {confidence:g} (p={tail.p_value:.2g}): "
        "more windows decide it.",
        bound,
    )


_VERDICTS = {
    AlternativeVerdict.SPECULATION_BETTER: "speculation is faster at some of the loads both ran at and slower at none",
    AlternativeVerdict.ALTERNATIVE_BETTER: (
        "the same GPUs do better without speculation at some of the loads both ran at, and worse at none"
    ),
    AlternativeVerdict.NO_DIFFERENCE: "neither is measurably faster at any load both ran at",
}
_EACH_WINS = "each is measurably faster at some of the loads both ran at"


def _pooled_ratio(comparisons: Sequence[Comparison]) -> float | None:
    """Time per committed token over the matched bands, the band's arm over the compared one."""
    pooled = _pooled(comparisons, lambda band: band.tpct)
    return pooled[0] / pooled[1] if pooled is not None else None


def judge_alternative(
    name: str, scope: ScopeEvidence, arm_bands: Mapping[Arm, Sequence[Band]], *, overlap: float, confidence: float
) -> AlternativeDecision:
    """The alternative arm of a scope (the same share on the same GPU budget, without speculation, binned
    at the compared pair's load) against the control arm and the speculative arm in the same bins: which
    way of spending the GPUs is faster per committed token. Each band is tested as a band's win is, both
    ways, each way at half of 1 - confidence, so identical arms get a verdict other than NoDifference no
    more often than that; one way of spending them is better where it wins at some band and loses at none."""
    each_way = 1 - (1 - confidence) / 2

    def against(arm: Arm, other: Arm) -> list[Comparison]:
        found = compare(arm_bands[arm], scope.bins.get(other, {}), overlap=overlap, confidence=each_way)
        return [c for c in found if c.measured]

    versus_control = against(Arm.ALTERNATIVE, Arm.CONTROL)
    speculation_first = against(Arm.SPECULATIVE, Arm.ALTERNATIVE)
    alternative_first = against(Arm.ALTERNATIVE, Arm.SPECULATIVE)
    ratio, speculative_ratio = _pooled_ratio(versus_control), _pooled_ratio(speculation_first)
    gain = observed_gain(versus_control)
    independent = sum(c.band.independent for c in speculation_first)
    if independent < MIN_INDEPENDENT:
        return AlternativeDecision(
            verdict=AlternativeVerdict.INSUFFICIENT_EVIDENCE,
            ratio=ratio,
            speculative_ratio=speculative_ratio,
            observed_gain=gain,
            reason=(
                f"{name}: the alternative arm and the speculative arm ran at the same loads for {independent:.1f} "
                f"windows' worth of distinct requests; at least {MIN_INDEPENDENT:g} are needed to compare them."
            ),
        )
    speculation_wins, alternative_wins = (
        any(c.wins for c in found) for found in (speculation_first, alternative_first)
    )
    if speculation_wins and not alternative_wins:
        verdict = AlternativeVerdict.SPECULATION_BETTER
    elif alternative_wins and not speculation_wins:
        verdict = AlternativeVerdict.ALTERNATIVE_BETTER
    else:
        verdict = AlternativeVerdict.NO_DIFFERENCE
    figures = [
        f"ran {ratio:.2f}x the control arm's time per committed token" if ratio is not None else None,
        f"finished requests {gain:.2f}x as fast end to end" if gain is not None else None,
    ]
    alternative = " and ".join(f for f in figures if f) or "was measured"
    return AlternativeDecision(
        verdict=verdict,
        ratio=ratio,
        speculative_ratio=speculative_ratio,
        observed_gain=gain,
        reason=(
            f"{name}: on the same GPUs without speculation, the alternative arm {alternative}; speculation's time "
            f"per committed token ran {_ratios(speculation_first)} the alternative's: "
            f"{_EACH_WINS if speculation_wins and alternative_wins else _VERDICTS[verdict]}."
        ),
    )


def envelope_peak(spec: SpeculationPilotSpec, evidence: Evidence, planned: RehearsalStatus | None) -> float | None:
    """The load an envelope must reach for AdoptWithinEnvelope: the rehearsal's peak, where the pilot
    rehearses one (its ladder's top once planned, which production's busier load while the rehearsal
    runs does not move); None: production's p95 as measured."""
    rehearsal = spec.rehearsal
    if rehearsal is None:
        return None
    ladder = [step.load for step in planned.steps if step.on_ladder] if planned else []
    if ladder:
        return max(ladder)
    return rehearsal_peak(rehearsal.peak.per_replica, rehearsal.peak.production_factor, evidence.production)


def _compared(
    evidence: Evidence, name: str, confidence: float
) -> tuple[dict[Arm, tuple[Band, ...]], tuple[Comparison, ...]]:
    """A scope's bands per arm, and its speculative bands against the compared arm at the same loads."""
    scope = evidence.scopes.get(name, ScopeEvidence())
    arm_bands = {
        arm: tuple(bands(scope.bins.get(arm, {}), overlap=evidence.overlap, ttft_width=evidence.ttft_width))
        for arm in Arm
    }
    comparisons = compare(
        arm_bands[Arm.SPECULATIVE],
        scope.bins.get(evidence.compared, {}),
        overlap=evidence.overlap,
        confidence=confidence,
    )
    return arm_bands, tuple(comparisons)


def crossover_point(evidence: Evidence, name: str) -> float | None:
    """Where a scope's speculation stops winning on the evidence so far, without its interval: what a
    peak rehearsal's crossover step is planned at."""
    found = crossover(_compared(evidence, name, 0.95)[1], confidence=0.95, draws=0)
    return found.load if found is not None else None


@dataclass(frozen=True, kw_only=True)
class Facts:
    """What one scope's decision is drawn from, gathered once; the rules read it and change nothing."""

    name: str
    evidence: Evidence
    compared: Arm  # the arm the speculative arm is compared with
    comparisons: tuple[Comparison, ...]
    measured: tuple[Comparison, ...]  # those where the compared arm ran, in bands full enough to decide on
    wins: tuple[Comparison, ...]
    crossing: Crossover | None
    share: DecodeShare | None  # the timing breakdown; its decode ratio and observed gain over `measured`
    flipped_for: frozenset[FallbackReason]  # every flip's reason
    flip: FallbackRecord | None  # the latest flip, when for speed or latency and the scope stays rolled back
    flip_load: float | None  # the speculative arm's own load in its window (`flip_load`; None: not recorded)
    quality_failed: int  # windows with a failing quality check
    coverage: str | None  # the caveat for bands the compared arm never ran at
    ttft: QuantileRatio
    confidence: float
    peak: float | None  # the load an envelope must reach (None: production's p95)
    gated: bool  # a probe or webhook checks its answers
    thin: Comparison | None = None  # a thin band faster as a win is (`Comparison.thin_win`): only the top one can be
    rehearsal: bool = False  # spec.rehearsal is set: a rolled-back scope's unsettled loads can be rehearsed
    scheduled: ScheduledArm | None = None  # the speculative arm stops drafting above a batch
    look: int = 1  # how many times this decision has been stated: its non-inferiority test's look

    @property
    def wins_everywhere(self) -> bool:
        return len(self.wins) == len(self.measured)

    @property
    def flip_above_wins(self) -> bool:
        """The flip's load lies in a load bin above every winning band's: the other side of a crossover."""
        top = max((c.band.load for c in self.wins), default=None)
        return self.flip_load is not None and top is not None and load_bin(self.flip_load) > load_bin(top)

    def flip_sentence(self) -> str:
        assert self.flip is not None
        at = f" at {_load(self.flip_load)}" if self.flip_load is not None else ""
        return (
            f"its windows flipped it back to ordinary decoding{at} ({self.flip.reason.value} on "
            f"{self.flip.metric.value}{_observed(self.flip)})"
        )

    def tail(self, over: Sequence[Comparison]) -> TtftTail | None:
        return ttft_tail(over, limit=self.ttft, overlap=self.evidence.overlap)

    @property
    def speed_flip(self) -> bool:
        """The flip was for speed (slower windows), not for a latency or error limit."""
        return self.flip is not None and self.flip.metric in _SPEED_METRICS

    def flip_bound(self) -> Bound:
        """What the flip bounds an adoption below it with: speed, or its limit."""
        assert self.flip is not None
        kind = AdoptionBound.SPEED if self.speed_flip else AdoptionBound.LIMIT
        return Bound(kind=kind, metric=self.flip.metric, observed=self.flip.observed, limit=self.flip.threshold)

    def flip_between(self, top: float) -> tuple[str, tuple[float, float] | None, LimitFailure | None]:
        """What lies between the highest win at `top` and the flip's load, in a phrase: for a flip for speed,
        the crossover (its bracket); for a latency or error limit, where that limit fails, which is no
        crossover (`LimitFailure`)."""
        assert self.flip is not None and self.flip_load is not None
        high = self.flip_load
        if self.speed_flip:
            return f"the crossover lies between {top:.2f} and {high:.2f}", (top, high), None
        metric = self.flip.metric
        return (
            f"its {metric.value} limit fails between {top:.2f} and {high:.2f}, where speculation may still decode "
            "faster (no crossover is measured)",
            None,
            LimitFailure(metric=metric, low=top, high=high),
        )

    def blocked(self, over: Sequence[Comparison]) -> Blocked | None:
        return _adoption_blocked(
            self.name, over, self.compared, tail=self.tail(over), ttft=self.ttft, confidence=self.confidence
        )

    def defer(self, reason: DeferReason, sentence: str) -> ScopeDecision:
        return _defer(reason, sentence, self.share, self.coverage)


def _adopt(
    f: Facts,
    outcome: DecisionOutcome,
    sentence: str,
    *,
    top: float,
    crossing: Crossover | None,
    over: Sequence[Comparison],
    bracket: tuple[float, float] | None = None,
    bound: Bound | None = None,
    limit: LimitFailure | None = None,
) -> ScopeDecision:
    """Adopted up to `top` on the bands `over`, with what users saw there and production's share below it;
    the crossover where the arms' curves cross, or only the `bracket` it lies in (a win and a flip for
    speed); what `bound`s it, and where a latency or error `limit` fails above it."""
    production, covered = _production_sentence(f.evidence.production, top)
    share = f.share.at(over) if f.share is not None else None
    figures = _figures(share)
    gain, tail = observed_gain(over), f.tail(over)
    seen = _seen_sentence(gain, tail.ratio if tail is not None else None, f.ttft, f.compared, top)
    speed = None if f.gated else f"{f.name}'s adoption rests on speed alone: no probe or webhook checked its answers."
    return ScopeDecision(
        outcome=outcome,
        max_load=top,
        crossover_load=crossing.load if crossing else None,
        crossover_low=crossing.low if crossing else bracket[0] if bracket else None,
        crossover_high=crossing.high if crossing else bracket[1] if bracket else None,
        limit_failure=limit,
        bound=bound,
        observed_gain=gain,
        ttft_ratio=tail.ratio if tail is not None else None,
        production_covered=covered,
        reasons=[sentence, *(s for s in (speed, seen, production, _share_sentence(share), f.coverage) if s)],
        decode_share=figures[0],
        decode_gain=figures[1],
        implied_gain=figures[2],
    )


def _held(f: Facts, over: Sequence[Comparison], why: Blocked) -> ScopeDecision:
    """`over` blocked for `why`: adopted below the highest load up to which its own figures agree
    (the longest run from the lowest load with enough evidence that is not blocked), bounded by what
    blocks it above, else deferred."""
    for end in range(len(over) - 1, 0, -1):
        run = over[:end]
        if sum(c.band.independent for c in run) < MIN_INDEPENDENT:
            break
        if f.blocked(run) is None:
            top = run[-1].band.load
            sentence = f"{why.sentence} Over the loads up to {_load(top)} it holds: adopt speculation below that load."
            return _adopt(
                f,
                DecisionOutcome.ADOPT_IN_LOW_LOAD_WINDOWS,
                sentence,
                top=top,
                crossing=None,
                over=run,
                bound=why.bound,
            )
    return _defer(why.reason, why.sentence, f.share, f.coverage).model_copy(update={"bound": why.bound})


# Evidence short of a decision at or below a flip (a thin win, or no win) and what would settle it: the
# phrases of `only_thin_wins` and `flipped_without_a_win`, together.

REHEARSAL_FLOOR = 0.25  # a scope flipped back with no win is rehearsed from a quarter of the flip's load up to it


def _full_band(f: Facts) -> int:
    """Windows a band needs to be decided on at this pilot's window overlap (`bands.bands`)."""
    return math.ceil(MIN_INDEPENDENT * max(1.0, f.evidence.overlap) - 1e-9)


def _thin_won(f: Facts, thin: Comparison) -> str:
    return (
        f"speculation ran {thin.ratio or 0:.2f}x {_arm(f.compared)}'s time per committed token at "
        f"{_load(thin.band.load)} over {thin.band.windows} window(s), {thin.band.independent:.1f} windows' worth of "
        f"distinct requests: a win in a band too thin to decide on (a full band needs {_full_band(f)} windows, "
        f"{MIN_INDEPENDENT:g} windows' worth)"
    )


def _rehearsing(f: Facts, span: LoadSpan, purpose: str) -> str:
    climbs = f"from {span.low:.2f} to {span.high:.2f} on its own router, production untouched, {purpose}"
    return (
        f"the rehearsal climbs it {climbs}"
        if f.rehearsal
        else f"with spec.rehearsal set, a rehearsal would climb it {climbs}"
    )


def _rehearsed_below(f: Facts, load: float) -> tuple[float, float] | None:
    """The span of load bins below `load`'s that the rehearsal's router measured the scope in."""
    marked = f.evidence.scopes.get(f.name, ScopeEvidence()).rehearsed
    below = [index for index, count in marked.items() if count and index < load_bin(load)]
    return (bin_bounds(min(below))[0], bin_bounds(max(below))[1]) if below else None


def _found_by_rehearsal(f: Facts, over: Sequence[Comparison]) -> str:
    marked = f.evidence.scopes.get(f.name, ScopeEvidence()).rehearsed
    found = any(marked.get(index) for c in over for index in range(c.band.first, c.band.last + 1))
    return " (found by the rehearsal's router, below the flip)" if f.flip is not None and found else ""


# The rules, each alone: a decision with its sentence, or None to pass to the next (`RULES` orders them).


def quality_regressed(f: Facts) -> ScopeDecision | None:
    """A quality gate failed in a window, or flipped the scope back."""
    quality = f.flipped_for & {FallbackReason.QUALITY_REGRESSION, FallbackReason.CRITICAL_WEBHOOK_FAILED}
    if not quality and not f.quality_failed:
        return None
    what = f"{f.quality_failed} window(s) with a failing quality check" if f.quality_failed else ""
    flipped = "it was flipped back for " + " and ".join(sorted(quality)) if quality else ""
    detail = "; ".join(part for part in (what, flipped) if part)
    return _defer(DeferReason.QUALITY_REGRESSION, f"{f.name}: quality regressed ({detail}).", f.share)


def out_of_kv_cache(f: Facts) -> ScopeDecision | None:
    """The scope was flipped back for the speculative arm's KV cache."""
    if FallbackReason.KV_CACHE_PRESSURE not in f.flipped_for:
        return None
    blocks = f.evidence.kv_blocks
    detail = (
        f"; the draft leaves it {blocks[Arm.SPECULATIVE]} KV blocks per replica against the baseline's "
        f"{blocks[Arm.BASELINE]}"
        if Arm.SPECULATIVE in blocks and Arm.BASELINE in blocks
        else ""
    )
    sentence = f"{f.name}: the speculative arm ran out of KV cache and the scope was flipped back{detail}."
    return _defer(DeferReason.MEMORY_PRESSURE, sentence, f.share)


def only_thin_wins(f: Facts) -> ScopeDecision | None:
    """Faster only in a band too thin to decide on (`Comparison.thin_win`), with no flip at or below its
    load: neither a win nor the lack of one. InsufficientEvidence, saying what would settle it: a longer
    stage at that load (the windows a full band needs), or, for a scope flipped back above it, the rehearsal
    from the thin win's load to the flip's (`rehearse`)."""
    thin = f.thin
    if f.wins or thin is None or (f.flip_load is not None and load_bin(f.flip_load) <= load_bin(thin.band.load)):
        return None
    won = f"{f.name}: {_thin_won(f, thin)}"
    longer = f"a stage of {_full_band(f)} windows or more at that load would settle it"
    if f.flip is None:
        return f.defer(DeferReason.INSUFFICIENT_EVIDENCE, f"{won}; {longer}.")
    if f.flip_load is None:
        sentence = (
            f"{won}, and {f.flip_sentence()}, at a load not recorded; {longer.replace('a stage', 'a first stage')}."
        )
        return f.defer(DeferReason.INSUFFICIENT_EVIDENCE, sentence)
    span = LoadSpan(low=thin.band.load, high=f.flip_load)
    first = longer.replace("a stage", "a first stage")
    remedy = (
        f"{_rehearsing(f, span, 'to settle it')} ({first} too)"
        if f.rehearsal
        else f"{first}, or {_rehearsing(f, span, 'to settle it')}"
    )
    sentence = f"{won}, and {f.flip_sentence()}: whether it wins below {f.flip_load:.2f} is unsettled; {remedy}."
    return f.defer(DeferReason.INSUFFICIENT_EVIDENCE, sentence).model_copy(update={"rehearse": span})


def flipped_without_a_win(f: Facts) -> ScopeDecision | None:
    """Flipped back for speed or latency and faster at no load measured: the flip is the evidence that
    it loses, not too little of it. Below the flip's load, where the live stages measured nothing, the
    rehearsal climbs from `REHEARSAL_FLOOR` of it up to it (`rehearse`), and once it ran the decision says
    whether a low-load window was found (a win below the flip: the rules that follow decide it) or ruled
    out (no win there)."""
    if f.flip is None or f.wins:
        return None
    head = f"{f.name}: {f.flip_sentence()} and it stays rolled back"
    if f.thin is not None:  # at or above the flip's load, or `only_thin_wins` decides
        head += f"; its only faster band is thin and lies at or above that load ({_ratios([f.thin])})"
    else:
        head += "; it wins at no load measured"
    if f.flip_load is None:
        return f.defer(DeferReason.NO_NET_GAIN, f"{head}.")
    rehearsed = _rehearsed_below(f, f.flip_load)
    lowest = min((c.band.load for c in f.measured), default=f.flip_load)
    span = LoadSpan(low=f.flip_load * REHEARSAL_FLOOR, high=f.flip_load)
    if rehearsed is not None:
        tail = (
            f": the rehearsal's router measured it from {rehearsed[0]:.2f} to {rehearsed[1]:.2f}, below that load, "
            "and it wins at none of them: no low-load window was found"
        )
    elif lowest <= span.low:
        tail = f", from {lowest:.2f} up: no low-load window was found"
    else:
        rehearse = _rehearsing(f, span, "so that a low-load window is found or ruled out")
        sentence = f"{head}; below {lowest:.2f} it was never measured: {rehearse}."
        return f.defer(DeferReason.NO_NET_GAIN, sentence).model_copy(update={"rehearse": span})
    return f.defer(DeferReason.NO_NET_GAIN, f"{head}{tail}.")


def flipped_at_an_unknown_load(f: Facts) -> ScopeDecision | None:
    """Flipped back at a load its record does not hold, beside wins at every load measured: where it
    loses cannot be placed. (Measured losses above the wins place it; `wins_below_a_load` reads them.)"""
    if f.flip is None or f.flip_load is not None or not f.wins_everywhere:
        return None
    sentence = (
        f"{f.name}: {f.flip_sentence()} and it stays rolled back; time per committed token reads "
        f"{_ratios(f.measured)} {_arm(f.compared)}'s, but the flip's load was not recorded, so where it loses "
        "cannot be placed against where it wins."
    )
    return f.defer(DeferReason.INSUFFICIENT_EVIDENCE, sentence)


def flipped_at_a_winning_load(f: Facts) -> ScopeDecision | None:
    """Flipped back at a load no higher than where it wins: for a latency or error limit, that limit
    fails there, not speed (LimitFailed); for speed, the windows that flipped it show the crossover at
    or below that load, whatever the pooled bands say (NoNetGain). Either way the wins below the flip's
    load are decided alone by the rules that follow, and adopted there if they hold."""
    if f.flip is None or f.flip_load is None or f.flip_above_wins:
        return None
    flip_bin = load_bin(f.flip_load)
    below = tuple(takewhile(lambda c: c in f.wins and load_bin(c.band.load) < flip_bin, f.measured))
    wins = f"{_ratios(f.wins)} {_arm(f.compared)}'s"
    if f.flip.metric in _SPEED_METRICS:
        reason = DeferReason.NO_NET_GAIN
        fails = (
            f"{f.name}: {f.flip_sentence()}, a load where its bands pooled a win ({wins}): the windows that "
            "flipped it were slower there, so speculation stops paying at or below that load."
        )
    else:
        reason = DeferReason.LIMIT_FAILED
        fails = (
            f"{f.name}: {f.flip_sentence()}, a load where it decodes faster ({wins}): the {f.flip.metric.value} "
            "limit fails there, not speed."
        )
    share = f.share.at(below) if f.share is not None and below else f.share
    alone = replace(f, measured=below, wins=below, flip=None, flip_load=None, share=share)
    held = _first(alone, RULES[RULES.index(too_little_evidence) :]) if below else None
    if held is None or held.outcome is DecisionOutcome.DEFER:
        return f.defer(reason, fails)
    # a limit failed at a load measured: whatever the wins below it reach, adoption stops below it
    reasons = [f"{fails} Below that load: {held.reasons[0]}", *held.reasons[1:]]
    failed = (
        None
        if f.speed_flip or held.max_load is None
        else LimitFailure(metric=f.flip.metric, low=held.max_load, high=f.flip_load)
    )
    update = {"outcome": DecisionOutcome.ADOPT_IN_LOW_LOAD_WINDOWS, "reasons": reasons, "bound": f.flip_bound()}
    return held.model_copy(update={**update, "limit_failure": failed})


def too_little_evidence(f: Facts) -> ScopeDecision | None:
    """Fewer than `bands.MIN_INDEPENDENT` windows' worth of distinct requests at matched loads."""
    if sum(c.band.independent for c in f.measured) >= MIN_INDEPENDENT:
        return None
    seen = [c for c in f.comparisons if c.measured]  # a thin band's windows too: what was measured at all
    independent = sum(c.band.independent for c in seen)
    windows = sum(c.band.windows for c in seen)
    sentence = (
        f"{f.name}: {windows} window(s) measured speculation against {_arm(f.compared)} at the same load, "
        f"{independent:.1f} windows' worth of distinct requests; at least {MIN_INDEPENDENT:g} are needed to "
        "state a decision."
    )
    return f.defer(DeferReason.INSUFFICIENT_EVIDENCE, sentence)


def decode_gain_too_small(f: Facts) -> ScopeDecision | None:
    """Winning everywhere, yet decoding faster by less than an end-to-end gain worth having."""
    decode_gain = f.share.decode_gain if f.share else None
    if not f.wins_everywhere or decode_gain is None or decode_gain >= MIN_END_TO_END_GAIN:
        return None
    sentence = (
        f"{f.name}: speculation decodes only {decode_gain:.2f}x as fast ({_ratios(f.measured)}): less than "
        f"the {MIN_END_TO_END_GAIN:.2f}x end to end it would need even if decoding were all of request time."
    )
    return f.defer(DeferReason.NO_NET_GAIN, sentence)


def bottleneck_elsewhere(f: Facts) -> ScopeDecision | None:
    """Winning everywhere, but decoding is too small a share of request time for the gain to matter."""
    gain = f.share.implied_gain if f.share else None
    if not f.wins_everywhere or f.share is None or gain is None or gain >= MIN_END_TO_END_GAIN:
        return None
    sentence = (
        f"{f.name}: speculation decodes faster at every load measured ({_ratios(f.measured)}), but decoding "
        f"is only {f.share.share:.0%} of request time, so it gains {gain:.2f}x end to end: the bottleneck "
        "is elsewhere."
    )
    return f.defer(DeferReason.BOTTLENECK_ELSEWHERE, sentence)


def contradicted(f: Facts) -> ScopeDecision | None:
    """Winning everywhere, but its own end-to-end or TTFT figures contradict adoption somewhere."""
    why = f.blocked(f.measured) if f.wins_everywhere else None
    return _held(f, f.measured, why) if why is not None else None


def wins_below_the_flip(f: Facts) -> ScopeDecision | None:
    """Winning at every load measured and flipped back at a load above them all. Adopted below the highest
    win: a flip for speed brackets the crossover between that win and the flip's load; one for a latency or
    error limit brackets where that limit fails (`limitFailure`), never the crossover."""
    if not f.wins_everywhere or not f.flip_above_wins or f.flip_load is None:
        return None
    top = max(c.band.load for c in f.measured)
    between, bracket, limit = f.flip_between(top)
    sentence = (
        f"{f.name}: speculation wins at every load measured{_found_by_rehearsal(f, f.measured)}, up to {_load(top)} "
        f"(time per committed token {_ratios(f.measured)} {_arm(f.compared)}'s), and {f.flip_sentence()}: "
        f"{between}; adopt speculation below {top:.2f}."
    )
    return _adopt(
        f,
        DecisionOutcome.ADOPT_IN_LOW_LOAD_WINDOWS,
        sentence,
        top=top,
        crossing=None,
        over=f.measured,
        bracket=bracket,
        bound=f.flip_bound(),
        limit=limit,
    )


# An envelope reaches a load when its highest winning band's load lies within one load bin below it: the
# loads are binned that finely, and production's quantiles are read from those bins.
BIN_RATIO = 2 ** (1 / BINS_PER_OCTAVE)


def envelope_bar(f: Facts) -> tuple[float | None, str]:
    """The load an envelope must reach to be adopted at every load, and what it is."""
    if f.peak is not None:
        return f.peak, "the rehearsal's peak"
    return production_quantile(f.evidence.production, 0.95), "production's p95"


def short_of_the_envelope(f: Facts) -> ScopeDecision | None:
    """Winning everywhere, but not measured up to the load the envelope must reach: the load checked is
    the load stated."""
    if not f.wins_everywhere:
        return None
    bar, what = envelope_bar(f)
    top = max(c.band.load for c in f.measured)
    if bar is None or top * BIN_RATIO >= bar:
        return None
    sentence = (
        f"{f.name}: speculation wins at every load measured against {_arm(f.compared)}, but only up to "
        f"{_load(top)}, more than a load bin below {what} of {bar:.2f}: adopt it below that load; the load it "
        f"must hold was not measured (time per committed token {_ratios(f.measured)})."
    )
    bound = Bound(kind=AdoptionBound.UNMEASURED_LOAD, observed=bar)
    return _adopt(
        f, DecisionOutcome.ADOPT_IN_LOW_LOAD_WINDOWS, sentence, top=top, crossing=None, over=f.measured, bound=bound
    )


def wins_everywhere(f: Facts) -> ScopeDecision | None:
    """Winning at every load measured, up to the envelope's."""
    if not f.wins_everywhere:
        return None
    top = max(c.band.load for c in f.measured)
    bar, what = envelope_bar(f)
    reaches = f", within a load bin of {what} ({bar:.2f})" if bar is not None else ""
    sentence = (
        f"{f.name}: speculation wins at every load measured, up to {_load(top)}{reaches}: time per committed "
        f"token {_ratios(f.measured)} {_arm(f.compared)}'s at the same load, with the quality and latency gates "
        "green."
    )
    return _adopt(f, DecisionOutcome.ADOPT_WITHIN_ENVELOPE, sentence, top=top, crossing=None, over=f.measured)


def wins_below_a_load(f: Facts) -> ScopeDecision | None:
    """Winning from the lowest load up to a load and not above it: adopted below it, at the crossover
    where the arms' curves cross; a flip for speed above the wins bounds the crossover from above, one for
    a latency or error limit whose load lies within the crossover's interval bounds the adoption instead
    (below the highest win, where the limit fails above it)."""
    prefix = list(takewhile(lambda c: c in f.wins, f.measured))
    if not prefix:
        return None
    below = prefix[-1].band.load
    crossing = f.crossing if f.crossing is not None and f.crossing.load >= below else None
    why = f.blocked(prefix)
    if why is not None:
        return _held(f, prefix, why)
    flipped = f.flip_load if f.flip_above_wins else None
    if crossing is not None and flipped is not None and crossing.high > flipped:
        load = min(crossing.load, flipped)
        speed = f.speed_flip
        crossing = replace(crossing, load=load, low=min(crossing.low, load), high=flipped) if speed else None
    measured = f"time per committed token {_ratios(f.measured)} {_arm(f.compared)}'s at the same load."
    bracket, limit, bound = None, None, Bound(kind=AdoptionBound.SPEED)
    found = _found_by_rehearsal(f, prefix)
    if crossing is not None:
        caveat = " Speculation wins again at some load above it, so the curve is not monotone."
        sentence = (
            f"{f.name}: speculation wins{found} below {_load(crossing.load)} ({crossing.confidence:.0%} interval "
            f"{crossing.low:.2f} to {crossing.high:.2f}) and ordinary decoding wins above it: {measured}"
            + (caveat if crossing.non_monotone else "")
        )
    elif flipped is not None:
        between, bracket, limit = f.flip_between(below)
        sentence = (
            f"{f.name}: speculation wins{found} up to {_load(below)} and {f.flip_sentence()}: {between}; {measured}"
        )
        bound = f.flip_bound()
    else:
        sentence = f"{f.name}: speculation wins up to {_load(below)} and is not measurably faster above it: {measured}"
    return _adopt(
        f,
        DecisionOutcome.ADOPT_IN_LOW_LOAD_WINDOWS,
        sentence,
        top=below,
        crossing=crossing,
        over=prefix,
        bracket=bracket,
        bound=bound,
        limit=limit,
    )


def no_gain(f: Facts) -> ScopeDecision:
    """Not measurably faster from the lowest load measured."""
    sentence = (
        f"{f.name}: speculation is not measurably faster at the loads measured: time per committed token "
        f"{_ratios(f.measured)} {_arm(f.compared)}'s at the same load."
    )
    return f.defer(DeferReason.NO_NET_GAIN, sentence)


Rule = Callable[[Facts], ScopeDecision | None]

# A scheduled arm (a draft that stops drafting above a batch) is judged as the config it is, on both sides
# of its switch (`analysis.scheduled`): the phrases of `scheduled_config`, together.


def _in_flight_up_to(f: Facts, load: float) -> tuple[float, float | None] | None:
    """Requests the speculative arm held in flight per replica in the load bin of `load`, or, where that bin
    holds none of its windows, in the highest bin below it that does, with that bin's load. A flip's own
    window is never binned (the scope leaves the arm within the tick that records it), so the batch at a
    flip is read from the windows at or below its load."""
    bins = f.evidence.scopes.get(f.name, ScopeEvidence()).bins.get(Arm.SPECULATIVE, {})
    index = load_bin(load)
    found = max((i for i, cell in bins.items() if i <= index and cell.in_flight.mean is not None), default=None)
    if found is None:
        return None
    cell = bins[found]
    in_flight = cell.in_flight.mean
    assert in_flight is not None
    return in_flight, None if found == index else cell.load.mean


def _schedule_flipped(f: Facts, arm: ScheduledArm) -> ScopeDecision:
    """Flipped back: the schedule failed at a load, named with the batch it ran at there (or at the highest
    load below it where the arm was measured, named)."""
    assert f.flip is not None
    read = _in_flight_up_to(f, f.flip_load) if f.flip_load is not None else None
    held = ""
    if read is not None:
        batch, below = read
        at = f" at {_load(below)}" if below is not None else ""
        side = "above" if batch > arm.switch else "at or below"
        held = f", holding {batch:.1f} requests in flight per replica{at}, {side} its switch"
    return f.defer(
        DeferReason.NO_NET_GAIN,
        f"{f.name}: the scheduled config (drafting up to a batch of {arm.switch}, none above) was flipped back"
        f"{held}: {f.flip_sentence()}. Deploy neither it nor plain speculation at that load.",
    )


def scheduled_config(f: Facts) -> ScopeDecision | None:
    """A scheduled arm: adopted with its schedule when it wins below its switch and is shown no worse than
    the compared arm above it, up to the highest load measured; flipped back, slower above its switch, or
    never measured on one side of it, deferred with what was seen."""
    arm = f.scheduled
    if arm is None:
        return None
    if f.flip is not None:
        return _schedule_flipped(f, arm)
    verdict = judge_schedule(f.measured, arm.switch, confidence=f.confidence, look=f.look)
    named = f"{f.name}: the scheduled config (drafting up to a batch of {arm.switch}, none above)"
    if verdict.worse_above:
        worst = max(verdict.worse_above, key=lambda c: c.ratio or 0.0)
        return f.defer(
            DeferReason.NO_NET_GAIN,
            f"{named} is not shown within {verdict.margin:.0%} of {_arm(f.compared)} above its switch: "
            f"{worst.ratio or 0:.2f}x at {_load(worst.band.load)} ({worst.band.in_flight or 0:.1f} requests in "
            "flight per replica).",
        )
    if not verdict.wins_below:
        return f.defer(
            DeferReason.NO_NET_GAIN if verdict.below else DeferReason.INSUFFICIENT_EVIDENCE,
            f"{named} wins at no load below its switch"
            + (f" ({_ratios(verdict.below)})." if verdict.below else ": no full band was measured below it."),
        )
    if not verdict.measured_above:
        return f.defer(
            DeferReason.INSUFFICIENT_EVIDENCE,
            f"{named} wins below its switch ({_ratios(verdict.wins_below)}), but no full band was measured above "
            "it: a stage at a higher load would show whether it holds even with ordinary decoding there.",
        )
    over = sorted((*verdict.wins_below, *verdict.measured_above), key=lambda c: c.band.load)
    why = f.blocked(over)
    if why is not None:
        return _defer(why.reason, why.sentence, f.share, f.coverage).model_copy(update={"bound": why.bound})
    top = over[-1].band.load
    sentence = (
        f"{named} wins below its switch ({_ratios(verdict.wins_below)} {_arm(f.compared)}'s) and is no worse "
        f"than it above, within {verdict.margin:.0%} ({_ratios(verdict.measured_above)}), up to {_load(top)}: "
        f"deploy it as configured, {arm.schedule}."
    )
    decided = _adopt(f, DecisionOutcome.ADOPT_WITH_SCHEDULE, sentence, top=top, crossing=None, over=over)
    return decided.model_copy(update={"schedule": arm.schedule})


# The order is the policy, stated here once: what defers regardless of speed first (quality, KV cache);
# then a scheduled arm, judged as the config it is on both sides of its switch (a flip, a band slower above
# it, or a side unmeasured defers it); then what thin evidence and a flip say (a thin win alone; a flip with
# no win, at a load not recorded, or at a winning load); then whether the evidence suffices; then whether a
# gain is worth having and its own figures agree; then what speed and a flip above the wins say (below the
# flip, short of the envelope, everywhere, below a load); else no gain. The first rule that decides is the
# decision; a new outcome's rule goes after the rules whose facts it needs settled, with its phrases beside it.
RULES: tuple[Rule, ...] = (
    quality_regressed,
    out_of_kv_cache,
    scheduled_config,
    only_thin_wins,
    flipped_without_a_win,
    flipped_at_an_unknown_load,
    flipped_at_a_winning_load,
    too_little_evidence,
    decode_gain_too_small,
    bottleneck_elsewhere,
    contradicted,
    wins_below_the_flip,
    short_of_the_envelope,
    wins_everywhere,
    wins_below_a_load,
    no_gain,
)


def _first(f: Facts, rules: Sequence[Rule]) -> ScopeDecision | None:
    """The decision of the first rule that decides."""
    return next((d for rule in rules if (d := rule(f)) is not None), None)


def facts(
    name: str,
    evidence: Evidence,
    *,
    comparisons: Sequence[Comparison],
    fallbacks: Sequence[FallbackRecord],
    confidence: float,
    state: ScopeState | None = None,
    ttft: QuantileRatio = DEFAULT_TTFT,
    peak: float | None = None,
    gated: bool = True,
    rehearsal: bool = False,
    scheduled: ScheduledArm | None = None,
    look: int = 1,
) -> Facts:
    """A scope's facts for the rules from its evidence, its comparisons and the pilot's flips."""
    scope = evidence.scopes.get(name, ScopeEvidence())
    measured = tuple(c for c in comparisons if c.measured and c.powered)
    flip = _speed_flip(name, fallbacks) if state is ScopeState.ROLLED_BACK else None
    share = decode_share(scope, evidence.compared)
    return Facts(
        name=name,
        evidence=evidence,
        compared=evidence.compared,
        comparisons=tuple(comparisons),
        measured=measured,
        wins=tuple(c for c in measured if c.wins),
        crossing=crossover(comparisons, confidence=confidence),
        share=share.at(measured) if share is not None and measured else share,
        flipped_for=frozenset(record.reason for record in fallbacks if record.scope == name),
        flip=flip,
        flip_load=flip_load(flip) if flip is not None else None,
        quality_failed=scope.quality_failed,
        coverage=_coverage_sentence(comparisons, evidence.compared),
        ttft=ttft,
        confidence=confidence,
        peak=peak,
        gated=gated,
        thin=next((c for c in comparisons if c.measured and c.thin_win), None),
        rehearsal=rehearsal,
        scheduled=scheduled,
        look=look,
    )


def decide_scope(
    name: str,
    evidence: Evidence,
    *,
    fallbacks: Sequence[FallbackRecord],
    confidence: float,
    state: ScopeState | None = None,
    ttft: QuantileRatio = DEFAULT_TTFT,
    peak: float | None = None,
    gated: bool = True,
    rehearsal: bool = False,
    scheduled: ScheduledArm | None = None,
    look: int = 1,
) -> ScopeFindings:
    """The scope's findings and decision from everything recorded for it; `state` is where the scope
    is now (a scope rolled back for speed or latency is not adopted, whatever its bands say), `ttft`
    the TTFT limit an adopted scope's matched bands must meet, `peak` the load its envelope must
    reach to be adopted at every load (`envelope_peak`; None: production's p95), `gated` whether a
    probe or webhook checks its answers (an adoption without one says it rests on speed alone), and
    `rehearsal` whether spec.rehearsal is set (what is left to rehearse is then stated as planned),
    `scheduled` the speculative arm's schedule where it stops drafting above a batch, and `look` how many
    times the decision has been stated (its non-inferiority test spends its level over them)."""
    arm_bands, comparisons = _compared(evidence, name, confidence)
    found = facts(
        name,
        evidence,
        comparisons=comparisons,
        fallbacks=fallbacks,
        confidence=confidence,
        state=state,
        ttft=ttft,
        peak=peak,
        gated=gated,
        rehearsal=rehearsal,
        scheduled=scheduled,
        look=look,
    )
    decision = _first(found, RULES)
    assert decision is not None  # the last rule always decides
    alternative = (
        judge_alternative(
            name, evidence.scopes.get(name, ScopeEvidence()), arm_bands, overlap=evidence.overlap, confidence=confidence
        )
        if Arm.ALTERNATIVE in evidence.gpus and evidence.compared is Arm.CONTROL
        else None
    )
    return ScopeFindings(
        scope=name,
        compared=found.compared,
        bands=arm_bands,
        comparisons=tuple(comparisons),
        crossover=found.crossing,
        share=found.share,
        decision=decision.model_copy(update={"alternative": alternative}),
    )


def revisions(
    previous: Decision,
    decision: Decision,
    *,
    before: Mapping[str, ScopeDecision | None],
    after: Mapping[str, ScopeDecision],
) -> list[str]:
    """What moved between a stated decision and a new one, worth stating again: an outcome or a defer
    reason, an envelope that moved by a load bin or more, a crossover measured or lost, or one outside
    the stated interval, or the alternative arm's verdict.
    Empty when the new one says the same within its noise (a scope not decided before is not a move)."""
    moved = _outcome_moved("the pilot", previous, decision)
    for name, new in after.items():
        old = before.get(name)
        if old is None:
            continue
        moved.extend(
            _outcome_moved(name, old, new) or _figures_moved(name, old, new) or _alternative_moved(name, old, new)
        )
    return moved


def _alternative_moved(name: str, old: ScopeDecision, new: ScopeDecision) -> list[str]:
    was, now = (d.alternative.verdict if d.alternative else None for d in (old, new))
    return [f"{name}: alternative arm {was} -> {now}"] if was is not None and now is not None and was != now else []


def _outcome_moved(who: str, old: Decision | ScopeDecision, new: Decision | ScopeDecision) -> list[str]:
    if old.outcome is not new.outcome:
        return [f"{who}: {old.outcome.value} -> {new.outcome.value}"]
    if old.defer_reason != new.defer_reason:
        return [f"{who}: Defer for {old.defer_reason} -> {new.defer_reason}"]
    return []


def _figures_moved(name: str, old: ScopeDecision, new: ScopeDecision) -> list[str]:
    out = []
    top, was = new.max_load, old.max_load
    if top is not None and was is not None and abs(math.log2(top / was)) >= 1 / BINS_PER_OCTAVE:
        out.append(f"{name}: envelope {was:.2f} -> {top:.2f} requests per second per replica")
    cross, low, high = new.crossover_load, old.crossover_low, old.crossover_high
    if (old.crossover_load is None) != (cross is None):
        stated = [f"{d.crossover_load:.2f}" if d.crossover_load is not None else "none" for d in (old, new)]
        out.append(f"{name}: crossover {stated[0]} -> {stated[1]}")
    elif cross is not None and low is not None and high is not None and not low <= cross <= high:
        out.append(f"{name}: crossover {old.crossover_load:.2f} -> {cross:.2f}, outside {low:.2f} to {high:.2f}")
    return out


def decision_due(
    scopes: Sequence[ScopeStatus], annotations: Mapping[str, str], *, annotation: str
) -> DecisionTrigger | None:
    """Whether the pilot's decision is stated now: asked for, or every scope has settled."""
    if annotation in annotations:
        return DecisionTrigger.REQUESTED
    if scopes and all(scope.state in SETTLED for scope in scopes):
        return DecisionTrigger.SETTLED
    return None


def _low_load_limit(decision: ScopeDecision) -> float:
    """Where a scope adopted in low-load windows stops: its crossover, or the top of what it won at."""
    return decision.crossover_load or decision.max_load or 0.0


def _bounded_by(name: str, decision: ScopeDecision) -> str:
    """What stops a scope's adoption in low-load windows where it stops, with its figure: the pilot's first
    sentence names it."""
    bound = decision.bound
    if decision.crossover_load is not None:
        return f"the crossover of {name}, above which ordinary decoding is faster"
    won = f"the highest load {name} won at"
    if bound is None:
        return won
    seen = f"{bound.observed or 0:.3g} against {bound.limit or 0:.3g}"
    failed = decision.limit_failure
    match bound.kind:
        case AdoptionBound.TTFT_LIMIT:
            return (
                f"the highest load at which {name}'s TTFT tail holds: bounded by its TTFT limit, "
                f"{bound.observed or 0:.2f}x over every load it wins at against {bound.limit or 0:.2f}x"
            )
        case AdoptionBound.END_TO_END:
            return (
                f"the highest load at which {name}'s requests finish faster end to end: bounded by end-to-end time, "
                f"{bound.observed or 0:.2f}x over every load it wins at"
            )
        case AdoptionBound.LIMIT if failed is not None and bound.metric is not None:
            return (
                f"{won}: bounded by its {bound.metric.value} limit ({seen}), which fails between "
                f"{failed.low:.2f} and {failed.high:.2f}"
            )
        case AdoptionBound.UNMEASURED_LOAD:
            return f"{won}: bounded by a load not measured, {bound.observed or 0:.2f}, which it must hold"
        case AdoptionBound.SPEED if bound.metric is not None:
            return f"{won}: bounded by speed, its windows flipped it back for {bound.metric.value} ({seen})"
        case _:
            return f"{won}: bounded by speed, not measurably faster above it"


@dataclass(frozen=True)
class _Stated:
    """What every pilot decision carries: when and why it was stated, and its scopes' first reasons."""

    trigger: DecisionTrigger
    now: datetime
    scope_reasons: tuple[str, ...]

    def reasons(self, lead: str) -> list[str]:
        return [lead, *self.scope_reasons][:32]


def _adopted_in_low_load(
    stated: _Stated,
    decisions: Mapping[str, ScopeDecision],
    envelope: Envelope | None,
    *,
    low: Sequence[str],
    deferred: Sequence[str],
) -> Decision:
    """Some scopes win only at low load: adopted below the lowest of their limits (those adopted within
    the `envelope` go along at every load measured)."""
    first = min(low, key=lambda name: _low_load_limit(decisions[name]))
    chosen = decisions[first]
    limit = _low_load_limit(chosen)
    what = _bounded_by(first, chosen)
    lead = (
        f"Adopt speculation for {', '.join(low)} in low-load windows: below {_load(limit)} ({what})"
        + (f", and for {', '.join(envelope.scopes)} at every load measured" if envelope is not None else "")
        + (f"; defer {', '.join(deferred)}" if deferred else "")
        + "."
    )
    return Decision(
        outcome=DecisionOutcome.ADOPT_IN_LOW_LOAD_WINDOWS,
        decided_at=stated.now,
        stated_because=stated.trigger,
        envelope=envelope,
        crossover_load=limit,
        crossover_low=chosen.crossover_low,
        crossover_high=chosen.crossover_high,
        limit_failure=chosen.limit_failure,
        bound=chosen.bound,
        reasons=stated.reasons(lead),
    )


def _adopted_within(stated: _Stated, envelope: Envelope, *, deferred: Sequence[str]) -> Decision:
    """Some scopes win at every load measured: adopted up to the lowest of their envelopes."""
    lead = (
        f"Adopt speculation for {', '.join(envelope.scopes)} within the envelope measured, up to "
        f"{_load(envelope.max_load or 0)}" + (f"; defer {', '.join(deferred)}" if deferred else "") + "."
    )
    return Decision(
        outcome=DecisionOutcome.ADOPT_WITHIN_ENVELOPE,
        decided_at=stated.now,
        stated_because=stated.trigger,
        envelope=envelope,
        reasons=stated.reasons(lead),
    )


def _envelope(decisions: Mapping[str, ScopeDecision], names: Sequence[str]) -> Envelope:
    """The envelope of the scopes `names`: up to the lowest of the loads they were adopted up to."""
    tops = [t for t in (decisions[name].max_load for name in names) if t is not None]
    return Envelope(scopes=list(names), max_load=min(tops) if tops else None)


def _adopted_with_schedule(
    stated: _Stated, decisions: Mapping[str, ScopeDecision], *, scheduled: Sequence[str], deferred: Sequence[str]
) -> Decision:
    """Some scopes pay on both sides of the schedule's switch: it is adopted for them, up to the lowest of
    the loads they were measured at (one engine runs one schedule for every scope)."""
    envelope = _envelope(decisions, scheduled)
    schedule = decisions[scheduled[0]].schedule
    lead = (
        f"Adopt the scheduled config for {', '.join(scheduled)}, up to {_load(envelope.max_load or 0)}: "
        f"{schedule}" + (f"; defer {', '.join(deferred)}" if deferred else "") + "."
    )
    return Decision(
        outcome=DecisionOutcome.ADOPT_WITH_SCHEDULE,
        decided_at=stated.now,
        stated_because=stated.trigger,
        envelope=envelope,
        schedule=schedule,
        reasons=stated.reasons(lead),
    )


def _deferred(stated: _Stated, decisions: Mapping[str, ScopeDecision]) -> Decision:
    """No scope adopted: deferred for the reason most scopes were (on a tie, the first in DeferReason)."""
    counts = Counter(d.defer_reason for d in decisions.values() if d.defer_reason is not None)
    order = list(DeferReason)
    reason = min(counts, key=lambda r: (-counts[r], order.index(r))) if counts else DeferReason.INSUFFICIENT_EVIDENCE
    lead = f"Defer speculation: {reason.value} for {counts.get(reason, 0)} of {len(decisions)} scope(s)."
    return Decision(
        outcome=DecisionOutcome.DEFER,
        decided_at=stated.now,
        stated_because=stated.trigger,
        defer_reason=reason,
        reasons=stated.reasons(lead),
    )


def decide_pilot(
    findings: Sequence[ScopeFindings],
    *,
    trigger: DecisionTrigger,
    now: datetime,
    previous: Decision | None = None,
    look: int = 1,
) -> Decision:
    """The pilot's decision from its scopes' at its `look`-th statement; `decided_at` (and `looks`) move
    only when the decision changes."""
    decisions = {f.scope: f.decision for f in findings}
    within = [name for name, d in decisions.items() if d.outcome is DecisionOutcome.ADOPT_WITHIN_ENVELOPE]
    low = [name for name, d in decisions.items() if d.outcome is DecisionOutcome.ADOPT_IN_LOW_LOAD_WINDOWS]
    scheduled = [name for name, d in decisions.items() if d.outcome is DecisionOutcome.ADOPT_WITH_SCHEDULE]
    deferred = [name for name, d in decisions.items() if d.outcome is DecisionOutcome.DEFER]
    stated = _Stated(trigger, now, tuple(d.reasons[0] for d in decisions.values() if d.reasons))
    envelope = _envelope(decisions, within) if within else None
    if scheduled:
        decision = _adopted_with_schedule(stated, decisions, scheduled=scheduled, deferred=deferred)
    elif low:
        decision = _adopted_in_low_load(stated, decisions, envelope, low=low, deferred=deferred)
    elif envelope is not None:
        decision = _adopted_within(stated, envelope, deferred=deferred)
    else:
        decision = _deferred(stated, decisions)
    decision = decision.model_copy(update={"looks": look})
    if previous is not None and previous.model_copy(update={"decided_at": now, "looks": look}) == decision:
        return previous
    return decision
