"""The routing table a pilot's state asks for, rendered from the spec's scopes and their weights.

The table's content (everything but `updatedAt` and `generation`) is hashed: the generation moves
only when the content does, so the router's reported generation says which decision it runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from specpilot.api.spec import Scope, SpeculationPilotSpec
from specpilot.controller.core.measurements import alternative_judged
from specpilot.controller.core.objects import content_hash
from specpilot.wire.names import Arm
from specpilot.wire.routes import ORDINARY, ArmWeights, HeaderMatch, PathMatch, RoutingTable, ScopeMatch, ScopeRoute


def scope_route(
    scope: Scope,
    *,
    weight: int,
    request_timeout: timedelta,
    control: bool,
    alternative: bool = False,
    mirrored: bool = False,
) -> ScopeRoute:
    """One scope's entry: its match as the API states it, its deadline, its speculative weight, and the
    control arm's and the alternative arm's part, each where the pilot runs it (a flip back moves them
    all to the baseline). The alternative arm takes the same weight again. The control arm is sent a
    copy of each speculative request where `mirrored` (the live pilot: both compared arms serve the same
    requests at the same moments), else the same weight again (the rehearsal's router, whose own
    traffic it is)."""
    match = ScopeMatch(
        headers=tuple(HeaderMatch(name=h.name, type=h.type.value, value=h.value) for h in scope.match.headers),
        paths=tuple(PathMatch(type=p.type.value, value=p.value) for p in scope.match.paths),
    )
    deadline = (scope.deadline or request_timeout).total_seconds()
    control_weight = weight if control and not mirrored else 0
    alternative_weight = weight if alternative else 0
    return ScopeRoute(
        name=scope.name,
        weights=ArmWeights(
            baseline=100 - weight - control_weight - alternative_weight,
            speculative=weight,
            control=control_weight,
            alternative=alternative_weight,
        ),
        deadline_seconds=deadline,
        match=match,
        mirror=Arm.CONTROL if control and mirrored and weight else None,
    )


def routing_table(
    pilot: str, spec: SpeculationPilotSpec, weights: Mapping[str, int], *, generation: int, now: datetime
) -> RoutingTable:
    """The table for `weights` (speculative percent per scope; a scope left out gets 0)."""
    return RoutingTable(
        pilot=pilot,
        generation=generation,
        updated_at=now,
        default_scope=spec.router.default_scope,
        scopes=tuple(
            scope_route(
                scope,
                weight=weights.get(scope.name, 0),
                request_timeout=spec.router.request_timeout,
                control=spec.control.enabled,
                alternative=alternative_judged(spec),
                mirrored=True,
            )
            for scope in spec.scopes
        ),
    )


def table_hash(table: RoutingTable) -> str:
    """Hash of what the router acts on: scopes, matches, weights, deadlines and the default scope."""
    return content_hash(table.model_dump(mode="json", exclude={"updated_at", "generation"}, exclude_none=True))


def reweighted(route: ScopeRoute, weights: ArmWeights) -> ScopeRoute:
    """The same scope's entry with other weights."""
    # Built anew rather than copied, so that the route's validation and lookups see the new weights.
    return ScopeRoute(name=route.name, weights=weights, deadline_seconds=route.deadline_seconds, match=route.match)


def ordinary(table: RoutingTable, *, generation: int, now: datetime) -> RoutingTable:
    """The same table with every scope on the baseline: the first step of a teardown."""
    return RoutingTable(
        pilot=table.pilot,
        generation=generation,
        updated_at=now,
        default_scope=table.default_scope,
        scopes=tuple(reweighted(route, ORDINARY) for route in table.scopes),
    )
