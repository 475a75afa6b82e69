"""One pilot tick as a pure function: `plan(snapshot) -> Plan` (the ordered teardown's steps are `teardown`'s).

Every decision the controller makes is here: what to render and apply, the routing table, which
windows are judged and where each scope moves, manual actions, the evidence and the decisions, the
status and the Events. The shell gathers the snapshot, calls `plan` once and carries the plan out
in the order the design requires: dry-run, apply, status, then Events.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from specpilot.analysis.evidence import Evidence, ScopeEvidence, WindowLoad
from specpilot.analysis.rollout import Action, Event, EventType
from specpilot.api.pilot import ABORT_ANNOTATION, ALL_SCOPES
from specpilot.api.reasons import Reason
from specpilot.api.spec import SpeculationPilotSpec
from specpilot.api.status import (
    ProductionGuard,
    RehearsalStatus,
    RoutesStatus,
    ScopeStatus,
    SpeculationPilotStatus,
    TakeoverStatus,
    Verdict,
    WorkloadStatus,
)
from specpilot.api.validate import Problem
from specpilot.controller.core.arm_objects import ArmPlan, arm_plans
from specpilot.controller.core.changes import Apply, changes
from specpilot.controller.core.decide import Decided, decide, fresh_for, load_since, record
from specpilot.controller.core.guard import Reading, guard_production, saturation_message
from specpilot.controller.core.health import Observed
from specpilot.controller.core.measurements import compared_arm
from specpilot.controller.core.next_status import StatusPlan, carry_scopes, invalid_status, reconciled_status
from specpilot.controller.core.objects import content_hash
from specpilot.controller.core.progress import (
    ACTED_ON,
    Measured,
    Progress,
    advance_scopes,
    manual_actions,
    production_saturation,
    warm,
)
from specpilot.controller.core.rehearsal.steps import next_move, rehearsing, rehearsing_rolled_back
from specpilot.controller.core.rehearsal.tick import RehearsalTick, leftovers, load_changed_at, rehearsal_tick
from specpilot.controller.core.render import Rendered, render
from specpilot.controller.core.router_objects import render_routes_configmap
from specpilot.controller.core.routing import routing_table, table_hash
from specpilot.controller.core.scope_forecasts import forecast_scopes
from specpilot.controller.core.snapshot import Child, Observation, Snapshot
from specpilot.controller.core.takeover import ServicePatch, TakeoverTick, restoring, takeover_tick
from specpilot.controller.core.teardown import observed_table
from specpilot.controller.core.windows import measured_windows, scope_windows
from specpilot.controller.core.workload_ref import workload_status
from specpilot.wire.names import ROUTER_COMPONENT, Arm, router_name
from specpilot.wire.routes import RoutingTable

# While the spec is invalid, the table that runs is kept fresh this often (nothing else is done).
INVALID_SPEC_TICK = timedelta(seconds=10)


@dataclass(frozen=True)
class Confirm:
    """Wait for every ready router to serve `generation` of the table: the flip of `scopes`."""

    generation: int
    scopes: tuple[str, ...]
    routers: tuple[str, ...]  # addresses


def flip_served(confirm: Confirm, *, seconds: float, unconfirmed: Sequence[str] = ()) -> Event:
    """What the routers did with a flip: took it `seconds` after the write, or, for those `unconfirmed`,
    could not be reached before the wait gave up."""
    names = ", ".join(confirm.scopes)
    if unconfirmed:
        return Event(
            EventType.WARNING,
            Reason.ROUTES_UNCONFIRMED,
            f"router(s) {', '.join(unconfirmed)} did not confirm routing generation "
            f"{confirm.generation} ({names} on ordinary decoding) within {seconds:.0f} s: they "
            "could not be reached; a router takes the table from its ConfigMap, and one whose table "
            "ages past --max-table-age sends every scope to the baseline",
        )
    return Event(
        EventType.NORMAL,
        Reason.ROUTES_TAKEN,
        f"routers took routing generation {confirm.generation} ({names} on ordinary decoding) "
        f"{seconds * 1000:.0f} ms after the write",
    )


@dataclass(frozen=True, kw_only=True)
class Plan:
    """What one tick does, in order: `applies` (every change dry-run first), `removes`, `confirm`, the
    status when it changed, the annotations it acted on, the Events, then the evidence."""

    status: SpeculationPilotStatus | None  # None: the pilot is being deleted; status is left alone
    status_changed: bool = False
    events: tuple[Event, ...] = ()
    applies: tuple[Apply, ...] = ()
    removes: tuple[Child, ...] = ()  # the rehearsal's objects once it no longer needs them, after the applies
    patch: ServicePatch | None = None  # the taken-over Service re-pointed or put back, after the applies
    confirm: Confirm | None = None
    clear_annotations: tuple[str, ...] = ()  # manual actions acted on, removed once the status landed
    evidence: Evidence | None = None  # the store to keep (None: unchanged)
    judged: tuple[tuple[str, Verdict], ...] = ()  # (scope, verdict) of each window judged
    flipped: tuple[str, ...] = ()  # scopes sent back to ordinary decoding
    delay: timedelta  # until the next tick, unless something wakes it


def plan(snapshot: Snapshot) -> Plan:
    """The tick's plan."""
    pilot = snapshot.pilot
    if pilot.deleting:
        return Plan(status=None, delay=INVALID_SPEC_TICK)  # the teardown runs apart, behind the finalizer
    if pilot.spec is None:
        return _invalid(snapshot, pilot.problems)
    return _valid(snapshot, pilot.spec)


def refused(snapshot: Snapshot, error: str) -> Plan:
    """The plan when the API server refused a rendered object in its dry run: nothing was applied,
    and nothing this tick judged or acted on is kept, so the next tick judges and acts again."""
    pilot = snapshot.pilot
    problem = Problem("spec", f"the API server refused a rendered object: {error}")
    landed = invalid_status(pilot.status, problems=[problem], generation=pilot.generation, now=snapshot.now)
    return Plan(
        status=landed.status,
        status_changed=landed.status != pilot.status,
        events=landed.events,
        delay=pilot.spec.analysis.interval if pilot.spec is not None else INVALID_SPEC_TICK,
    )


def _invalid(snapshot: Snapshot, problems: Sequence[Problem]) -> Plan:
    """Status says why; what runs keeps running, and its routing table is kept fresh."""
    pilot, now = snapshot.pilot, snapshot.now
    landed = invalid_status(pilot.status, problems=problems, generation=pilot.generation, now=now)
    taken = restoring(pilot.ref.name, _taken(pilot.status), "the spec is invalid", now)
    if taken.patch is not None:
        status = landed.status.model_copy(update={"takeover": taken.status})
        landed = replace(landed, status=status, events=(*landed.events, *taken.events))
    table, last = observed_table(pilot.ref, snapshot.seen), snapshot.written.routes
    applies: tuple[Apply, ...] = ()
    if table is not None and (last is None or now - last[1] >= INVALID_SPEC_TICK):
        fresh = table.model_copy(update={"updated_at": now})
        obj = render_routes_configmap(pilot.ref, fresh)
        applies = (Apply(obj, content_hash(obj), table=fresh),)
    return Plan(
        status=landed.status,
        status_changed=landed.status != pilot.status,
        events=landed.events,
        applies=applies,
        patch=taken.patch,
        delay=INVALID_SPEC_TICK,
    )


@dataclass(frozen=True, kw_only=True)
class _Moved:
    """The scopes carried onto this spec and moved by this tick's judged windows, with what the evidence
    and the decisions after them need: the arms, their replicas and loads, and the rehearsal so far."""

    arms: tuple[ArmPlan, ...]
    workload: WorkloadStatus | None
    carried: tuple[Event, ...]  # the scopes' Events of carrying the last status onto this spec
    measured: Mapping[str, Measured]
    manual: Mapping[str, Action]
    replicas: Mapping[Arm, int]
    loads: Mapping[str, WindowLoad]
    rehearsal: RehearsalStatus | None  # as the last tick left it
    rehearsing: tuple[str, ...]
    progress: Progress


def _valid(snapshot: Snapshot, spec: SpeculationPilotSpec) -> Plan:
    """A valid spec's tick: the scopes move, the evidence and decisions follow, the rehearsal steps, the
    routing table and objects are rendered, the takeover steps, and the status says it all."""
    seen, now, previous = snapshot.seen, snapshot.now, snapshot.pilot.status
    production, saturated, last_window = _production(snapshot, spec)
    moved = _move(snapshot, spec, paused=saturated is not None)
    evidence = _evidence(snapshot, spec, moved)
    decided = decide(
        evidence,
        spec=spec,
        scopes=moved.progress.scopes,
        fallbacks=moved.progress.fallbacks,
        annotations=seen.annotations,
        previous=previous.decision if previous is not None else None,
        rehearsal=moved.rehearsal,
        now=now,
    )
    rehearsal = rehearsal_tick(
        snapshot,
        spec,
        replicas=moved.replicas,
        scopes=decided.scopes,
        decision=decided.decision,
        evidence=evidence,
        saturated=last_window,
    )
    routes, table = _routes(snapshot.pilot.ref.name, spec, previous, decided, now, off=rehearsal.off)
    rendered = _render(snapshot, spec, table, rehearsal)
    # reconciles land a little after the interval
    refresh = spec.analysis.interval * 0.9
    applies, restored = changes(
        rendered, seen, snapshot.written, table=table, routes_hash=table_hash(table), now=now, refresh=refresh
    )
    taken = _takeover(snapshot, spec, decided.scopes)
    events = (*moved.carried, *moved.progress.events, *restored, *decided.events, *rehearsal.events, *taken.events)
    landed = _status(
        snapshot,
        spec,
        moved,
        decided,
        routes=routes,
        rehearsal=rehearsal,
        taken=taken,
        production=production,
        events=events,
    )
    return Plan(
        status=landed.status,
        status_changed=landed.status != previous,
        events=landed.events,
        applies=applies,
        removes=leftovers(seen, rendered.objects, keep=rehearsal.keep),
        patch=taken.patch,
        confirm=_confirm(seen, routes, moved.progress.flipped),
        clear_annotations=tuple(key for key in ACTED_ON if key in seen.annotations),
        evidence=evidence,
        judged=_judged(moved),
        flipped=moved.progress.flipped,
        delay=_delay(spec, rehearsal.status, now),
    )


def _move(snapshot: Snapshot, spec: SpeculationPilotSpec, *, paused: bool) -> _Moved:
    """The scopes carried onto this spec, their due windows measured and judged, manual actions applied
    (`paused`: production is saturated, so no scope is promoted)."""
    seen, now, previous = snapshot.seen, snapshot.now, snapshot.pilot.status
    arms = arm_plans(snapshot.pilot.ref, spec, snapshot.workload)
    workload = workload_status(snapshot.workload) if snapshot.workload is not None else None
    scopes, carried = carry_scopes(previous, spec, arms, now=now, workload=workload)
    measured = measured_windows(snapshot, spec, scopes, scope_windows(snapshot, spec, scopes))
    names = [scope.name for scope in scopes]
    manual = manual_actions(seen.annotations, names)
    rehearsal = previous.rehearsal if previous is not None else None
    rehearsed = rehearsing(rehearsal, window=spec.analysis.window, now=now)
    replicas = {arm_plan.arm: len(seen.ready(arm_plan.arm.value)) or arm_plan.replicas for arm_plan in arms}
    changed = load_changed_at(rehearsal, spec, now)
    held = snapshot.evidence.scopes if snapshot.evidence is not None else {}
    statuses = {status.name: status for status in scopes}
    loads = {
        name: snapshot.measurements.load(
            item.window,
            replicas=replicas,
            analysis=spec.analysis,
            since=load_since(statuses[name], held.get(name, ScopeEvidence()), changed, end=item.window.end),
        )
        for name, item in measured.items()
    }
    progress = advance_scopes(
        scopes,
        spec,
        measured=measured,
        manual=manual,
        fallbacks=previous.fallbacks if previous is not None else [],
        warm=warm(previous, spec.analysis, now),
        now=now,
        # every scope: a flipped one's requests in flight hold the cache until they drain
        kv_loads=snapshot.measurements.kv_loads(names, analysis=spec.analysis, end=_end(snapshot)) if measured else {},
        loads=loads,
        paused=paused,
        rehearsing=rehearsed,
    )
    return _Moved(
        arms=arms,
        workload=workload,
        carried=tuple(carried),
        measured=measured,
        manual=manual,
        replicas=replicas,
        loads=loads,
        rehearsal=rehearsal,
        rehearsing=rehearsed,
        progress=progress,
    )


def _render(snapshot: Snapshot, spec: SpeculationPilotSpec, table: RoutingTable, rehearsal: RehearsalTick) -> Rendered:
    """Every object of the pilot for this tick's table, with the rehearsal's."""
    return render(
        snapshot.pilot.ref,
        spec,
        table=table,
        router_image=snapshot.router_image,
        extra=rehearsal.objects,
        restarting=rehearsal.restarting,
        workload=snapshot.workload,
    )


def _status(
    snapshot: Snapshot,
    spec: SpeculationPilotSpec,
    moved: _Moved,
    decided: Decided,
    *,
    routes: RoutesStatus,
    rehearsal: RehearsalTick,
    taken: TakeoverTick,
    production: ProductionGuard | None,
    events: Sequence[Event],
) -> StatusPlan:
    """The status this tick leaves, with its Events: `events` are the scopes' and the steps' own."""
    pilot, seen = snapshot.pilot, snapshot.seen
    deployments = {name: child.deployment for (_, name), child in seen.children.items() if child.deployment is not None}
    if snapshot.workload is not None:
        deployments[snapshot.workload.name] = snapshot.workload.state
    forecast = forecast_scopes(
        spec.analysis.forecast,
        config_map=snapshot.forecast_config,
        evidence=decided.evidence,
        scopes=decided.scopes,
        previous=pilot.status,
        confidence=spec.analysis.confidence,
    )
    landed = reconciled_status(
        pilot.status,
        spec=spec,
        generation=pilot.generation,
        arms=moved.arms,
        router_deployment=router_name(pilot.ref.name),
        observed=Observed(deployments=deployments, troubles=seen.troubles),
        routes=routes,
        scopes=forecast.scopes,
        scope_events=[*events, *forecast.events],
        fallbacks=moved.progress.fallbacks,
        decision=decided.decision,
        rehearsal=rehearsal.status,
        production=production,
        workload=moved.workload,
        takeover=taken.status,
        now=snapshot.now,
    )
    return replace(landed, status=landed.status.model_copy(update={"forecast_problem": forecast.problem}))


def _confirm(seen: Observation, routes: RoutesStatus, flipped: tuple[str, ...]) -> Confirm | None:
    """The wait for every ready router to serve the table that flips `flipped`, if any did flip."""
    return Confirm(routes.generation, flipped, tuple(ip for _, ip in seen.ready(ROUTER_COMPONENT))) if flipped else None


def _judged(moved: _Moved) -> tuple[tuple[str, Verdict], ...]:
    """(scope, verdict) of each window judged this tick; a scope acted on by hand was not judged."""
    return tuple(
        (status.name, status.last_window.verdict)
        for status in moved.progress.scopes
        if status.name in moved.measured and status.name not in moved.manual and status.last_window is not None
    )


def _delay(spec: SpeculationPilotSpec, rehearsal: RehearsalStatus | None, now: datetime) -> timedelta:
    """Until the next tick: an analysis interval, or less when the rehearsal moves sooner."""
    move = next_move(spec.rehearsal, rehearsal, now) if spec.rehearsal is not None else None
    return min(spec.analysis.interval, move) if move is not None else spec.analysis.interval


def _taken(status: SpeculationPilotStatus | None) -> TakeoverStatus | None:
    return status.takeover if status is not None else None


def _takeover(snapshot: Snapshot, spec: SpeculationPilotSpec, scopes: Sequence[ScopeStatus]) -> TakeoverTick:
    """The taken-over Service this tick: put back when every scope is aborted, else the next step."""
    pilot, now = snapshot.pilot, snapshot.now
    previous = _taken(pilot.status)
    if snapshot.seen.annotations.get(ABORT_ANNOTATION) == ALL_SCOPES:
        return restoring(pilot.ref.name, previous, "every scope was aborted", now)
    ready = len(snapshot.seen.ready(ROUTER_COMPONENT)) >= spec.router.replicas
    return takeover_tick(
        pilot.ref.name, spec.router.takeover, previous, snapshot.service, routers_ready=ready, scopes=scopes, now=now
    )


def _production(
    snapshot: Snapshot, spec: SpeculationPilotSpec
) -> tuple[ProductionGuard | None, str | None, str | None]:
    """The production guard after this tick's window; why production counts as saturated (the guard's
    state, which pauses promotion); and why the last window alone was saturated, which holds or stops
    the rehearsal at once, since it puts the rehearsed scopes' traffic on production."""
    previous = snapshot.pilot.status
    reading = _saturation(snapshot, spec)
    guard = guard_production(
        previous.production if previous is not None else None,
        reading,
        policy=spec.baseline.saturation,
        interval=spec.analysis.interval,
    )
    last = reading.saturated if reading is not None else None
    return guard, saturation_message(guard, spec.baseline.saturation), last


def _saturation(snapshot: Snapshot, spec: SpeculationPilotSpec) -> Reading | None:
    """Production's baseline over the last window, once the arms are warm; None before, or when
    nothing was collected yet."""
    end = snapshot.measurements.collected_at
    if end is None or not warm(snapshot.pilot.status, spec.analysis, snapshot.now):
        return None
    engines = snapshot.measurements.engines(start=end - spec.analysis.window, end=end, analysis=spec.analysis)
    replicas = len(snapshot.seen.ready(Arm.BASELINE.value)) or spec.baseline.replicas
    return Reading(end, production_saturation(engines[Arm.BASELINE], replicas=replicas, analysis=spec.analysis))


def _end(snapshot: Snapshot) -> datetime:
    end = snapshot.measurements.collected_at
    assert end is not None  # there are windows only once something was collected
    return end


def _evidence(snapshot: Snapshot, spec: SpeculationPilotSpec, moved: _Moved) -> Evidence:
    """The evidence store with this tick's judged windows, each with the load its arms ran at (a window
    within which a rehearsal step began or the rehearsal ended is kept out of the bins), and the probe
    rounds' counts so far. A rolled-back scope rehearsed is not draining: the rehearsal runs it."""
    progress = moved.progress
    runs = rehearsing_rolled_back(moved.rehearsal, window=spec.analysis.window, now=snapshot.now)
    off = [
        status.name
        for status in progress.scopes
        if (status.weight == 0 and status.name not in runs) or status.name in progress.flipped
    ]
    span = next((item.window for item in moved.measured.values()), None)
    draining = [
        name
        for name in off
        if span is not None and snapshot.measurements.new_requests(name, since=span.start, end=span.end)
    ]
    return record(
        fresh_for(snapshot.evidence, {arm.arm: arm.config_hash for arm in moved.arms}, compared_arm(spec)),
        spec=spec,
        measured=moved.measured,
        loads=moved.loads,
        scopes=progress.scopes,
        kv_blocks=snapshot.measurements.kv_blocks(),
        block_size=snapshot.measurements.block_size(),
        gpus={arm.arm: arm.gpus for arm in moved.arms},
        replicas=moved.replicas,
        flipped=progress.flipped,
        draining=draining,
        load_changed_at=load_changed_at(moved.rehearsal, spec, snapshot.now),
        rehearsing=moved.rehearsing,
        probe=snapshot.probe,
    )


def _routes(
    pilot: str,
    spec: SpeculationPilotSpec,
    previous: SpeculationPilotStatus | None,
    decided: Decided,
    now: datetime,
    *,
    off: Collection[str] = (),
) -> tuple[RoutesStatus, RoutingTable]:
    """The routing table for the scopes' weights (those `off`, rehearsed meanwhile, on production), and
    its generation: moved only when its content did."""
    weights = {scope.name: 0 if scope.name in off else scope.weight for scope in decided.scopes}
    table = routing_table(pilot, spec, weights, generation=0, now=now)
    digest, routes = table_hash(table), previous.routes if previous is not None else None
    if routes is None or routes.hash != digest:
        routes = RoutesStatus(generation=(routes.generation if routes is not None else 0) + 1, hash=digest)
    return routes, table.model_copy(update={"generation": routes.generation})
