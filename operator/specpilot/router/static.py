"""A fixed routing table and fixed endpoints, for running the router without a cluster.

Used by the benchmark and by loopback tests; in a cluster the router watches the API instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path

from specpilot.router.decide import Endpoint
from specpilot.router.state import ENDPOINTS, TABLE, RouteSink
from specpilot.router.table import ROUTES_KEY, Arm


def parse_endpoints(spec: str) -> tuple[Arm, tuple[Endpoint, ...]]:
    """An ``ARM=HOST:PORT[,HOST:PORT...]`` spec as the arm and its endpoints."""
    arm, _, addresses = spec.partition("=")
    try:
        return Arm(arm), tuple(_endpoint(address) for address in addresses.split(",") if address)
    except ValueError:
        raise ValueError(f"bad endpoints {spec!r}: want ARM=HOST:PORT[,HOST:PORT...]") from None


def _endpoint(address: str) -> Endpoint:
    host, _, port = address.rpartition(":")
    return Endpoint(host.strip("[]"), int(port))


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
