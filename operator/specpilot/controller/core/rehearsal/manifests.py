"""The peak rehearsal's objects: its router, table and arms' Services, each step's load Job, and the
replica the restart fallback brings up. Pure."""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from datetime import datetime

from specpilot.analysis.evidence import Evidence
from specpilot.analysis.replay import replay_workload
from specpilot.api.spec import SpeculationPilotSpec
from specpilot.controller.core.arm_objects import (
    ENGINE_PROGRESS_DEADLINE_SECONDS,
    arm_pod,
    engine_service,
    engine_template,
)
from specpilot.controller.core.objects import RESTRICTED_CONTAINER, Json, PilotRef, owned_metadata, project_pod
from specpilot.controller.core.router_objects import render_router_deployment
from specpilot.controller.core.routing import reweighted, scope_route
from specpilot.controller.core.workload_ref import Workload
from specpilot.wire.names import (
    COMPONENT_LABEL,
    REHEARSAL_LOAD_COMPONENT,
    REHEARSAL_RESTART_COMPONENT,
    REHEARSAL_ROUTER_COMPONENT,
    ROUTER_PORT,
    Arm,
    arm_name,
    arm_selector,
    pilot_labels,
    rehearsal_pilot,
    rehearsal_restart_name,
    rehearsal_step_name,
    router_name,
    router_selector,
    routes_name,
)
from specpilot.wire.routes import ArmWeights, RoutingTable, render_routes


def render_rehearsal(ref: PilotRef, spec: SpeculationPilotSpec, *, table: RoutingTable, image: str) -> tuple[Json, ...]:
    """The rehearsal router and what it routes by: its table, and its two arms as Services of
    `rehearsal_pilot` selecting the pilot's speculative and control pods (none selects production)."""
    rehearsal, labels = rehearsal_pilot(ref.name), {COMPONENT_LABEL: REHEARSAL_ROUTER_COMPONENT}
    services = tuple(
        engine_service(ref, spec, arm_name(rehearsal, arm), arm_selector(ref.name, arm), labels)
        for arm in (Arm.SPECULATIVE, Arm.CONTROL)
    )
    routes = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": owned_metadata(ref, routes_name(rehearsal), **labels),
        "data": render_routes(table),
    }
    selector = {**router_selector(ref.name), COMPONENT_LABEL: REHEARSAL_ROUTER_COMPONENT}
    router = render_router_deployment(
        ref, spec, name=router_name(rehearsal), selector=selector, image=image, rehearsal=True
    )
    return (routes, *services, router)


def render_restart(ref: PilotRef, spec: SpeculationPilotSpec, workload: Workload | None = None) -> Json:
    """The replica the restart fallback brings up in place of a speculative one: the control arm's pod
    (ordinary decoding), labelled as the speculative arm's so that its Services reach it once Ready."""
    selector = {**arm_selector(ref.name, Arm.SPECULATIVE), COMPONENT_LABEL: REHEARSAL_RESTART_COMPONENT}
    pod, _ = arm_pod(spec, Arm.CONTROL, workload)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": owned_metadata(
            ref, rehearsal_restart_name(ref.name), **{COMPONENT_LABEL: REHEARSAL_RESTART_COMPONENT}
        ),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": selector},
            "progressDeadlineSeconds": ENGINE_PROGRESS_DEADLINE_SECONDS,
            "template": engine_template(spec, workload, pod, {**pilot_labels(ref.name), **selector}, None),
        },
    }


def render_step_load(
    ref: PilotRef,
    spec: SpeculationPilotSpec,
    *,
    step: int,
    router_ip: str,
    mix: str,
    rate: float,
    seconds: float,
    image: str,
) -> Json:
    """A rehearsal step's load: the project's load generator as a Job, open-loop Poisson arrivals of
    the scopes' own mix at `rate` for `seconds`, into the rehearsal router's pod (the one seen ready:
    a router that goes mid-step fails the step's Job rather than retrying it elsewhere)."""
    labels = {COMPONENT_LABEL: REHEARSAL_LOAD_COMPONENT}
    timeout = spec.router.request_timeout.total_seconds()
    args = [
        "loadgen",
        f"--url=http://{router_ip}:{ROUTER_PORT}",
        f"--mix={mix}",
        "--arrivals=poisson",
        f"--rate={rate:g}",
        f"--duration={seconds:g}",
        f"--timeout={timeout:g}",
        f"--seed={step}",
        "--no-progress",
    ]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": owned_metadata(ref, rehearsal_step_name(ref.name, step), **labels),
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": int(seconds + timeout + 60),
            "template": {
                "metadata": {"labels": {**pilot_labels(ref.name), **labels}},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "containers": [
                        {
                            "name": "loadgen",
                            "image": image,
                            "args": args,
                            "resources": {
                                "requests": {"cpu": "200m", "memory": "128Mi"},
                                "limits": {"memory": "512Mi"},
                            },
                            "securityContext": RESTRICTED_CONTAINER,
                        }
                    ],
                    **project_pod(spec),
                },
            },
        },
    }


FLIPPED = ArmWeights(control=100)  # the routing fallback rehearsed: the speculative share on the control arm


def table(
    pilot: str, spec: SpeculationPilotSpec, scopes: Collection[str], *, flipped: bool, now: datetime
) -> RoutingTable:
    """The rehearsal router's table: each rehearsed scope split evenly between the speculative and the
    control arm, or all on the control arm once `flipped` (the routing fallback rehearsed); any other
    request runs ordinary decoding, which for that router is the control arm."""
    split = [
        scope_route(scope, weight=50, request_timeout=spec.router.request_timeout, control=True)
        for scope in spec.scopes
        if scope.name in scopes
    ]
    return RoutingTable(
        pilot=rehearsal_pilot(pilot),
        generation=2 if flipped else 1,
        updated_at=now,
        default_scope=spec.router.default_scope if spec.router.default_scope in scopes else None,
        scopes=tuple(reweighted(route, FLIPPED) for route in split) if flipped else tuple(split),
    )


def mix(spec: SpeculationPilotSpec, evidence: Evidence, scopes: Sequence[str]) -> str:
    """The rehearsed scopes' own mix, as the load generator reads it (JSON)."""
    workload, _ = replay_workload(spec, evidence, only=scopes)
    return json.dumps(workload, separators=(",", ":"), sort_keys=True)
