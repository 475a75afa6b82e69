"""What the router currently knows: the routing table, ready endpoints and outstanding requests.

Sources (Kubernetes watches, or static files) push observations in through the `RouteSink`
methods; the proxy reads `routes()` and picks endpoints. Everything runs on one event loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Protocol

from specpilot.router.core.choice import Endpoint, Routes, pick_endpoint, resolve_routes
from specpilot.wire.names import Arm
from specpilot.wire.routes import RoutingTable, TableError, parse_routes
from specpilot.wire.samples import Fallback

log = logging.getLogger("specpilot.router")

# What a source must have delivered before the router is ready.
TABLE = "table"
ENDPOINTS = "endpoints"
SOURCES = frozenset({TABLE, ENDPOINTS})


class RouteSink(Protocol):
    """Where a source reports what it observed."""

    def set_table(self, data: Mapping[str, str] | None) -> None:
        """The routing ConfigMap's data changed (None: the ConfigMap is gone)."""

    def set_endpoints(self, endpoints: Mapping[Arm, tuple[Endpoint, ...]]) -> None:
        """The ready endpoints of every arm."""

    def synced(self, what: str) -> None:
        """A source has delivered its first complete view of `what`."""


class RouteSource(Protocol):
    """Feeds a `RouteSink` until cancelled."""

    async def run(self, sink: RouteSink) -> None: ...


class RouterState:
    """The router's view of its pilot; implements `RouteSink`."""

    def __init__(
        self,
        *,
        pilot: str,
        default_scope: str,
        max_table_age: timedelta | None,
        ordinary: Arm = Arm.BASELINE,
        eject_seconds: float = 2.0,
        clock: Callable[[], float] = time.time,
        on_routes: Callable[[Routes, Mapping[Arm, tuple[Endpoint, ...]]], None] | None = None,
    ) -> None:
        self._pilot = pilot
        self._default_scope = default_scope
        self._max_age = max_table_age
        self.ordinary = ordinary
        self._eject_seconds = eject_seconds
        self._clock = clock
        self._on_routes = on_routes
        self._table: RoutingTable | None = None
        self._table_fallback: Fallback | None = Fallback.TABLE_MISSING
        self._table_problem = "no routing table yet"
        self._endpoints: dict[Arm, tuple[Endpoint, ...]] = {arm: () for arm in Arm}
        self._ejected: dict[Endpoint, float] = {}
        self._synced: set[str] = set()
        self._routes: Routes | None = None
        self._expires = float("inf")
        self._next = 0
        self._draining = False
        self.outstanding: dict[Endpoint, int] = {}

    # RouteSink

    def set_table(self, data: Mapping[str, str] | None) -> None:
        if data is None:
            self._table, self._table_fallback, self._table_problem = None, Fallback.TABLE_MISSING, "ConfigMap absent"
        else:
            try:
                self._table = parse_routes(data, pilot=self._pilot)
                self._table_fallback, self._table_problem = None, ""
            except TableError as exc:
                self._table_fallback, self._table_problem = Fallback.TABLE_INVALID, str(exc)
        self._changed()

    def set_endpoints(self, endpoints: Mapping[Arm, tuple[Endpoint, ...]]) -> None:
        self._endpoints = {arm: tuple(endpoints.get(arm, ())) for arm in Arm}
        self._changed()

    def synced(self, what: str) -> None:
        if what not in self._synced:
            self._synced.add(what)
            self._changed()

    def _changed(self) -> None:
        self._routes = None
        self.routes()  # log and publish the change now, not at the next request

    # Readers

    @property
    def ready(self) -> bool:
        """Every source has synced, the ordinary arm has a ready endpoint, and no shutdown is under way."""
        return not self._draining and self._synced >= SOURCES and bool(self._endpoints[self.ordinary])

    def drain(self) -> None:
        """Report not ready from now on, so that clients stop sending before the router stops."""
        self._draining = True

    def endpoints(self) -> Mapping[Arm, tuple[Endpoint, ...]]:
        return self._endpoints

    def routes(self) -> Routes:
        """Effective routes, recomputed after a change or when the table turns stale."""
        now = self._clock()
        if self._routes is not None and now < self._expires:
            return self._routes
        previous = self._routes
        routes = resolve_routes(
            table=self._table,
            table_fallback=self._table_fallback,
            ready_arms=frozenset(arm for arm, eps in self._endpoints.items() if eps),
            now=datetime.fromtimestamp(now, UTC),
            max_age=self._max_age,
            default_scope=self._default_scope,
            ordinary=self.ordinary,
        )
        self._routes = routes
        stale_at = routes.valid_until if routes.table_fallback is None else None
        self._expires = stale_at.timestamp() if stale_at is not None else float("inf")
        if TABLE in self._synced:
            log_changes(previous, routes, self._table_problem)
        if self._on_routes is not None:
            self._on_routes(routes, self._endpoints)
        return routes

    def pick(self, arm: Arm, avoid: frozenset[Endpoint] = frozenset()) -> Endpoint | None:
        """The endpoint of `arm` with the fewest outstanding requests, `avoid` aside.

        Recently failed endpoints are skipped while the arm has others: ejecting every endpoint
        would turn one flaky connection into an outage.
        """
        candidates = tuple(ep for ep in self._endpoints[arm] if ep not in avoid) if avoid else self._endpoints[arm]
        if self._ejected:
            now = self._clock()
            self._ejected = {ep: until for ep, until in self._ejected.items() if until > now}
            candidates = tuple(ep for ep in candidates if ep not in self._ejected) or candidates
        if not candidates:
            return None
        self._next += 1
        return pick_endpoint(candidates, self.outstanding, start=self._next)

    def acquire(self, endpoint: Endpoint) -> None:
        """Count a request against `endpoint` until `release`."""
        self.outstanding[endpoint] = self.outstanding.get(endpoint, 0) + 1

    def release(self, endpoint: Endpoint) -> None:
        count = self.outstanding.get(endpoint, 0) - 1
        if count > 0:
            self.outstanding[endpoint] = count
        else:
            self.outstanding.pop(endpoint, None)

    def eject(self, endpoint: Endpoint) -> None:
        """Skip `endpoint` for a while after a failed connect (it may be shutting down)."""
        self._ejected[endpoint] = self._clock() + self._eject_seconds

    def describe(self) -> dict[str, object]:
        """The effective table, for the admin ``/routes`` endpoint."""
        return describe_routes(
            self.routes(),
            pilot=self._pilot,
            problem=self._table_problem,
            endpoints=self._endpoints,
            synced=self._synced,
        )


def describe_routes(
    routes: Routes,
    *,
    pilot: str,
    problem: str,
    endpoints: Mapping[Arm, tuple[Endpoint, ...]],
    synced: Iterable[str],
) -> dict[str, object]:
    """The effective routes of `pilot` as the admin ``/routes`` endpoint shows them, beside why the table
    cannot be used (`problem`), the ready endpoints and what the sources have synced."""
    table = routes.table
    return {
        "pilot": pilot,
        "generation": None if table is None else table.generation,
        "updatedAt": None if table is None else table.updated_at.isoformat(),
        "validUntil": None if routes.valid_until is None else routes.valid_until.isoformat(),
        "tableFallback": routes.table_fallback,
        "tableProblem": problem or None,
        "defaultScope": routes.default_scope,
        "scopes": {
            name: {
                "weights": route.weights.model_dump(),
                "configured": route.configured.model_dump(),
                "deadlineSeconds": route.deadline_seconds,
                "fallbacks": list(route.fallbacks),
                "mirror": route.mirror,
            }
            for name, route in routes.scopes.items()
        },
        "endpoints": {arm.value: [ep.address for ep in eps] for arm, eps in endpoints.items()},
        "synced": sorted(synced),
    }


def log_changes(previous: Routes | None, routes: Routes, problem: str) -> None:
    """Log the table turning usable or unusable (`problem`: why), and scopes diverted to baseline or back."""
    before = previous.table_fallback if previous is not None else None
    if routes.table_fallback != before:
        if routes.table_fallback is None:
            log.info("routing table in use (generation %s)", routes.table and routes.table.generation)
        else:
            log.warning(
                "routing table unusable (%s: %s): every scope goes to baseline",
                routes.table_fallback,
                problem or "updatedAt older than --max-table-age",
            )
    for name, route in routes.scopes.items():
        old = previous.scopes.get(name) if previous is not None else None
        old_diverted = old.diverted if old is not None else {}
        if routes.table_fallback is None and route.diverted and route.diverted != old_diverted:
            log.warning(
                "scope %s: %s share goes to baseline (%s)",
                name,
                ", ".join(arm.value for arm in route.diverted),
                ", ".join(route.fallbacks),
            )
        elif old_diverted and not route.diverted and routes.table_fallback is None:
            log.info("scope %s: back to configured weights", name)
