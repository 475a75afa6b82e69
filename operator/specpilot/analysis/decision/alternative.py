"""The alternative arm's verdict: whether the speculative arm's GPUs do better without speculation."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from specpilot.analysis.bands import MIN_INDEPENDENT, Band, Comparison, compare
from specpilot.analysis.decision.gains import _pooled_ratio, observed_gain
from specpilot.analysis.decision.phrases import _ratios
from specpilot.analysis.evidence import ScopeEvidence
from specpilot.api.status import AlternativeDecision, AlternativeVerdict
from specpilot.wire.names import Arm

_VERDICTS = {
    AlternativeVerdict.SPECULATION_BETTER: "speculation is faster at some of the loads both ran at and slower at none",
    AlternativeVerdict.ALTERNATIVE_BETTER: (
        "the same GPUs do better without speculation at some of the loads both ran at, and worse at none"
    ),
    AlternativeVerdict.NO_DIFFERENCE: "neither is measurably faster at any load both ran at",
}


_EACH_WINS = "each is measurably faster at some of the loads both ran at"


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
        found = compare(arm_bands[arm], scope.bins.get(other, {}), overlap=overlap, confidence=each_way, against=other)
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
