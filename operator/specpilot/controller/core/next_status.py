"""The pilot's next status, and the Events its transitions call for, from what was observed.

Pure: it takes the previous status, the rendered arms, what the cluster shows and `now`, and
returns a new status plus Events: the scopes carried onto the spec, the arms', the router's and the
conditions' state. Setting a condition and its transitions' Events are `conditions`'; the arms' and the
router's health `health`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from specpilot.analysis.rollout import Event, EventType
from specpilot.api.reasons import Reason
from specpilot.api.spec import Scope, SpeculationPilotSpec
from specpilot.api.status import (
    ArmsStatus,
    ArmStatus,
    ConditionType,
    Decision,
    FallbackRecord,
    Phase,
    ProductionGuard,
    RehearsalStatus,
    RouterStatus,
    RoutesStatus,
    ScopeState,
    ScopeStatus,
    SpeculationPilotStatus,
    TakeoverStatus,
    WorkloadStatus,
)
from specpilot.api.validate import Problem
from specpilot.controller.core.arm_objects import ArmPlan
from specpilot.controller.core.conditions import set_all, transition_events, whole_second
from specpilot.controller.core.guard import headroom_message, saturation_message
from specpilot.controller.core.health import Observed, PilotHealth, health_of
from specpilot.controller.core.objects import content_hash
from specpilot.controller.core.observe import DeploymentState
from specpilot.controller.core.workload_ref import what_changed
from specpilot.wire.names import Arm


@dataclass(frozen=True)
class StatusPlan:
    status: SpeculationPilotStatus
    events: tuple[Event, ...]


def scope_hash(scope: Scope) -> str:
    """What a scope's progress depends on in its own spec: match, deadline and stages."""
    return content_hash(scope.to_wire())


def carry_scopes(
    previous: SpeculationPilotStatus | None,
    spec: SpeculationPilotSpec,
    arms: Sequence[ArmPlan],
    *,
    now: datetime,
    workload: WorkloadStatus | None = None,
) -> tuple[list[ScopeStatus], list[Event]]:
    """Per-scope status for this spec: kept where nothing it depends on changed, restarted from
    ordinary decoding where it did. An engine or draft change restarts every scope (a `workload`'s is
    named by what changed in it); a change to one scope's spec restarts that scope alone."""
    hashes = {plan.arm: plan.config_hash for plan in arms}
    before = {scope.name: scope for scope in (previous.scopes if previous is not None else [])}
    old_arms = previous.arms if previous is not None else None
    events: list[Event] = []
    # The baseline's hash is the engine's: an engine change (which changes every arm) is named as such.
    changes = ((Arm.BASELINE, Reason.ENGINE_CHANGED, "engine"), (Arm.SPECULATIVE, Reason.DRAFT_CHANGED, "speculation"))
    for arm, reason, what in changes if old_arms is not None else ():
        old = getattr(old_arms, arm.value).config_hash
        if old not in (None, hashes[arm]):
            was = previous.workload if previous is not None else None
            change = f"{what} configuration changed ({old} -> {hashes[arm]})"
            if arm is Arm.BASELINE and workload is not None and was is not None:
                change = f"Deployment {workload.name} changed its engine ({what_changed(was, workload)})"
            message = f"{change}: every scope restarts from ordinary decoding"
            events.append(Event(EventType.NORMAL, reason, message))
            break
    restart_all = bool(events)
    scopes = []
    for scope in spec.scopes:
        digest, old = scope_hash(scope), before.get(scope.name)
        if old is not None and old.config_hash == digest and not restart_all:
            scopes.append(old)
            continue
        if old is not None and old.config_hash != digest and not restart_all:
            events.append(
                Event(
                    EventType.NORMAL,
                    Reason.SCOPE_CHANGED,
                    f"scope {scope.name}: match, deadline or stages changed; it restarts from ordinary decoding",
                )
            )
        fresh = old is None or old.state is not ScopeState.ORDINARY or old.weight != 0
        scopes.append(
            ScopeStatus(
                name=scope.name,
                config_hash=digest,
                state=ScopeState.ORDINARY,
                weight=0,
                last_transition_time=whole_second(now) if fresh or old is None else old.last_transition_time,
            )
        )
    return scopes, events


# Scopes at rest: the pilot is Healthy when every scope is one of these.
SETTLED = frozenset({ScopeState.SPECULATIVE, ScopeState.ROLLED_BACK})


def _scope_line(scope: ScopeStatus) -> str:
    stage = f" stage {scope.stage + 1}" if scope.stage is not None else ""
    return f"scope {scope.name} {scope.state.value}{stage} at {scope.weight}%"


def _arm_status(plan: ArmPlan, state: DeploymentState | None) -> ArmStatus:
    return ArmStatus(
        replicas=plan.replicas,
        ready_replicas=state.ready if state is not None else 0,
        gpus=plan.gpus,
        config_hash=plan.config_hash,
        speculative_config=plan.speculative_config,
    )


def reconciled_status(
    previous: SpeculationPilotStatus | None,
    *,
    spec: SpeculationPilotSpec,
    generation: int,
    arms: Sequence[ArmPlan],
    router_deployment: str,
    observed: Observed,
    routes: RoutesStatus,
    scopes: Sequence[ScopeStatus],
    scope_events: Sequence[Event] = (),
    fallbacks: Sequence[FallbackRecord] | None = None,
    decision: Decision | None = None,
    rehearsal: RehearsalStatus | None = None,
    production: ProductionGuard | None = None,
    workload: WorkloadStatus | None = None,
    takeover: TakeoverStatus | None = None,
    now: datetime,
) -> StatusPlan:
    """Status after applying a valid spec (`production`: the production guard), and its Events."""
    arm_health, router = health_of(arms, spec.router.replicas, router_deployment, observed)
    restart = next((e for e in scope_events if e.reason in (Reason.ENGINE_CHANGED, Reason.DRAFT_CHANGED)), None)
    health = PilotHealth(arm_health, router, settled=all(scope.state in SETTLED for scope in scopes))
    conditions = set_all(
        previous.conditions if previous is not None else [],
        _updates(health, spec=spec, scopes=scopes, restart=restart, production=production),
        generation=generation,
        now=now,
    )
    router_state = observed.deployments.get(router_deployment)
    speculative = sum(1 for scope in scopes if scope.state is ScopeState.SPECULATIVE)
    status = SpeculationPilotStatus(
        observed_generation=generation,
        phase=health.phase(suspended=spec.suspend),
        conditions=conditions,
        arms=_arms_status(arms, observed),
        router=RouterStatus(
            replicas=spec.router.replicas, ready_replicas=router_state.ready if router_state is not None else 0
        ),
        routes=routes,
        scopes=list(scopes),
        speculative_scopes=f"{speculative}/{len(scopes)}",
        **_listed(previous, fallbacks),
        decision=decision,
        rehearsal=rehearsal,
        workload=workload,
        takeover=takeover,
        production=production,
    )
    events = list(scope_events)
    if previous is None or previous.observed_generation is None:
        arm_names = ", ".join(plan.arm.value for plan in arms)
        events.insert(
            0, Event(EventType.NORMAL, Reason.PILOT_CREATED, f"applied arms {arm_names}, the router and its routes")
        )
    return StatusPlan(status, (*events, *transition_events(previous, status)))


def _arms_status(arms: Sequence[ArmPlan], observed: Observed) -> ArmsStatus:
    """Each arm's status: its replicas as planned, and as its Deployment shows them."""
    by_arm = {plan.arm: _arm_status(plan, observed.deployments.get(plan.name)) for plan in arms}
    return ArmsStatus(
        baseline=by_arm[Arm.BASELINE],
        speculative=by_arm[Arm.SPECULATIVE],
        control=by_arm.get(Arm.CONTROL),
        alternative=by_arm.get(Arm.ALTERNATIVE),
    )


def _listed(previous: SpeculationPilotStatus | None, fallbacks: Sequence[FallbackRecord] | None) -> dict[str, Any]:
    """The rollbacks listed (`fallbacks`, None: as before, already the newest FALLBACK_LIMIT), and how
    many older ones are no longer listed: those listed before or added now that did not stay."""
    before = previous.fallbacks if previous is not None else []
    listed = list(fallbacks) if fallbacks is not None else before
    added = sum(1 for record in listed if record not in before)
    dropped = max(0, len(before) + added - len(listed))
    return {"fallbacks": listed, "fallbacks_dropped": (previous.fallbacks_dropped if previous else 0) + dropped}


def _updates(
    health: PilotHealth,
    *,
    spec: SpeculationPilotSpec,
    scopes: Sequence[ScopeStatus],
    restart: Event | None,
    production: ProductionGuard | None = None,
) -> list[tuple[ConditionType, bool, Reason, str]]:
    """Every condition a valid spec sets, as (type, holds, reason, message)."""
    arms_message = "; ".join(h.message for h in health.arms)
    not_ready = [h for h in health.arms if not h.ready]
    fatal, blocking = health.fatal, health.blocking
    done = health.ready and health.settled
    if done:
        progressing = (Reason.PILOT_READY, "arms and router are ready; every scope is speculative or rolled back")
    elif health.ready:
        piloting = "; ".join(_scope_line(scope) for scope in scopes if scope.state not in SETTLED)
        progressing = (Reason.SCOPES_PILOTING, piloting)
    elif restart is not None:
        progressing = (restart.reason, restart.message)
    else:
        progressing = (blocking[0].reason, blocking[0].message)
    return [
        (ConditionType.INVALID_SPEC, False, Reason.SPEC_VALID, "every field passed the operator's checks"),
        (
            ConditionType.ARMS_READY,
            health.arms_ready,
            Reason.ARMS_AVAILABLE if health.arms_ready else not_ready[0].reason,
            arms_message,
        ),
        (
            ConditionType.READY,
            health.ready,
            Reason.PILOT_READY if health.ready else blocking[0].reason,
            f"{arms_message}; {health.router.message}",
        ),
        (
            ConditionType.DEGRADED,
            bool(fatal),
            fatal[0].reason if fatal else Reason.NOT_DEGRADED,
            "; ".join(h.message for h in fatal) if fatal else "arms and router are available or on their way",
        ),
        (ConditionType.PROGRESSING, not done, *progressing),
        (
            ConditionType.SUSPENDED,
            spec.suspend,
            Reason.PILOT_SUSPENDED if spec.suspend else Reason.NOT_SUSPENDED,
            "spec.suspend is set: stages do not advance" if spec.suspend else "spec.suspend is not set",
        ),
        _controlled(spec),
        _speed_only(spec),
        _saturated(spec, production),
    ]


def _saturated(
    spec: SpeculationPilotSpec, production: ProductionGuard | None
) -> tuple[ConditionType, bool, Reason, str]:
    policy = spec.baseline.saturation
    saturated = saturation_message(production, policy)
    if saturated is None:
        return (
            ConditionType.PRODUCTION_SATURATED,
            False,
            Reason.PRODUCTION_HEADROOM,
            headroom_message(production, policy),
        )
    message = f"{saturated}: no scope is promoted until it recovers"
    return ConditionType.PRODUCTION_SATURATED, True, Reason.PRODUCTION_SATURATED, message


def _speed_only(spec: SpeculationPilotSpec) -> tuple[ConditionType, bool, Reason, str]:
    ungated = spec.speed_only
    if not ungated:
        return ConditionType.SPEED_ONLY, False, Reason.QUALITY_GATED, "every scope's answers are checked besides speed"
    message = (
        f"{', '.join(ungated)}: judged on speed alone, with no probe or webhook checking the answers, so an "
        "adoption rests on speed alone; set spec.quality.probes or spec.quality.webhooks"
    )
    return ConditionType.SPEED_ONLY, True, Reason.NO_QUALITY_GATE, message


def _controlled(spec: SpeculationPilotSpec) -> tuple[ConditionType, bool, Reason, str]:
    if spec.control.enabled:
        message = "the speculative arm is compared with the control arm, its size, sent a copy of each of its requests"
        return ConditionType.CONTROLLED, True, Reason.CONTROL_ARM, message
    message = (
        "spec.control.enabled is false: the pilot runs without a control arm, and the speculative arm is compared "
        "with the production baseline only at loads both ran at"
    )
    return ConditionType.CONTROLLED, False, Reason.NO_CONTROL_ARM, message


def invalid_status(
    previous: SpeculationPilotStatus | None, *, problems: Sequence[Problem], generation: int, now: datetime
) -> StatusPlan:
    """Status for a spec only the operator can reject: what runs keeps running, nothing new is applied."""
    message = "; ".join(str(problem) for problem in problems) + " (nothing new was deployed; fix the spec)"
    updates = [
        (ConditionType.INVALID_SPEC, True, Reason.SPEC_INVALID, message),
        (ConditionType.DEGRADED, True, Reason.SPEC_INVALID, message),
        (ConditionType.READY, False, Reason.SPEC_INVALID, message),
    ]
    conditions = set_all(previous.conditions if previous is not None else [], updates, generation=generation, now=now)
    base = previous if previous is not None else SpeculationPilotStatus()
    status = base.model_copy(
        update={"observed_generation": generation, "phase": Phase.DEGRADED, "conditions": conditions}
    )
    return StatusPlan(status, tuple(transition_events(previous, status)))
