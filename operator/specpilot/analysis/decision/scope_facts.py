"""The facts a rule reads (`Facts`), gathered once per scope (`facts`): its comparisons with the compared
arm at the same loads, its wins, crossover and flip, and what blocks an adoption over given bands."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specpilot.analysis.bands import Band, Comparison, Crossover, bands, compare, crossover
from specpilot.analysis.decision.gains import DecodeShare, TtftTail, decode_share, observed_gain, ttft_tail
from specpilot.analysis.decision.outcomes import _defer
from specpilot.analysis.decision.phrases import _arm, _coverage_sentence, _flip_sentence, _ratios
from specpilot.analysis.evidence import Evidence, ScopeEvidence, load_bin, rehearsal_peak
from specpilot.analysis.scheduled import ScheduledArm
from specpilot.api.reasons import FallbackReason, MetricName
from specpilot.api.spec import QuantileRatio, SpeculationPilotSpec, Thresholds
from specpilot.api.status import (
    AdoptionBound,
    Bound,
    DeferReason,
    FallbackRecord,
    LimitFailure,
    RehearsalStatus,
    ScopeDecision,
    ScopeState,
)
from specpilot.wire.names import Arm

DEFAULT_TTFT = Thresholds().ttft


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
        against=evidence.compared,
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
        return _flip_sentence(self.flip, self.flip_load)

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
