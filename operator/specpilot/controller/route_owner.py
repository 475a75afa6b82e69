"""The routing table's owner: it writes the table into the routes ConfigMap, which every router
watches, and reads `/routes` back from each router until it serves the generation written."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence

import aiohttp

from specpilot.controller.core.objects import PilotRef
from specpilot.controller.core.router_objects import render_routes_configmap
from specpilot.controller.ports import Json, KubeApi, Served
from specpilot.fetch.bodies import read_body
from specpilot.wire.names import ROUTER_ADMIN_PORT
from specpilot.wire.routes import RoutingTable

log = logging.getLogger("specpilot.operator")

ACK_TIMEOUT_SECONDS = 10.0
POLL_SECONDS = 0.2


class ConfigMapRoutes:
    """Routing through the routes ConfigMap and the routers' `/routes`."""

    def __init__(self, kube: KubeApi, session: aiohttp.ClientSession) -> None:
        self._kube = kube
        self._session = session

    async def write(self, ref: PilotRef, table: RoutingTable) -> Json:
        return await self._kube.apply(render_routes_configmap(ref, table))

    async def served(self, routers: Sequence[str], generation: int) -> Served:
        """Until every router serves `generation` of the table, or a timeout: a router that cannot be
        reached cannot be waited for, and stale tables fail safe to the baseline anyway."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + ACK_TIMEOUT_SECONDS
        pending = set(routers)
        while pending and loop.time() < deadline:
            for address in list(pending):
                if await self._generation(address) >= generation:
                    pending.discard(address)
            if pending:
                await asyncio.sleep(POLL_SECONDS)
        if pending:
            log.warning("routers %s did not confirm routing generation %d", sorted(pending), generation)
        return Served(loop.time() - started, tuple(sorted(pending)))

    async def _generation(self, address: str) -> int:
        try:
            async with self._session.get(
                f"http://{address}:{ROUTER_ADMIN_PORT}/routes", timeout=aiohttp.ClientTimeout(total=2)
            ) as resp:
                doc = json.loads(await read_body(resp))
            return int(doc.get("generation") or -1)
        except (aiohttp.ClientError, TimeoutError, ValueError, TypeError):
            return -1
