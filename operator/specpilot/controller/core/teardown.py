"""The ordered teardown's steps, as a pure function of what runs: scopes to ordinary decoding first, then
the speculative and alternative arms and the router, and the baseline last; and the routing table that
runs, as its ConfigMap holds it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from specpilot.analysis.rollout import Event, EventType
from specpilot.api.reasons import Reason
from specpilot.controller.core.objects import PilotRef
from specpilot.controller.core.rehearsal.tick import rehearsal_children
from specpilot.controller.core.routing import ordinary
from specpilot.controller.core.snapshot import Child, Observation
from specpilot.wire.names import ROUTER_COMPONENT, Arm, arm_name, router_name, routes_name
from specpilot.wire.routes import RoutingTable, TableError, parse_routes


def observed_table(ref: PilotRef, seen: Observation) -> RoutingTable | None:
    """The routing table that runs, as the routes ConfigMap holds it."""
    child = seen.children.get(("ConfigMap", routes_name(ref.name)))
    try:
        return parse_routes(child.managed.get("data") if child else None, pilot=ref.name)
    except TableError:
        return None


@dataclass(frozen=True, kw_only=True)
class Teardown:
    """One pass of the ordered teardown: write `flip` (every scope to ordinary decoding), wait for
    the routers to serve `generation`, delete `first`; unless the router's pods still drain
    (`draining`), delete `last` and the pilot is gone."""

    flip: RoutingTable | None
    events: tuple[Event, ...]
    generation: int | None  # None: there is no table to wait for
    routers: tuple[str, ...]
    first: tuple[Child, ...]
    draining: bool
    last: tuple[Child, ...]


def teardown(ref: PilotRef, seen: Observation, now: datetime) -> Teardown:
    """Scopes go to ordinary decoding first and the routers are given time to take it; then the
    speculative and alternative arms go, then the router (draining in-flight requests), and the
    baseline, which serves until the router is gone, goes last."""
    table = observed_table(ref, seen)
    flip = None
    if table is not None and any(route.weights.baseline != 100 for route in table.scopes):
        flip = ordinary(table, generation=table.generation + 1, now=now)
    deployments = "apps/v1", "Deployment"
    return Teardown(
        flip=flip,
        events=(Event(EventType.NORMAL, Reason.TEARDOWN, "every scope flipped to ordinary decoding"),) if flip else (),
        generation=(flip or table).generation if table is not None else None,
        routers=tuple(ip for _, ip in seen.ready(ROUTER_COMPONENT)),
        first=(
            *rehearsal_children(seen),
            *(Child(*deployments, arm_name(ref.name, arm)) for arm in (Arm.SPECULATIVE, Arm.CONTROL, Arm.ALTERNATIVE)),
            Child(*deployments, router_name(ref.name)),
        ),
        draining=seen.count(ROUTER_COMPONENT) > 0,
        last=(
            Child(*deployments, arm_name(ref.name, Arm.BASELINE)),
            *(Child("v1", "Service", arm_name(ref.name, arm)) for arm in Arm),
            Child("v1", "Service", router_name(ref.name)),
            Child("v1", "ConfigMap", routes_name(ref.name)),
            Child("rbac.authorization.k8s.io/v1", "RoleBinding", router_name(ref.name)),
            Child("rbac.authorization.k8s.io/v1", "Role", router_name(ref.name)),
            Child("v1", "ServiceAccount", router_name(ref.name)),
        ),
    )
