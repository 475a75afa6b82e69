"""`specpilot router`: the per-pilot scope router process.

Its flags, their environment fallbacks and their checks are `specpilot.wire.routerconfig.RouterConfig`,
which the operator also renders the router's Deployment with. ``--static-routes`` with
``--static-endpoints`` runs it without Kubernetes (benchmarks, local trials).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import sys
from datetime import timedelta
from pathlib import Path

from aiohttp import web

from specpilot.kubeaccess import load_access
from specpilot.router.admin import admin_app
from specpilot.router.core.sample_log import SampleLog
from specpilot.router.core.state import RouterState, RouteSource
from specpilot.router.kube import ClusterSource
from specpilot.router.metrics import RouterMetrics
from specpilot.router.proxy import Proxy
from specpilot.router.reader import Limits
from specpilot.router.server import Server
from specpilot.router.static import StaticSource, static_endpoints
from specpilot.router.upstream import UpstreamPool
from specpilot.wire.routerconfig import RouterConfig, RouterConfigError, split_host_port

try:
    import uvloop
except ImportError:  # pragma: no cover - uvloop does not build everywhere; asyncio's loop does the same work
    uvloop = None  # type: ignore[assignment]

log = logging.getLogger("specpilot.router")

SHUTDOWN_GRACE_SECONDS = 30.0
SHUTDOWN_POLL_SECONDS = 0.05  # how often a stopping router closes the connections gone idle


def _bind_address(address: str) -> tuple[str, int]:
    """Host and port to bind for ``HOST:PORT``; ``:PORT`` binds every interface."""
    host, port = split_host_port(address)
    return host or "0.0.0.0", port


class Router:
    """The router's parts, wired from its configuration; `start` binds both ports."""

    def __init__(self, config: RouterConfig) -> None:
        self.config = config
        self.metrics = RouterMetrics()
        max_age = timedelta(seconds=config.max_table_age) if config.max_table_age > 0 else None
        self.state = RouterState(
            pilot=config.pilot,
            default_scope=config.default_scope,
            max_table_age=max_age,
            ordinary=config.ordinary_arm,
            on_routes=self.metrics.show_routes,
        )
        self.samples = SampleLog(config.max_samples)
        self.source: RouteSource
        if config.kubernetes:
            self.source = ClusterSource(
                access=load_access(),
                namespace=config.watched_namespace(),
                pilot=config.pilot,
                on_restart=lambda resource, reason: self.metrics.watch_restarts.labels(resource, reason).inc(),
            )
        else:
            routes_file = None if config.static_routes is None else Path(config.static_routes)
            self.source = StaticSource(routes_file=routes_file, endpoints=static_endpoints(config.static_endpoints))
        self.addresses: list[tuple[str, int]] = []
        self._pool = UpstreamPool(connect_timeout=config.connect_timeout)
        self.traffic: Server | None = None
        self.proxy: Proxy | None = None
        self._listener: asyncio.Server | None = None
        self._admin: web.AppRunner | None = None
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        config = self.config
        self.proxy = proxy = Proxy(
            state=self.state, metrics=self.metrics, samples=self.samples, config=config, pool=self._pool
        )
        limits = Limits(
            max_body_bytes=config.max_body_bytes,
            max_header_bytes=config.max_header_bytes,
            max_headers=config.max_headers,
            read_timeout=config.read_timeout,
        )
        self.traffic = Server(proxy.handle, limits, lambda reason: self.metrics.refused.labels(reason).inc())
        self._tasks = [
            asyncio.create_task(self.source.run(self.state), name="route-source"),
            asyncio.create_task(_tick(self.state), name="staleness"),
        ]
        host, port = _bind_address(config.listen)
        loop = asyncio.get_running_loop()
        self._listener = await loop.create_server(self.traffic, host, port, backlog=1024)
        self.addresses.append(_bound(self._listener))
        log.info("listening on %s:%d", *self.addresses[-1])
        self._admin = web.AppRunner(
            admin_app(state=self.state, metrics=self.metrics, samples=self.samples), access_log=None
        )
        await self._admin.setup()
        host, port = _bind_address(config.admin_listen)
        await web.TCPSite(self._admin, host, port).start()
        bound = self._admin.addresses[0]
        self.addresses.append((str(bound[0]), int(bound[1])))
        log.info("admin on %s:%d", *self.addresses[-1])

    async def wait(self) -> None:
        """Until the routing source fails (it never ends otherwise)."""
        await self._tasks[0]

    async def stop(self) -> None:
        """Stop taking requests, let in-flight ones finish (up to the grace period), then close; mirrored
        copies still under way are cancelled."""
        for task in self._tasks:
            task.cancel()
        if self._listener is not None and self.traffic is not None:
            self._listener.close()
            traffic = self.traffic
            traffic.draining = True  # every response from now on closes its connection
            loop = asyncio.get_running_loop()
            deadline = loop.time() + SHUTDOWN_GRACE_SECONDS
            while traffic.connections and loop.time() < deadline:
                traffic.close_idle()  # a connection just accepted is given its request first
                await asyncio.sleep(SHUTDOWN_POLL_SECONDS)
            traffic.abort_all()
            await asyncio.sleep(0)  # let the aborted connections' callbacks run
        if self.proxy is not None:
            await self.proxy.mirror.stop()
        if self._admin is not None:
            await self._admin.cleanup()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._pool.close()


def _bound(listener: asyncio.Server) -> tuple[str, int]:
    host, port = listener.sockets[0].getsockname()[:2]
    return str(host), int(port)


async def serve(config: RouterConfig) -> None:
    """Run the router until SIGTERM/SIGINT, then drain in-flight requests."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    router = Router(config)
    try:
        await router.start()
        gc.freeze()  # what start-up made lives as long as the process: keep it out of every collection
        stopping = asyncio.create_task(stop.wait())
        failing = asyncio.create_task(router.wait())
        done, pending = await asyncio.wait([stopping, failing], return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        if failing in done:
            failing.result()  # a source only ends by failing
        router.state.drain()
        log.info("stopping: not ready for %g s, then draining in-flight requests", config.drain_seconds)
        await asyncio.sleep(config.drain_seconds)
    finally:
        await router.stop()


async def _tick(state: RouterState) -> None:
    """Re-evaluate routes every second, so a table turning stale is logged and shown promptly."""
    while True:
        await asyncio.sleep(1.0)
        state.routes()


def main(argv: list[str]) -> int:
    try:
        config = RouterConfig.parse(argv, os.environ)
    except RouterConfigError as exc:
        print(f"specpilot router: error: {exc} (see specpilot router --help)", file=sys.stderr)
        return 2
    logging.basicConfig(level=config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if uvloop is not None:
            uvloop.run(serve(config))
        else:
            asyncio.run(serve(config))
    except OSError as exc:
        log.error("router failed: %s", exc)
        return 1
    return 0
