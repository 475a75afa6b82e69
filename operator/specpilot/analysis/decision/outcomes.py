"""A scope's decision as a rule states it: deferred with its reasons (`_defer`), adopted up to a load
(`_adopt`), or held below the loads where its own figures block it (`_held`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from specpilot.analysis.bands import MIN_INDEPENDENT, Comparison, Crossover
from specpilot.analysis.decision.gains import DecodeShare, observed_gain
from specpilot.analysis.decision.phrases import _load, _production_sentence, _seen_sentence, _share_sentence
from specpilot.api.status import Bound, DecisionOutcome, DeferReason, LimitFailure, ScopeDecision

if TYPE_CHECKING:  # the facts module states its deferrals with `_defer`
    from specpilot.analysis.decision.scope_facts import Blocked, Facts


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
