"""The peak rehearsal's lifecycle as pure functions: where it stands each tick and the Events of its moves
(its ladder is `ladder`'s, what it renders `manifests`', what each step measured `figures`').

After the live stages (the pilot's decision stated), the rehearsal replays the scopes' own mix through a
router of its own at a ladder of loads, then a burst, then both fallbacks at the ladder's top: routing
(halfway through one more step, the speculative share goes to the control arm) and restart (at the start
of one more, a speculative replica is replaced by one running ordinary decoding). It rehearses the scopes
on speculative decoding, whose ladder runs from production's median load per replica to the peak, and
the scopes rolled back above their wins with a crossover interval to narrow (`bracket`: adopted in
low-load windows, the crossover between the highest win and the flip's load), whose ladder and crossover
steps lie within that interval; together, the ladder spans both. The rehearsal router runs under
`rehearsal_pilot`: its arms are two Services of that name selecting the speculative and control pods,
and its ordinary arm is the control arm, so no rehearsal request can reach a production pod. Meanwhile
the live table sends the rehearsed scopes to production, once production is not saturated (a rolled-back
scope is there already, and stays). Each step's load is a Job of the project's load generator; its
figures are read over the step's last analysis window. Production saturated, a scope flipped since it
began or the time cap stop it at once; its objects go when it is not running.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta

from specpilot.analysis.evidence import Evidence
from specpilot.analysis.rollout import Event, EventType
from specpilot.analysis.window import ArmEngine
from specpilot.api.reasons import Reason
from specpilot.api.spec import Rehearsal, SpeculationPilotSpec
from specpilot.api.status import (
    CrossoverBracket,
    Decision,
    RehearsalPhase,
    RehearsalStatus,
    RehearsalStep,
    RestartFallback,
    RoutingFlip,
    ScopeState,
    ScopeStatus,
    ScopeStepFigures,
)
from specpilot.controller.core.measurements import Measurements
from specpilot.controller.core.rehearsal.figures import StepFigures, arm_figures, capacity_of, figures_of, kept_on_time
from specpilot.controller.core.rehearsal.ladder import bracket, crossover_step, ladder, step_duration
from specpilot.metrics.arm_requests import arm_requests
from specpilot.wire.names import Arm

REHEARSED_ARMS = (Arm.SPECULATIVE, Arm.CONTROL)
MOVE_MARGIN = timedelta(milliseconds=100)  # a tick due at a move lands just past it, not just before


def running(status: RehearsalStatus | None) -> bool:
    """The rehearsal holds the rehearsed scopes' live shares on production and its objects exist."""
    return status is not None and status.phase in (RehearsalPhase.STARTING, RehearsalPhase.RUNNING)


def flipped_at(rehearsal: Rehearsal, status: RehearsalStatus) -> datetime | None:
    """When the routing fallback flips (halfway through its step), while that step runs."""
    if status.phase is not RehearsalPhase.RUNNING:
        return None
    step = status.steps[status.step]
    if not step.flip or step.started_at is None:
        return None
    return step.started_at + step_duration(rehearsal, step) / 2


def next_move(rehearsal: Rehearsal, status: RehearsalStatus | None, now: datetime) -> timedelta | None:
    """How long until the running rehearsal moves by itself (its routing fallback flips, or its step
    ends), so that the tick that moves it comes then and not up to an interval late; None while none is
    ahead."""
    if status is None or status.phase is not RehearsalPhase.RUNNING or not status.steps:
        return None
    step = status.steps[status.step]
    if step.started_at is None:
        return None
    ahead = [step.started_at + step_duration(rehearsal, step)]
    flip = flipped_at(rehearsal, status)
    if flip is not None:
        ahead.append(flip)
    later = [at - now for at in ahead if at > now]
    return min(later) + MOVE_MARGIN if later else None


def restarting(status: RehearsalStatus | None) -> datetime | None:
    """When the restart fallback's step began, while it runs: one speculative replica is down or
    coming back as ordinary decoding."""
    if status is None or status.phase is not RehearsalPhase.RUNNING:
        return None
    step = status.steps[status.step]
    return step.started_at if step.restart else None


def advance(
    spec: SpeculationPilotSpec,
    previous: RehearsalStatus | None,
    *,
    scopes: Sequence[ScopeStatus],
    decision: Decision | None,
    evidence: Evidence,
    saturated: str | None,
    router_ready: bool,
    figures: StepFigures | None,
    flip: RoutingFlip | None = None,
    restart: RestartFallback | None = None,
    requested: bool = False,
    crossover: Callable[[str], float | None] | None = None,
    now: datetime,
) -> RehearsalStatus | None:
    """The rehearsal's next state. `figures` are each rehearsed arm's over the current step's read span
    (None before anything was collected); `flip` and `restart` what the fallbacks' steps measured so far;
    `crossover` a rehearsed scope's crossover on the evidence so far (`crossover_point`), asked only
    as a step ends where a crossover step may follow.
    Due once the decision is stated, on the scopes on speculative decoding; or when `requested`
    (the rehearse annotation) and none runs, on the scopes the speculative arm serves; either way with
    the rolled-back scopes whose decision brackets a crossover (`bracket`)."""
    rehearsal = spec.rehearsal
    if rehearsal is None:
        if running(previous):
            assert previous is not None
            update = {"phase": RehearsalPhase.STOPPED, "finished_at": now, "message": "spec.rehearsal was removed"}
            return previous.model_copy(update=update)
        return previous
    ended = previous is not None and previous.phase in (RehearsalPhase.COMPLETED, RehearsalPhase.STOPPED)
    if previous is None or (requested and ended):
        due, brackets = _due(scopes, decision=decision, requested=requested)
        if not due:
            return previous
        climb = len(due) > len(brackets)
        planned = ladder(rehearsal, evidence.production, brackets=brackets, climb=climb)
        if isinstance(planned, str):
            return _status(RehearsalPhase.STOPPED, planned, now=now, scopes=due)
        previous = RehearsalStatus(
            phase=RehearsalPhase.WAITING,
            message="due: production must take the rehearsed scopes' shares first",
            started_at=now,
            scopes=due,
            brackets=brackets,
            steps=list(planned),
        )
    if previous.phase in (RehearsalPhase.COMPLETED, RehearsalPhase.STOPPED):
        return previous
    stopped = _stop_reason(rehearsal, previous, scopes, saturated, now)
    if stopped is not None:
        return _finish(rehearsal, previous, RehearsalPhase.STOPPED, stopped, now)
    if previous.phase in (RehearsalPhase.WAITING, RehearsalPhase.STARTING):
        if saturated is not None:
            message = f"waiting: production cannot take the rehearsed scopes' shares ({saturated})"
            return previous.model_copy(update={"phase": RehearsalPhase.WAITING, "message": message})
        return _start(previous, router_ready, now)
    return _run(rehearsal, previous, figures=figures, flip=flip, restart=restart, crossover=crossover, now=now)


def _due(
    scopes: Sequence[ScopeStatus], *, decision: Decision | None, requested: bool
) -> tuple[list[str], list[CrossoverBracket]]:
    """The scopes a rehearsal due now covers, and the brackets of those rolled back: asked for, those
    the speculative arm serves; else, once the decision is stated, those on speculative decoding; and
    either way those rolled back with a crossover bracket."""
    if not requested and decision is None:
        return [], []
    brackets = [found for scope in scopes if (found := bracket(scope)) is not None]
    bracketed = {found.scope for found in brackets}
    due = [
        scope.name
        for scope in scopes
        if scope.name in bracketed or (scope.weight > 0 if requested else scope.state is ScopeState.SPECULATIVE)
    ]
    return due, brackets


def rehearsing(status: RehearsalStatus | None, *, window: timedelta, now: datetime) -> tuple[str, ...]:
    """The scopes whose windows now hold rehearsal traffic: while their shares are on production, and
    for a window after the rehearsal ended."""
    if status is None:
        return ()
    if running(status):
        return tuple(status.scopes)
    if status.finished_at is not None and now - status.finished_at < window:
        return tuple(status.scopes)
    return ()


def rehearsing_rolled_back(status: RehearsalStatus | None, *, window: timedelta, now: datetime) -> tuple[str, ...]:
    """The rolled-back scopes among those `rehearsing`: rehearsed within their brackets, their windows
    are evidence alone (a scope flipped back during the rehearsal is not one)."""
    if status is None:
        return ()
    brackets = {found.scope for found in status.brackets}
    return tuple(name for name in rehearsing(status, window=window, now=now) if name in brackets)


def _start(previous: RehearsalStatus, router_ready: bool, now: datetime) -> RehearsalStatus:
    """Production took the shares: the rehearsal router starts, and the first step once it is ready."""
    if not router_ready:
        update = {
            "phase": RehearsalPhase.STARTING,
            "message": "production takes the rehearsed scopes' shares; the rehearsal router is starting",
        }
        return previous.model_copy(update=update)
    steps = list(previous.steps)
    steps[0] = steps[0].model_copy(update={"started_at": now})
    return previous.model_copy(
        update={"phase": RehearsalPhase.RUNNING, "step": 0, "steps": steps, "message": _running(steps[0], 0, steps)}
    )


def _run(
    rehearsal: Rehearsal,
    previous: RehearsalStatus,
    *,
    figures: StepFigures | None,
    flip: RoutingFlip | None,
    restart: RestartFallback | None,
    crossover: Callable[[str], float | None] | None,
    now: datetime,
) -> RehearsalStatus:
    index, steps = previous.step, list(previous.steps)
    current = steps[index]
    assert current.started_at is not None
    if now < current.started_at + step_duration(rehearsal, current):
        return previous
    found = figures.arms if figures is not None else {}
    steps[index] = current.model_copy(
        update={
            "speculative": found.get(Arm.SPECULATIVE),
            "control": found.get(Arm.CONTROL),
            "scopes": list(figures.scopes) if figures is not None else [],
        }
    )
    if current.flip:
        previous = previous.model_copy(update={"routing_flip": flip})
    if current.restart:
        previous = previous.model_copy(update={"restart_fallback": restart})
    refine = crossover_step(rehearsal, previous, steps, crossover, now=now) if crossover is not None else None
    if refine is not None:
        steps.insert(index + 1, refine)
    if index + 1 == len(steps):
        done = previous.model_copy(update={"steps": steps})
        return _finish(rehearsal, done, RehearsalPhase.COMPLETED, "every step ran", now)
    steps[index + 1] = steps[index + 1].model_copy(update={"started_at": now})
    return previous.model_copy(
        update={"step": index + 1, "steps": steps, "message": _running(steps[index + 1], index + 1, steps)}
    )


def _running(step: RehearsalStep, index: int, steps: Sequence[RehearsalStep]) -> str:
    kind = (
        f"crossover step for {step.crossover}"
        if step.crossover is not None
        else "burst"
        if step.burst
        else "routing fallback at peak"
        if step.flip
        else "restart fallback at peak"
        if step.restart
        else "step"
    )
    return f"{kind} {index + 1} of {len(steps)}: {step.load:g} requests/s per replica"


def _stop_reason(
    rehearsal: Rehearsal,
    status: RehearsalStatus,
    scopes: Sequence[ScopeStatus],
    saturated: str | None,
    now: datetime,
) -> str | None:
    flipped = [scope.name for scope in scopes if scope.name in status.scopes and _flipped(status, scope)]
    if flipped:
        return f"scope {', '.join(flipped)} flipped back to ordinary decoding"
    if status.started_at is not None and now - status.started_at >= rehearsal.max_duration:
        return f"reached rehearsal.maxDuration ({rehearsal.max_duration.text})"
    if saturated is not None and status.phase is RehearsalPhase.RUNNING:
        return f"production saturated: {saturated}"
    return None


def _flipped(status: RehearsalStatus, scope: ScopeStatus) -> bool:
    """The rehearsed scope is on ordinary decoding since the rehearsal began: one rolled back before it
    (a bracket's) counts only when it flipped back again since."""
    if scope.state is not ScopeState.ROLLED_BACK and scope.weight > 0:
        return False
    if scope.name not in {found.scope for found in status.brackets}:
        return True
    since, began = scope.last_transition_time, status.started_at
    return since is not None and began is not None and since > began


def _finish(
    rehearsal: Rehearsal, status: RehearsalStatus, phase: RehearsalPhase, why: str, now: datetime
) -> RehearsalStatus:
    # the ladder's steps: a burst is too short to say what an arm sustains, and the routing fallback
    # moves the speculative share halfway through
    measured = [
        step for step in status.steps if step.on_ladder and (step.speculative is not None or step.control is not None)
    ]
    capacity = {arm: capacity_of(measured, arm, rehearsal.on_time_target) for arm in REHEARSED_ARMS}
    burst = next((step for step in status.steps if step.burst), None)
    found = ", ".join(
        f"{arm.value} {value:g}" if value is not None else f"{arm.value} below every step"
        for arm, value in capacity.items()
    )
    message = f"{why}; capacity (requests/s per replica on time at {rehearsal.on_time_target:g}): {found}"
    if burst is not None and (burst.speculative is not None or burst.control is not None):
        held = [arm.value for arm in REHEARSED_ARMS if kept_on_time(figures_of(burst, arm), rehearsal.on_time_target)]
        message += f"; the burst at {burst.load:g} was held by {' and '.join(held) if held else 'neither arm'}"
    flip = status.routing_flip
    if flip is not None:
        message += "; " + _flip_sentence(flip)
    if status.restart_fallback is not None:
        message += "; " + _restart_sentence(status.restart_fallback)
    return status.model_copy(
        update={
            "phase": phase,
            "finished_at": now,
            "message": message if measured else why,
            "speculative_capacity": capacity[Arm.SPECULATIVE],
            "control_capacity": capacity[Arm.CONTROL],
        }
    )


def _flip_sentence(flip: RoutingFlip) -> str:
    if not flip.recovered:
        return (
            "flipped at peak, the control arm had not caught up on time by the step's end "
            f"({flip.missed} of the {flip.requests} requests it finished since were late)"
        )
    return (
        f"flipped at peak, the control arm recovered in {flip.recovery_seconds or 0:g} s "
        f"({flip.missed} of {flip.requests} requests late meanwhile)"
    )


def _restart_sentence(restart: RestartFallback) -> str:
    meanwhile = (
        f"{restart.missed} of {restart.requests} requests on the speculative arm late meanwhile"
        if restart.requests
        else "no request finished on the speculative arm meanwhile"
    )
    if restart.fell_back:
        meanwhile += f", {restart.fell_back} sent to the control arm"
    if restart.seconds_to_ready is None:
        return f"the replica restarted as ordinary decoding was not Ready by the step's end ({meanwhile})"
    return f"a replica restarted as ordinary decoding was Ready in {restart.seconds_to_ready:g} s ({meanwhile})"


def _status(phase: RehearsalPhase, message: str, *, now: datetime, scopes: Sequence[str]) -> RehearsalStatus:
    return RehearsalStatus(phase=phase, message=message, started_at=now, scopes=list(scopes))


def step_figures(
    measurements: Measurements,
    spec: SpeculationPilotSpec,
    status: RehearsalStatus,
    *,
    replicas: Mapping[Arm, int],
) -> StepFigures | None:
    """Each rehearsed arm's figures over the step's read span up to the last collection (None before any)."""
    end = measurements.collected_at
    if end is None:
        return None
    start = end - read_span(status.steps[status.step], spec.analysis.window, end=end)
    samples = measurements.samples.samples(start, end)
    engines = measurements.engines(start=start, end=end, analysis=spec.analysis)
    seconds = (end - start).total_seconds()
    sent = measurements.samples.arrivals(start, end, scopes=status.scopes)
    requests = {
        (scope, arm): arm_requests(samples, scope=scope, arm=arm, start=start, end=end)
        for scope in status.scopes
        for arm in REHEARSED_ARMS
    }
    arms = {
        arm: arm_figures(
            [requests[scope, arm] for scope in status.scopes],
            engines.get(arm, ArmEngine()),
            seconds=seconds,
            replicas=replicas.get(arm, 0),
            arrived=sent[arm],
        )
        for arm in REHEARSED_ARMS
    }
    if len(status.scopes) < 2:
        return StepFigures(arms)
    # a scope's part of a step's load is not planned on its own: keeping up is the arm's alone
    by_scope = {
        (scope, arm): arm_figures([requests[scope, arm]], None, seconds=seconds, replicas=replicas.get(arm, 0))
        for scope, arm in requests
    }
    return StepFigures(
        arms,
        tuple(
            ScopeStepFigures(
                name=scope, speculative=by_scope[scope, Arm.SPECULATIVE], control=by_scope[scope, Arm.CONTROL]
            )
            for scope in status.scopes
        ),
    )


def read_span(step: RehearsalStep, window: timedelta, *, end: datetime) -> timedelta:
    """How far back a step's figures reach from `end`: a ladder or crossover step past its first analysis
    window (which still carries the previous step's queue), so that a longer step reads more of its load;
    any other step, and one no longer than two windows, over the last window."""
    if not step.held or step.started_at is None:
        return window
    return max(window, end - step.started_at - window)


def events(previous: RehearsalStatus | None, current: RehearsalStatus | None) -> list[Event]:
    """An Event for each move of the rehearsal: waiting, starting, each step begun, completed or stopped."""
    if current is None or current == previous:
        return []
    before = previous.phase if previous is not None else None
    entered = {
        RehearsalPhase.WAITING: (EventType.NORMAL, Reason.REHEARSAL_WAITING),
        RehearsalPhase.STARTING: (EventType.NORMAL, Reason.REHEARSAL_STARTED),
        RehearsalPhase.COMPLETED: (EventType.NORMAL, Reason.REHEARSAL_COMPLETED),
        RehearsalPhase.STOPPED: (EventType.WARNING, Reason.REHEARSAL_STOPPED),
    }
    if current.phase in entered and before is not current.phase:
        return [Event(*entered[current.phase], current.message)]
    began = current.phase is RehearsalPhase.RUNNING and (
        before is not RehearsalPhase.RUNNING or previous is None or previous.step != current.step
    )
    if not began:
        return []
    message = current.message
    if current.step > 0:
        done = current.steps[current.step - 1]
        message += f"; step {current.step}: {_summary(done)}"
    return [Event(EventType.NORMAL, Reason.REHEARSAL_STEP, message)]


def _summary(step: RehearsalStep) -> str:
    parts = []
    for arm, figures in ((Arm.SPECULATIVE, step.speculative), (Arm.CONTROL, step.control)):
        if figures is None or figures.on_time is None:
            parts.append(f"{arm.value} measured nothing")
            continue
        ttft = f"{figures.ttft_p99:g} s" if figures.ttft_p99 is not None else "unknown"
        parts.append(f"{arm.value} {figures.on_time:.1%} on time, TTFT p99 {ttft}")
    return ", ".join(parts)
