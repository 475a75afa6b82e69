"""The peak rehearsal's part of a pilot tick: its next state from what the tick observed, the objects
it needs while it runs, and those it leaves behind. Pure, like the rest of the plan."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from specpilot.analysis.decision import crossover_point
from specpilot.analysis.evidence import Evidence
from specpilot.analysis.rollout import Event, EventType
from specpilot.api.pilot import REHEARSE_ANNOTATION
from specpilot.api.reasons import Reason
from specpilot.api.spec import SpeculationPilotSpec
from specpilot.api.status import Decision, RehearsalPhase, RehearsalStatus, RestartFallback, RoutingFlip, ScopeStatus
from specpilot.controller.core.objects import Json
from specpilot.controller.core.rehearsal.figures import StepFigures, restart_fallback, routing_flip
from specpilot.controller.core.rehearsal.ladder import step_duration, step_rate
from specpilot.controller.core.rehearsal.manifests import mix, render_rehearsal, render_step_load, table
from specpilot.controller.core.rehearsal.steps import advance, events, flipped_at, restarting, running, step_figures
from specpilot.controller.core.snapshot import Child, Observation, Snapshot
from specpilot.wire.names import (
    COMPONENT_LABEL,
    REHEARSAL_LOAD_COMPONENT,
    REHEARSAL_RESTART_COMPONENT,
    REHEARSAL_ROUTER_COMPONENT,
    Arm,
    rehearsal_step_name,
)

REHEARSAL_COMPONENTS = (REHEARSAL_ROUTER_COMPONENT, REHEARSAL_LOAD_COMPONENT, REHEARSAL_RESTART_COMPONENT)
API_VERSIONS = {"Deployment": "apps/v1", "Service": "v1", "ConfigMap": "v1", "Job": "batch/v1"}


@dataclass(frozen=True, kw_only=True)
class RehearsalTick:
    """The rehearsal this tick: its status, the scopes whose live shares production takes meanwhile
    (`off`), its objects to apply, whether one speculative replica is being restarted as ordinary
    decoding, the Job to keep while it is not rendered, and its Events."""

    status: RehearsalStatus | None
    off: tuple[str, ...] = ()
    objects: tuple[Json, ...] = ()
    restarting: bool = False
    keep: tuple[str, str] | None = None
    events: tuple[Event, ...] = ()


def rehearsal_tick(
    snapshot: Snapshot,
    spec: SpeculationPilotSpec,
    *,
    replicas: Mapping[Arm, int],
    scopes: list[ScopeStatus],
    decision: Decision | None,
    evidence: Evidence,
    saturated: str | None,
) -> RehearsalTick:
    previous = snapshot.pilot.status.rehearsal if snapshot.pilot.status is not None else None
    figures = (
        step_figures(snapshot.measurements, spec, previous, replicas=replicas)
        if previous is not None and previous.phase is RehearsalPhase.RUNNING
        else None
    )
    requested = REHEARSE_ANNOTATION in snapshot.seen.annotations
    status = advance(
        spec,
        previous,
        scopes=scopes,
        decision=decision,
        evidence=evidence,
        saturated=saturated,
        router_ready=bool(snapshot.seen.ready(REHEARSAL_ROUTER_COMPONENT)),
        figures=figures,
        flip=_flip(snapshot, spec, previous, figures),
        restart=_restart(snapshot, previous),
        requested=requested,
        crossover=lambda scope: crossover_point(evidence, scope),
        now=snapshot.now,
    )
    return RehearsalTick(
        status=status,
        off=tuple(status.scopes) if status is not None and running(status) else (),
        objects=_objects(snapshot, spec, evidence, status),
        restarting=restarting(status) is not None,
        keep=("Job", rehearsal_step_name(snapshot.pilot.ref.name, status.step))
        if status is not None and status.phase is RehearsalPhase.RUNNING
        else None,
        events=(
            *events(previous, status),
            *(_refused(spec, previous, status, snapshot.now) if requested else ()),
        ),
    )


def load_changed_at(rehearsal: RehearsalStatus | None, spec: SpeculationPilotSpec, now: datetime) -> datetime | None:
    """When the rehearsal last changed the arms' load: its current step began, or it ended. From its
    routing fallback's flip to that step's end, and through its restart fallback, the arms no longer
    take the same share at the same size (the speculative arm drains what it held, or a replica of it
    decodes without a draft): the load changes `now`, so that no window of that time is binned."""
    if rehearsal is None:
        return None
    if rehearsal.finished_at is not None:
        return rehearsal.finished_at
    flip = flipped_at(spec.rehearsal, rehearsal) if spec.rehearsal is not None else None
    if restarting(rehearsal) is not None or (flip is not None and flip <= now):
        return now
    return rehearsal.steps[rehearsal.step].started_at if rehearsal.steps else None


def _refused(
    spec: SpeculationPilotSpec, before: RehearsalStatus | None, after: RehearsalStatus | None, now: datetime
) -> tuple[Event, ...]:
    """A Warning when the rehearse annotation could not start a rehearsal, saying why."""
    if after is not None and after.started_at == now and after != before:
        return ()
    if spec.rehearsal is None:
        why = "spec.rehearsal is not set"
    elif before is not None and before.phase not in (RehearsalPhase.COMPLETED, RehearsalPhase.STOPPED):
        why = f"a rehearsal is {before.phase.value.lower()} already"
    else:
        why = "no scope runs on the speculative arm or is rolled back with a crossover interval to narrow"
    return (Event(EventType.WARNING, Reason.MANUAL_ACTION_REFUSED, f"{REHEARSE_ANNOTATION} refused: {why}"),)


def _flip(
    snapshot: Snapshot, spec: SpeculationPilotSpec, previous: RehearsalStatus | None, figures: StepFigures | None
) -> RoutingFlip | None:
    """What the routing fallback measured since its flip, while its step runs."""
    if spec.rehearsal is None or previous is None:
        return None
    at = flipped_at(spec.rehearsal, previous)
    if at is None:
        return None
    control = figures.arms.get(Arm.CONTROL) if figures is not None else None
    return routing_flip(snapshot.measurements, spec, previous, at=at, control=control)


def _restart(snapshot: Snapshot, previous: RehearsalStatus | None) -> RestartFallback | None:
    """What the restart fallback measured since its step began, while it runs."""
    at = restarting(previous)
    if at is None or previous is None:
        return None
    ready = snapshot.seen.ready_since(REHEARSAL_RESTART_COMPONENT)
    return restart_fallback(snapshot.measurements, previous, at=at, ready_at=ready)


def _objects(
    snapshot: Snapshot, spec: SpeculationPilotSpec, evidence: Evidence, status: RehearsalStatus | None
) -> tuple[Json, ...]:
    """While the rehearsal runs: its router, table and arms, and the current step's load once the
    rehearsal router is ready (kept, not re-rendered, while it is not: a Job cannot be edited)."""
    if spec.rehearsal is None or status is None or not running(status):
        return ()
    ref = snapshot.pilot.ref
    flip = flipped_at(spec.rehearsal, status)
    flipped = flip is not None and snapshot.now >= flip
    routes = table(ref.name, spec, status.scopes, flipped=flipped, now=snapshot.now)
    objects = render_rehearsal(ref, spec, table=routes, image=snapshot.router_image)
    routers = snapshot.seen.ready(REHEARSAL_ROUTER_COMPONENT)
    if status.phase is not RehearsalPhase.RUNNING or not routers:
        return objects
    step = status.steps[status.step]
    load = render_step_load(
        ref,
        spec,
        step=status.step,
        router_ip=routers[0][1],
        mix=mix(spec, evidence, status.scopes),
        rate=step_rate(spec, step),
        seconds=step_duration(spec.rehearsal, step).total_seconds(),
        image=snapshot.router_image,
    )
    return (*objects, load)


def leftovers(seen: Observation, rendered: tuple[Json, ...], *, keep: tuple[str, str] | None) -> tuple[Child, ...]:
    """The rehearsal's objects that exist and were not rendered this tick: it ended, or moved on a step.
    The current step's Job is kept even while its router restarts (and it is not rendered)."""
    wanted = {(obj["kind"], obj["metadata"]["name"]) for obj in rendered} | {keep}
    return tuple(child for child in rehearsal_children(seen) if (child.kind, child.name) not in wanted)


def rehearsal_children(seen: Observation) -> tuple[Child, ...]:
    """The rehearsal's objects that exist: its router, table and arms, its steps' Jobs, and the
    replica its restart fallback brought up."""
    return tuple(
        Child(API_VERSIONS[kind], kind, name)
        for (kind, name), child in seen.children.items()
        if child.managed.get("labels", {}).get(COMPONENT_LABEL) in REHEARSAL_COMPONENTS and kind in API_VERSIONS
    )
