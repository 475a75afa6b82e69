"""The rule for a scheduled arm (a draft that stops drafting above a batch), with its phrases: judged as
the config it is, on both sides of its switch."""

from __future__ import annotations

from specpilot.analysis.decision.outcomes import _adopt, _defer
from specpilot.analysis.decision.phrases import _arm, _load, _ratios
from specpilot.analysis.decision.scope_facts import Facts
from specpilot.analysis.evidence import ScopeEvidence, load_bin
from specpilot.analysis.scheduled import ScheduledArm, ScheduleVerdict, judge_schedule
from specpilot.api.status import DecisionOutcome, DeferReason, ScopeDecision
from specpilot.wire.names import Arm

# A scheduled arm (a draft that stops drafting above a batch) is judged as the config it is, on both sides
# of its switch (`analysis.scheduled`): the phrases of `scheduled_config`, together.


def _in_flight_up_to(f: Facts, load: float) -> tuple[float, float | None] | None:
    """Requests the speculative arm held in flight per replica in the load bin of `load`, or, where that bin
    holds none of its windows, in the highest bin below it that does, with that bin's load. A flip's own
    window is never binned (the scope leaves the arm within the tick that records it), so a flip recorded
    without its batch (before `FallbackRecord.in_flight`) is read from the windows at or below its load."""
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
    """Flipped back: the schedule failed at a load, named with the batch it ran at there (the flip's own
    window's, where recorded; else the bins' at or below its load, a lower load named)."""
    assert f.flip is not None
    own = f.flip.in_flight.get(Arm.SPECULATIVE)
    if own is not None:
        read: tuple[float, float | None] | None = (own, None)
    elif f.flip_load is not None:
        read = _in_flight_up_to(f, f.flip_load)
    else:
        read = None
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


def _unsettled(f: Facts, verdict: ScheduleVerdict, named: str) -> ScopeDecision:
    """Bands above the switch whose windows cannot yet tell whether it holds within the margin there: the
    evidence is short, and the win below the switch (if any) is stated with what would settle it."""
    loads = ", ".join(
        f"{c.ratio or 0:.2f}x at {_load(c.band.load)} ({c.band.in_flight or 0:.1f} in flight)"
        for c in verdict.unsettled_above
    )
    below = f"wins below its switch ({_ratios(verdict.wins_below)}) and " if verdict.wins_below else ""
    return f.defer(
        DeferReason.INSUFFICIENT_EVIDENCE,
        f"{named} {below}reads {loads} of {_arm(f.compared)}'s above it, but its windows there do not yet show "
        f"it within {verdict.margin:.0%}: a longer stage at that load would settle it.",
    )


def scheduled_config(f: Facts) -> ScopeDecision | None:
    """A scheduled arm: adopted with its schedule when it wins below its switch and is shown no worse than
    the compared arm above it, up to the highest load measured; flipped back, shown slower above its
    switch, or never measured on one side of it, deferred with what was seen; where its windows above
    the switch cannot yet tell, deferred for evidence, its win below stated."""
    arm = f.scheduled
    if arm is None:
        return None
    if f.flip is not None:
        return _schedule_flipped(f, arm)
    verdict = judge_schedule(f.measured, arm.switch, confidence=f.confidence, look=f.look)
    named = f"{f.name}: the scheduled config (drafting up to a batch of {arm.switch}, none above)"
    if verdict.shown_worse:
        worst = max(verdict.shown_worse, key=lambda c: c.ratio or 0.0)
        return f.defer(
            DeferReason.NO_NET_GAIN,
            f"{named} is slower than {_arm(f.compared)} by more than {verdict.margin:.0%} above its switch: "
            f"{worst.ratio or 0:.2f}x at {_load(worst.band.load)} ({worst.band.in_flight or 0:.1f} requests in "
            "flight per replica).",
        )
    if verdict.unsettled_above:
        return _unsettled(f, verdict, named)
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
