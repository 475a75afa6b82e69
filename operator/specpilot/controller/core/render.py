"""What a pilot's objects should look like: `render(pilot) -> objects`, with no I/O.

The arms' objects are `arm_objects`', the router's `router_objects`', the rehearsal's `rehearsal.manifests`'; this
module puts them in the order they are applied. There is no mock branch: a mock engine is an engine
whose command is `specpilot mock-vllm`. Objects are plain JSON-ready dicts in server-side-apply form,
each owned by the pilot, so deleting the pilot collects them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specpilot.api.spec import SpeculationPilotSpec
from specpilot.controller.core.arm_objects import ArmPlan, arms_of, render_arm
from specpilot.controller.core.objects import Json, PilotRef, owned_metadata
from specpilot.controller.core.rehearsal.manifests import render_restart
from specpilot.controller.core.router_objects import render_router, render_routes_configmap, router_rbac
from specpilot.controller.core.workload_ref import Workload
from specpilot.wire.names import EVIDENCE_KEY, EVIDENCE_LABEL, Arm, evidence_name
from specpilot.wire.routes import RoutingTable


def _one_replica_fewer(deployment: Json) -> Json:
    spec = {**deployment["spec"], "replicas": max(0, int(deployment["spec"]["replicas"]) - 1)}
    return {**deployment, "spec": spec}


def render_evidence_configmap(ref: PilotRef, text: str) -> Json:
    """The evidence store, owned by the pilot (collected with it) but outside its watched children."""
    meta = owned_metadata(ref, evidence_name(ref.name))
    meta["labels"] = {EVIDENCE_LABEL: ref.name}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {EVIDENCE_KEY: text}}


@dataclass(frozen=True, kw_only=True)
class Rendered:
    """Every object of a pilot, in the order they are applied (the router's access before the router,
    the table before anything routes by it, arms before the router that sends them traffic)."""

    arms: tuple[ArmPlan, ...]
    routes: Json
    objects: tuple[Json, ...]


def render(
    ref: PilotRef,
    spec: SpeculationPilotSpec,
    *,
    table: RoutingTable,
    router_image: str,
    extra: Sequence[Json] = (),
    restarting: bool = False,
    workload: Workload | None = None,
) -> Rendered:
    """Every object; `extra` (the rehearsal's, while it runs) after the rest. While the restart fallback
    is rehearsed (`restarting`), one speculative replica runs ordinary decoding in its own Deployment.
    With a `workload`, the baseline is the team's Deployment, which is read and never rendered."""
    arms = tuple(render_arm(ref, spec, arm, workload) for arm in arms_of(spec))
    routes = render_routes_configmap(ref, table)
    deployment, service = render_router(ref, spec, image=router_image)
    deployments = tuple(
        _one_replica_fewer(plan.deployment) if restarting and plan.arm is Arm.SPECULATIVE else plan.deployment
        for plan in arms
        if plan.deployment is not None
    )
    objects = (
        *router_rbac(ref, spec),
        routes,
        *(plan.service for plan in arms),
        *deployments,
        service,
        deployment,
        *extra,
        *((render_restart(ref, spec, workload),) if restarting else ()),
    )
    return Rendered(arms=arms, routes=routes, objects=objects)
