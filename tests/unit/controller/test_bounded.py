"""Status stays bounded however long a pilot runs: the rollbacks list keeps the newest and counts the
rest."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from specpilot.api.reasons import FallbackReason, MetricName
from specpilot.api.status import FallbackRecord, RoutesStatus, SpeculationPilotStatus, Window
from specpilot.api.status.pilot_status import FALLBACK_LIMIT
from specpilot.controller.core.arm_objects import arms_of, render_arm
from specpilot.controller.core.health import Observed
from specpilot.controller.core.next_status import carry_scopes, reconciled_status
from tests.unit.controller.specs import ROOT, load

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def flip(minute: int) -> FallbackRecord:
    at = T0 + timedelta(minutes=minute)
    return FallbackRecord(
        scope="chat",
        at=at,
        reason=FallbackReason.THRESHOLD_EXCEEDED,
        metric=MetricName.TTFT_RATIO,
        window=Window(start=at - timedelta(minutes=5), end=at),
    )


def landed(previous: SpeculationPilotStatus | None, fallbacks: list[FallbackRecord] | None) -> SpeculationPilotStatus:
    ref, spec = load(ROOT / "manifests/examples/local-demo.yaml")
    arms = tuple(render_arm(ref, spec, arm) for arm in arms_of(spec))
    scopes, _ = carry_scopes(previous, spec, arms, now=T0)
    return reconciled_status(
        previous,
        spec=spec,
        generation=1,
        arms=arms,
        router_deployment="demo-router",
        observed=Observed(deployments={}, troubles=()),
        routes=RoutesStatus(generation=1, hash="abc"),
        scopes=scopes,
        fallbacks=fallbacks,
        now=T0,
    ).status


def test_the_rollbacks_list_keeps_the_newest_and_counts_those_it_no_longer_lists() -> None:
    status = None
    records: list[FallbackRecord] = []
    for minute in range(45):  # one flip a minute, two at once every tenth minute
        records += [flip(minute)] + ([flip(minute).model_copy(update={"scope": "code"})] if minute % 10 == 0 else [])
        status = landed(status, records[-FALLBACK_LIMIT:])  # as the rollout's progress hands them on
    assert status is not None
    assert status.fallbacks == records[-FALLBACK_LIMIT:]
    assert status.fallbacks_dropped == len(records) - FALLBACK_LIMIT == 30
    assert landed(status, status.fallbacks).fallbacks_dropped == 30, "a tick without a new flip drops nothing"
    assert landed(status, None).fallbacks_dropped == 30
