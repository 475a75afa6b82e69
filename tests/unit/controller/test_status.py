"""Status and Events from observations: phases, conditions, restarts, and no Event twice."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from specpilot.api.reasons import Reason
from specpilot.api.status import ConditionStatus, ConditionType, Phase, RoutesStatus, ScopeState, SpeculationPilotStatus
from specpilot.api.validate import Problem
from specpilot.controller.core.arm_objects import arms_of, render_arm
from specpilot.controller.core.conditions import condition, set_condition
from specpilot.controller.core.health import Observed
from specpilot.controller.core.next_status import StatusPlan, carry_scopes, invalid_status, reconciled_status
from specpilot.controller.core.observe import DeploymentState, PodTrouble
from tests.unit.controller.specs import ROOT, load, with_spec

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
DEMO = ROOT / "manifests/examples/local-demo.yaml"
READY = DeploymentState(generation=1, observed_generation=1, replicas=1, current=1, updated=1, ready=1, available=1)
STARTING = DeploymentState(generation=1, observed_generation=1, replicas=1, current=1, updated=1)
NAMES = ("demo-baseline", "demo-speculative", "demo-control", "demo-alternative", "demo-router")


def plan_for(
    previous: SpeculationPilotStatus | None,
    *,
    deployments: dict[str, DeploymentState] | None = None,
    troubles: tuple[PodTrouble, ...] = (),
    path: Path = DEMO,
    now: datetime = T0,
    **changes: object,
) -> StatusPlan:
    ref, spec = load(path)
    for field, value in changes.items():
        spec = with_spec(spec, field, value)
    arms = tuple(render_arm(ref, spec, arm) for arm in arms_of(spec))
    scopes, scope_events = carry_scopes(previous, spec, arms, now=now)
    return reconciled_status(
        previous,
        spec=spec,
        generation=1,
        arms=arms,
        router_deployment="demo-router",
        observed=Observed(
            deployments=dict.fromkeys(NAMES, READY) if deployments is None else deployments, troubles=troubles
        ),
        routes=RoutesStatus(generation=1, hash="abc"),
        scopes=scopes,
        scope_events=scope_events,
        now=now,
    )


def test_condition_transition_time_moves_only_on_a_real_change() -> None:
    first = set_condition(
        [], type=ConditionType.READY, status=ConditionStatus.FALSE, reason=Reason.NOT_READY, message="a",
        generation=1, now=T0,
    )  # fmt: skip
    later = T0 + timedelta(minutes=1)
    same = set_condition(
        first, type=ConditionType.READY, status=ConditionStatus.FALSE, reason=Reason.ARMS_PROGRESSING, message="b",
        generation=2, now=later,
    )  # fmt: skip
    assert same[0].last_transition_time == T0 and same[0].message == "b" and same[0].observed_generation == 2
    moved = set_condition(
        same, type=ConditionType.READY, status=ConditionStatus.TRUE, reason=Reason.PILOT_READY, message="c",
        generation=2, now=later,
    )  # fmt: skip
    assert moved[0].last_transition_time == later


@pytest.mark.parametrize(
    ("deployments", "troubles", "phase", "degraded_reason", "words"),
    [
        (dict.fromkeys(NAMES, READY), (), Phase.PROGRESSING, None, ()),  # ready, scopes not piloted yet
        ({**dict.fromkeys(NAMES, READY), "demo-speculative": STARTING}, (), Phase.PROGRESSING, None, ()),
        ({n: READY for n in NAMES if n != "demo-router"}, (), Phase.PROGRESSING, None, ()),
        (
            {**dict.fromkeys(NAMES, READY), "demo-baseline": STARTING},
            (PodTrouble(component="baseline", pod="p", reason="ImageNotRunnable", message="not ours"),),
            Phase.DEGRADED,
            Reason.ARM_UNAVAILABLE,
            ("spec.engine.image", "ImageNotRunnable", "arm baseline"),
        ),
        (
            {**dict.fromkeys(NAMES, READY), "demo-router": STARTING},
            (PodTrouble(component="router", pod="r", reason="CrashLoopBackOff", message=""),),
            Phase.DEGRADED,
            Reason.ROUTER_UNAVAILABLE,
            ("--router-image",),
        ),
        (
            {**dict.fromkeys(NAMES, READY), "demo-alternative": DeploymentState(generation=1, deadline_exceeded=True)},
            (),
            Phase.DEGRADED,
            Reason.ARM_UNAVAILABLE,
            ("progress deadline",),
        ),
        (
            {**dict.fromkeys(NAMES, READY), "demo-speculative": STARTING},
            (PodTrouble(component="speculative", pod="s", reason="Unschedulable", message="0/1 nodes"),),
            Phase.PROGRESSING,
            None,
            (),
        ),
    ],
    ids=["ready", "arm-starting", "router-missing", "image", "router-crash", "deadline", "unschedulable-waits"],
)
def test_phase_and_conditions(
    deployments: dict[str, DeploymentState],
    troubles: tuple[PodTrouble, ...],
    phase: Phase,
    degraded_reason: Reason | None,
    words: tuple[str, ...],
) -> None:
    status = plan_for(None, deployments=deployments, troubles=troubles).status
    assert status.phase is phase
    ready = condition(status, ConditionType.READY)
    all_up = deployments == dict.fromkeys(NAMES, READY) and not troubles
    assert ready is not None and (ready.status is ConditionStatus.TRUE) == all_up
    degraded = condition(status, ConditionType.DEGRADED)
    assert degraded is not None
    assert (degraded.status is ConditionStatus.TRUE) == (degraded_reason is not None)
    if degraded_reason is not None:
        assert degraded.reason == degraded_reason
        assert all(word in degraded.message for word in words), degraded.message


def test_healthy_once_every_scope_is_speculative_or_rolled_back() -> None:
    piloting = _piloting(plan_for(None).status)
    assert plan_for(piloting).status.phase is Phase.PROGRESSING
    progressing = condition(plan_for(piloting).status, ConditionType.PROGRESSING)
    assert progressing is not None and progressing.reason == Reason.SCOPES_PILOTING
    assert "scope chat Piloting stage 1 at 25%" in progressing.message
    states = [ScopeState.SPECULATIVE, ScopeState.ROLLED_BACK]
    settled = piloting.model_copy(
        update={"scopes": [s.model_copy(update={"state": st}) for s, st in zip(piloting.scopes, states, strict=True)]}
    )
    assert plan_for(settled).status.phase is Phase.HEALTHY


def test_suspended_pilot_reports_suspended() -> None:
    status = plan_for(None, suspend=True).status
    assert status.phase is Phase.SUSPENDED
    assert condition(status, ConditionType.SUSPENDED).status is ConditionStatus.TRUE  # type: ignore[union-attr]


def test_events_come_from_transitions_only() -> None:
    starting = plan_for(None, deployments={**dict.fromkeys(NAMES, READY), "demo-speculative": STARTING})
    assert [e.reason for e in starting.events] == [Reason.PILOT_CREATED]
    ready = plan_for(starting.status, now=T0 + timedelta(seconds=5))
    assert [e.reason for e in ready.events] == [Reason.PILOT_READY]
    again = plan_for(ready.status, now=T0 + timedelta(seconds=10))
    assert again.events == () and again.status == ready.status, "nothing changed: same status, no Event"


def test_arm_status_carries_replicas_gpus_and_hashes() -> None:
    status = plan_for(None, path=ROOT / "manifests/examples/three-arm.yaml").status
    assert status.arms is not None and status.arms.alternative is not None
    assert (status.arms.baseline.gpus, status.arms.speculative.gpus, status.arms.alternative.gpus) == (8, 8, 8)
    assert (status.arms.baseline.replicas, status.arms.alternative.replicas) == (2, 4)
    assert len({status.arms.baseline.config_hash, status.arms.speculative.config_hash}) == 2
    assert status.speculative_scopes == "0/4"


def _piloting(status: SpeculationPilotStatus) -> SpeculationPilotStatus:
    """`status` as if part 2 had moved every scope to its first stage."""
    scopes = [s.model_copy(update={"state": ScopeState.PILOTING, "stage": 0, "weight": 25}) for s in status.scopes]
    return status.model_copy(update={"scopes": scopes})


@pytest.mark.parametrize(
    ("field", "value", "reason", "reset"),
    [
        ("engine.image", "specpilot/specpilot:other", Reason.ENGINE_CHANGED, {"chat", "code"}),
        ("speculative.draft.numSpeculativeTokens", 2, Reason.DRAFT_CHANGED, {"chat", "code"}),
        ("alternative.extraArgs", ["--max-num-seqs=32"], None, set()),
        ("baseline.replicas", 2, None, set()),
        ("analysis.failureLimit", 5, None, set()),
    ],
    ids=["engine", "draft", "alternative", "replicas", "analysis"],
)
def test_changes_restart_only_what_they_touch(
    field: str, value: object, reason: Reason | None, reset: set[str]
) -> None:
    before = _piloting(plan_for(None).status)
    after = plan_for(before, now=T0 + timedelta(minutes=1), **{field: value})
    restarted = {s.name for s in after.status.scopes if s.state is ScopeState.ORDINARY}
    assert restarted == reset
    assert all(s.weight == 0 for s in after.status.scopes if s.name in reset)
    reasons = [e.reason for e in after.events]
    assert (reason in reasons) if reason else not {Reason.ENGINE_CHANGED, Reason.DRAFT_CHANGED} & set(reasons)
    if reason is not None:
        progressing = condition(after.status, ConditionType.PROGRESSING)
        assert progressing is not None


def test_one_scope_change_restarts_that_scope_alone() -> None:
    before = _piloting(plan_for(None).status)
    _, spec = load(DEMO)
    stages = [{"weight": 30, "minRequests": 50, "minDuration": "30s"}]
    scopes = [scope.to_wire() for scope in spec.scopes]
    scopes[1]["stages"] = stages
    after = plan_for(before, now=T0 + timedelta(minutes=1), scopes=scopes)
    states = {s.name: (s.state, s.weight) for s in after.status.scopes}
    assert states == {"chat": (ScopeState.PILOTING, 25), "code": (ScopeState.ORDINARY, 0)}
    assert [e.reason for e in after.events] == [Reason.SCOPE_CHANGED]


def test_invalid_spec_keeps_the_arms_and_names_the_field() -> None:
    healthy = plan_for(None).status
    plan = invalid_status(
        healthy, problems=[Problem("spec.scopes[0].match.headers[0].value", "bad regex")], generation=2, now=T0
    )
    assert plan.status.phase is Phase.DEGRADED
    assert plan.status.arms == healthy.arms and plan.status.scopes == healthy.scopes
    invalid = condition(plan.status, ConditionType.INVALID_SPEC)
    assert invalid is not None and invalid.status is ConditionStatus.TRUE
    assert "spec.scopes[0].match.headers[0].value: bad regex" in invalid.message
    assert [e.reason for e in plan.events] == [Reason.SPEC_INVALID], "one Event, not one per condition"
    assert invalid_status(plan.status, problems=[Problem("x", "y")], generation=2, now=T0).events == ()


def test_scopes_judged_on_speed_alone_carry_a_warning_condition() -> None:
    gated = condition(plan_for(None).status, ConditionType.SPEED_ONLY)
    assert gated is not None and gated.status is ConditionStatus.FALSE and gated.reason == Reason.QUALITY_GATED
    ungated = plan_for(None, **{"quality.probes": None})
    speed = condition(ungated.status, ConditionType.SPEED_ONLY)
    assert speed is not None and speed.status is ConditionStatus.TRUE and speed.reason == Reason.NO_QUALITY_GATE
    assert speed.message.startswith("chat, code: judged on speed alone")
    (warning,) = [e for e in ungated.events if e.reason == Reason.NO_QUALITY_GATE]
    assert warning.type.value == "Warning"
    webhook = [{"name": "evals", "url": "http://evals.team-a.svc/check"}]
    hooked = plan_for(None, **{"quality.probes": None, "quality.webhooks": webhook}).status
    assert condition(hooked, ConditionType.SPEED_ONLY).status is ConditionStatus.FALSE  # type: ignore[union-attr]
