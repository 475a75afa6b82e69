"""The rules a scope's decision is drawn from, each alone, and their order (`RULES`): the first that
decides is the decision."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from itertools import takewhile

from specpilot.analysis.bands import MIN_GAIN, MIN_INDEPENDENT, Comparison
from specpilot.analysis.decision.outcomes import _adopt, _defer, _held
from specpilot.analysis.decision.phrases import _arm, _load, _ratios
from specpilot.analysis.decision.schedule_rule import scheduled_config
from specpilot.analysis.decision.scope_facts import _SPEED_METRICS, Facts
from specpilot.analysis.evidence import BINS_PER_OCTAVE, ScopeEvidence, bin_bounds, load_bin, production_quantile
from specpilot.api.reasons import FallbackReason
from specpilot.api.status import (
    AdoptionBound,
    Bound,
    DecisionOutcome,
    DeferReason,
    LimitFailure,
    LoadSpan,
    ScopeDecision,
)
from specpilot.wire.names import Arm

MIN_END_TO_END_GAIN = MIN_GAIN  # below 3% end to end, speculation is not worth its memory and risk


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
