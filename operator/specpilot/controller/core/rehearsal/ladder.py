"""The rehearsal's planned steps: the ladder of loads, how long each step runs and at what rate, the
crossover brackets of rolled-back scopes, and the crossover steps that narrow them. Pure."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta

from specpilot.analysis.evidence import production_quantile, rehearsal_peak
from specpilot.api.spec import Rehearsal, SpeculationPilotSpec
from specpilot.api.status import (
    CrossoverBracket,
    DecisionOutcome,
    RehearsalStatus,
    RehearsalStep,
    ScopeState,
    ScopeStatus,
)


def ladder(
    rehearsal: Rehearsal,
    production: Mapping[int, int],
    *,
    brackets: Sequence[CrossoverBracket] = (),
    climb: bool = True,
) -> tuple[RehearsalStep, ...] | str:
    """The planned steps: evenly spaced over the loads the rehearsed scopes need, then the burst and the
    fallbacks at the top; or why there is no ladder (a peak relative to a production never measured).
    Scopes on speculative decoding (`climb`) need production's median load per replica to the peak; a
    rolled-back scope its crossover interval (`brackets`), from end to end."""
    spans = [(bracket.low, bracket.high) for bracket in brackets]
    if climb or not spans:
        median = production_quantile(production, 0.5)
        peak = rehearsal_peak(rehearsal.peak.per_replica, rehearsal.peak.production_factor, production)
        if peak is None:
            return "production's load was never measured during the live stages, so the peak cannot be derived"
        spans.append((min(median, peak) if median is not None else peak / rehearsal.steps, peak))
    low, peak = min(low for low, _ in spans), max(high for _, high in spans)
    count = rehearsal.steps
    steps = [RehearsalStep(load=round(low + (peak - low) * i / (count - 1), 4)) for i in range(count)]
    if rehearsal.burst is not None:
        steps.append(RehearsalStep(load=round(peak * rehearsal.burst.factor, 4), burst=True))
    steps.append(RehearsalStep(load=steps[count - 1].load, flip=True))
    if rehearsal.restart:
        steps.append(RehearsalStep(load=steps[count - 1].load, restart=True))
    return tuple(steps)


def step_duration(rehearsal: Rehearsal, step: RehearsalStep) -> timedelta:
    if step.burst and rehearsal.burst is not None:
        return rehearsal.burst.duration
    return rehearsal.crossover_step_duration if step.crossover is not None else rehearsal.step_duration


def step_rate(spec: SpeculationPilotSpec, step: RehearsalStep) -> float:
    """The load generator's arrival rate for a step: its load per replica over both rehearsed arms (the
    rehearsal router splits every scope evenly between them, which are the same size)."""
    return step.load * 2 * spec.speculative.replicas


def bracket(scope: ScopeStatus) -> CrossoverBracket | None:
    """The loads a rolled-back scope's decision leaves to rehearse: adopted in low-load windows, the
    crossover between its highest win and the load it flipped back at for speed (or within an interval
    below that load), or where the limit that flipped it fails (`limitFailure`); deferred short of settled
    evidence below its flip (a thin win, or no win), the span it states (`rehearse`). The rehearsal's own
    router runs such a scope against the control arm while production keeps it on ordinary decoding. None
    for any other scope."""
    decision = scope.decision
    if scope.state is not ScopeState.ROLLED_BACK or decision is None:
        return None
    low, high = decision.crossover_low, decision.crossover_high
    if decision.outcome is DecisionOutcome.ADOPT_IN_LOW_LOAD_WINDOWS and decision.limit_failure is not None:
        low, high = decision.limit_failure.low, decision.limit_failure.high
    elif decision.outcome is DecisionOutcome.DEFER and decision.rehearse is not None:
        low, high = decision.rehearse.low, decision.rehearse.high
    elif decision.outcome is not DecisionOutcome.ADOPT_IN_LOW_LOAD_WINDOWS:
        return None
    if low is None or high is None:
        return None
    return CrossoverBracket(scope=scope.name, low=low, high=high) if 0 < low < high else None


def crossover_step(
    rehearsal: Rehearsal,
    status: RehearsalStatus,
    steps: Sequence[RehearsalStep],
    crossover: Callable[[str], float | None],
    *,
    now: datetime,
) -> RehearsalStep | None:
    """The crossover step to run next, as the current step ends the ladder or a crossover step: at the
    crossover of the rehearsed scope with the fewest such steps so far (the lowest crossover first),
    kept within a rolled-back scope's bracket, while one fits within maxDuration with the steps still
    to run; None otherwise."""
    index = status.step
    if not steps[index].held or (index + 1 < len(steps) and steps[index + 1].on_ladder):
        return None
    taken = Counter(step.crossover for step in steps if step.crossover is not None)
    wanted = [scope for scope in status.scopes if taken[scope] < rehearsal.crossover_steps]
    brackets = {found.scope: found for found in status.brackets}
    due = sorted(
        (taken[scope], _within(load, brackets.get(scope)), scope)
        for scope in wanted
        if (load := crossover(scope)) is not None
    )
    if not due:
        return None
    _, load, scope = due[0]
    step = RehearsalStep(load=round(load, 4), crossover=scope)
    rest = sum((step_duration(rehearsal, later) for later in steps[index + 1 :]), timedelta())
    if now + step_duration(rehearsal, step) + rest > (status.started_at or now) + rehearsal.max_duration:
        return None
    return step


def _within(load: float, found: CrossoverBracket | None) -> float:
    return min(max(load, found.low), found.high) if found is not None else load
