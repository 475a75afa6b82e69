"""A fixed routing table and fixed endpoints, for running the router without a cluster.

Used by the benchmark and by loopback tests; in a cluster the router watches the API instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from pathlib import Path

from specpilot.router.core.choice import Endpoint
from specpilot.router.core.state import ENDPOINTS, TABLE, RouteSink
from specpilot.wire.names import Arm
from specpilot.wire.routerconfig import split_host_port
from specpilot.wire.routes import ROUTES_KEY


def static_endpoints(arms: Iterable[tuple[Arm, Iterable[str]]]) -> dict[Arm, tuple[Endpoint, ...]]:
    """Endpoints per arm from ``HOST:PORT`` addresses, as `RouterConfig.static_endpoints` holds them."""
    return {arm: tuple(Endpoint(*split_host_port(address)) for address in addresses) for arm, addresses in arms}


class StaticSource:
    """Reports one table (read once) and fixed endpoints (implements `RouteSource`)."""

    def __init__(self, *, routes_file: Path | None, endpoints: Mapping[Arm, tuple[Endpoint, ...]]) -> None:
        self._routes_file = routes_file
        self._endpoints = endpoints

    async def run(self, sink: RouteSink) -> None:
        data = None if self._routes_file is None else {ROUTES_KEY: self._routes_file.read_text()}
        sink.set_table(data)
        sink.set_endpoints(self._endpoints)
        sink.synced(TABLE)
        sink.synced(ENDPOINTS)
        await asyncio.Event().wait()
