"""Routing decisions as pure functions: effective routes, scope, arm and endpoint choice.

Nothing here does I/O or reads a clock; the router's state feeds in what it observed (the last
table, why it is unusable, which arms have ready endpoints, `now`) and applies the result.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from specpilot.wire.names import Arm
from specpilot.wire.routes import ORDINARY, ArmWeights, RoutingTable, ScopeRoute
from specpilot.wire.samples import Fallback

# Arms in the order their shares are laid out on [0, 1): growing the speculative weight only
# widens the speculative interval, so a conversation pinned by affinity to it stays there (one on
# the control arm may move to the baseline, which runs the same engine).
ARM_ORDER = (Arm.SPECULATIVE, Arm.CONTROL, Arm.ALTERNATIVE, Arm.BASELINE)


UNAVAILABLE = {
    Arm.SPECULATIVE: Fallback.SPECULATIVE_UNAVAILABLE,
    Arm.CONTROL: Fallback.CONTROL_UNAVAILABLE,
    Arm.ALTERNATIVE: Fallback.ALTERNATIVE_UNAVAILABLE,
    Arm.BASELINE: Fallback.BASELINE_UNAVAILABLE,
}


def ordinary_weights(ordinary: Arm) -> ArmWeights:
    """Ordinary decoding: every request to the ordinary arm."""
    return ORDINARY if ordinary is Arm.BASELINE else ArmWeights(**{Arm.BASELINE.value: 0, ordinary.value: 100})


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One ready pod of an arm, addressed by pod IP (there is no ClusterIP routing)."""

    host: str
    port: int

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class EffectiveRoute:
    """What the router does with a scope's new requests right now.

    `diverted` names the arms whose share goes to the ordinary arm instead, and why; every other
    request lands where the configured weights put it, so a fallback moves nobody else. The ordinary
    arm is production's baseline, except in a rehearsal router (the control arm). `mirror` is the arm
    sent a copy of each request the speculative arm takes (`mirror_arm`).
    """

    scope: str
    configured: ArmWeights = ORDINARY
    deadline_seconds: float | None = None
    diverted: Mapping[Arm, Fallback] = field(default_factory=dict)
    ordinary: Arm = Arm.BASELINE
    mirror: Arm | None = None

    @property
    def weights(self) -> ArmWeights:
        """Effective shares per arm."""
        if not self.diverted:
            return self.configured
        shares = {arm.value: 0 if arm in self.diverted else self.configured.of(arm) for arm in Arm}
        shares[self.ordinary.value] += 100 - sum(shares.values())
        return ArmWeights(**shares)

    @property
    def fallbacks(self) -> tuple[Fallback, ...]:
        return tuple(dict.fromkeys(self.diverted.values()))


@dataclass(frozen=True)
class Routes:
    """Effective routes of every scope, with the table they came from."""

    default_scope: str
    table: RoutingTable | None
    scopes: Mapping[str, EffectiveRoute]
    table_fallback: Fallback | None
    valid_until: datetime | None
    ordinary: Arm = Arm.BASELINE

    def route(self, scope: str) -> EffectiveRoute:
        """The route of `scope`; a scope missing from the table runs ordinary decoding."""
        return self.scopes.get(scope) or EffectiveRoute(scope, ordinary_weights(self.ordinary), ordinary=self.ordinary)


def resolve_routes(
    *,
    table: RoutingTable | None,
    table_fallback: Fallback | None,
    ready_arms: frozenset[Arm],
    now: datetime,
    max_age: timedelta | None,
    default_scope: str,
    ordinary: Arm = Arm.BASELINE,
) -> Routes:
    """Effective routes from the last valid table and what is known to be wrong.

    `table` is the last table that parsed (kept for scope names, matches and deadlines even
    when a newer version is invalid); `table_fallback` says why it must not steer traffic.
    """
    if table is None:
        return Routes(default_scope, None, {}, table_fallback or Fallback.TABLE_MISSING, None, ordinary)
    valid_until = table.stale_at(max_age)
    if table_fallback is None and valid_until is not None and now >= valid_until:
        table_fallback = Fallback.TABLE_STALE
    scopes = {
        scope.name: _effective(scope, table_fallback, ready_arms=ready_arms, ordinary=ordinary)
        for scope in table.scopes
    }
    return Routes(table.default_scope or default_scope, table, scopes, table_fallback, valid_until, ordinary)


def _effective(
    scope: ScopeRoute, table_fallback: Fallback | None, *, ready_arms: frozenset[Arm], ordinary: Arm
) -> EffectiveRoute:
    weights = scope.weights
    diverted = {
        arm: table_fallback or reason
        for arm, reason in UNAVAILABLE.items()
        if arm is not ordinary and weights.of(arm) and (table_fallback is not None or arm not in ready_arms)
    }
    return EffectiveRoute(scope.name, weights, scope.deadline_seconds, diverted, ordinary, scope.mirror)


def classify_scope(routes: Routes, *, named: str | None, path: str, headers: Mapping[str, str]) -> str:
    """Scope of a request: a listed scope it names, else the first whose match holds, else default."""
    if named and named in routes.scopes:
        return named
    if routes.table is not None:
        matched = routes.table.classify(path=path, headers=headers)
        if matched is not None:
            return matched
    return routes.default_scope


def affinity_draw(scope: str, key: str) -> float:
    """A stable point on [0, 1) for a conversation, so it keeps landing on the same arm."""
    return zlib.crc32(f"{scope}\0{key}".encode()) / 2**32


def pick_arm(weights: ArmWeights, draw: float) -> Arm:
    """The arm whose share of [0, 1) contains `draw`."""
    point = draw * 100
    edge = 0
    for arm in ARM_ORDER:
        share = weights.of(arm)
        edge += share
        if share and point < edge:
            return arm
    return Arm.BASELINE


def choose_arm(route: EffectiveRoute, draw: float) -> tuple[Arm, Fallback | None]:
    """The arm for a request at `draw`, and the fallback that moved it to the ordinary arm, if any."""
    intended = pick_arm(route.configured, draw)
    reason = route.diverted.get(intended)
    return (route.ordinary, reason) if reason is not None else (intended, None)


def mirror_arm(route: EffectiveRoute, arm: Arm) -> Arm | None:
    """The arm a request sent to `arm` is copied to, if any: the route's mirror, for requests the
    speculative arm takes (not those a fallback moved to ordinary decoding)."""
    return route.mirror if arm is Arm.SPECULATIVE else None


def pick_endpoint(endpoints: Sequence[Endpoint], outstanding: Mapping[Endpoint, int], *, start: int) -> Endpoint | None:
    """Least outstanding requests; ties go to the first one from position `start` onwards."""
    count = len(endpoints)
    best: Endpoint | None = None
    best_load = 0
    for i in range(count):
        candidate = endpoints[(start + i) % count]
        load = outstanding.get(candidate, 0)
        if best is None or load < best_load:
            best, best_load = candidate, load
    return best
