"""What the rehearsal's steps measured: each arm's figures over a step, the capacity they show, and what
the routing and restart fallbacks did. Pure."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from specpilot.analysis.stats import nearest_rank
from specpilot.analysis.window import ArmEngine, ArmRequests
from specpilot.api.spec import SpeculationPilotSpec
from specpilot.api.status import (
    ArmStepFigures,
    RehearsalStatus,
    RehearsalStep,
    RestartFallback,
    RoutingFlip,
    ScopeStepFigures,
)
from specpilot.controller.core.measurements import Measurements
from specpilot.metrics.arm_requests import finished_at
from specpilot.wire.names import Arm
from specpilot.wire.samples import Fallback, RequestOutcome, RequestSample


def restart_fallback(
    measurements: Measurements, status: RehearsalStatus, *, at: datetime, ready_at: datetime | None
) -> RestartFallback | None:
    """What the restart fallback measured since `at`: when its replacement replica became Ready, and
    the rehearsed requests in flight at `at` or sent until then (or until the last collection), among
    those finished by the last collection."""
    end = measurements.collected_at
    if end is None or end <= at:
        return None
    ready = ready_at if ready_at is not None and ready_at >= at else None
    until = (min(ready, end) if ready is not None else end).timestamp()
    meanwhile = [
        sample
        for sample in measurements.samples.samples(at, end)
        if sample.scope in status.scopes and sample.at < until
    ]
    served = [sample for sample in meanwhile if sample.arm is Arm.SPECULATIVE]
    late = sum(1 for sample in served if _late(sample) or sample.outcome is not RequestOutcome.OK)
    return RestartFallback(
        at=at,
        ready_at=ready,
        seconds_to_ready=round((ready - at).total_seconds(), 3) if ready is not None else None,
        requests=len(served),
        missed=late,
        on_time=round((len(served) - late) / len(served), 4) if served else None,
        fell_back=sum(1 for sample in meanwhile if sample.fallback == Fallback.SPECULATIVE_UNAVAILABLE),
    )


def routing_flip(
    measurements: Measurements,
    spec: SpeculationPilotSpec,
    status: RehearsalStatus,
    *,
    at: datetime,
    control: ArmStepFigures | None,
) -> RoutingFlip | None:
    """What the control arm did after the flip at `at`: its requests that finished since, the ones
    late, when the last late one finished, and whether it kept up on time over the last window."""
    end = measurements.collected_at
    if end is None or end <= at:
        return None
    samples = [
        sample
        for sample in measurements.samples.samples(at, end)
        if sample.arm is Arm.CONTROL and sample.scope in status.scopes
    ]
    late = [sample for sample in samples if _late(sample)]
    target = spec.rehearsal.on_time_target if spec.rehearsal is not None else 1.0
    recovered = kept_on_time(control, target)
    last = max((finished_at(sample) for sample in late), default=None)
    return RoutingFlip(
        at=at,
        recovered=recovered,
        recovery_seconds=(round(last - at.timestamp(), 3) if last is not None else 0.0) if recovered else None,
        missed=len(late),
        requests=len(samples),
    )


def _late(sample: RequestSample) -> bool:
    return sample.outcome is RequestOutcome.TIMEOUT or (
        sample.outcome is RequestOutcome.OK and sample.deadline_met is False
    )


def capacity_of(steps: Sequence[RehearsalStep], arm: Arm, target: float) -> float | None:
    """The highest load the arm was measured to complete (per replica) on a step where it kept up with
    its arrivals and met the on-time target: an arm falling behind finishes only part of what it is
    sent, and the requests still queued would miss their deadlines unseen. Measured, not planned: the
    arrivals of a step scatter about its planned load, and capacity claims only a load the arm served.
    A step with no figure for it never counts as met."""
    figures = (figures_of(step, arm) for step in steps)
    met = [
        f.completed_per_replica
        for f in figures
        if f is not None and kept_on_time(f, target) and f.completed_per_replica
    ]
    return round(max(met), 4) if met else None


def figures_of(step: RehearsalStep, arm: Arm) -> ArmStepFigures | None:
    return step.speculative if arm is Arm.SPECULATIVE else step.control


def kept_on_time(figures: ArmStepFigures | None, target: float) -> bool:
    """The arm kept up with its arrivals and met the on-time target."""
    return figures is not None and bool(figures.kept_up) and figures.on_time is not None and figures.on_time >= target


def arm_figures(
    requests: Sequence[ArmRequests],
    engine: ArmEngine | None,
    *,
    seconds: float,
    replicas: int,
    arrived: int | None = None,
) -> ArmStepFigures:
    """One arm's figures over a step's read span from its requests of every rehearsed scope, `arrived` of
    them sent to it in the span (None: unknown, so nothing on keeping up): what the router sent, not the
    step's plan, since a load generator may fall short of its rate and a flip reaches it at its next
    request. The engine's figures are the arm's, none for part of its requests."""
    routed = sum(r.routed for r in requests)
    ok = sum(r.count(RequestOutcome.OK) for r in requests)
    late = sum(r.late for r in requests)
    timeouts = sum(r.count(RequestOutcome.TIMEOUT) for r in requests)
    rejected = sum(r.count(RequestOutcome.REJECTED, RequestOutcome.NO_ENDPOINT) for r in requests)
    ttft = sorted(v for r in requests for v in r.ttft_seconds)
    e2e = sorted(v for r in requests for v in r.e2e_seconds)
    tokens = sum(t for r in requests for t in r.committed_tokens)
    decode = sum(d for r in requests for d in r.decode_seconds)
    expected = arrived or 0
    return ArmStepFigures(
        requests=routed,
        completed_per_replica=round(routed / seconds / replicas, 4) if seconds > 0 and replicas > 0 else None,
        kept_up=routed >= expected - 3 * math.sqrt(expected) if expected > 0 else None,
        ttft_p50=_rank(ttft, 0.5),
        ttft_p99=_rank(ttft, 0.99),
        end_to_end_p95=_rank(e2e, 0.95),
        time_per_committed_token=round(decode / tokens, 6) if tokens else None,
        timeout_share=round((timeouts + late) / routed, 4) if routed else None,
        rejection_share=round(rejected / routed, 4) if routed else None,
        on_time=round(max(0, ok - late) / routed, 4) if routed else None,
        peak_kv_usage=max((usage for _, usage in engine.kv_usage), default=None) if engine is not None else None,
        preemptions=engine.preemptions if engine is not None else None,
    )


def _rank(values: Sequence[float], q: float) -> float | None:
    return round(nearest_rank(values, q), 4) if values else None


@dataclass(frozen=True)
class StepFigures:
    """What a step measured over its read span: per arm, and per scope and arm when more
    than one scope is rehearsed."""

    arms: Mapping[Arm, ArmStepFigures]
    scopes: tuple[ScopeStepFigures, ...] = ()
