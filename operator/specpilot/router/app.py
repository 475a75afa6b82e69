"""`specpilot router`: the per-pilot scope router process.

Its flags, their environment fallbacks and their checks are `specpilot.wire.routerconfig.RouterConfig`,
which the operator also renders the router's Deployment with. ``--static-routes`` with
``--static-endpoints`` runs it without Kubernetes (benchmarks, local trials).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import aiohttp
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from specpilot.kubeaccess import load_access
from specpilot.router.admin import admin_app
from specpilot.router.kube import ClusterSource
from specpilot.router.metrics import RouterMetrics
from specpilot.router.proxy import Proxy
from specpilot.router.samples import SampleLog
from specpilot.router.state import RouterState, RouteSource
from specpilot.router.static import StaticSource, static_endpoints
from specpilot.wire.routerconfig import RouterConfig, RouterConfigError, split_host_port

log = logging.getLogger("specpilot.router")

SHUTDOWN_GRACE_SECONDS = 30.0


class _MalformedHttp(logging.Filter):
    """Malformed HTTP from a client is refused with 400 by aiohttp; count it and keep it to a debug line.

    aiohttp logs it as an error with a traceback, which a port scanner would turn into log floods.
    Only the exception type is kept: the offending bytes could hold a header value.
    """

    def __init__(self, logger: logging.Logger, count: Callable[[], None]) -> None:
        super().__init__()
        self._logger, self._count = logger, count

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, HttpProcessingError):
            return True
        self._count()
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        record.msg, record.args = "malformed HTTP request refused (%s)", (type(exc).__name__,)
        record.exc_info = record.exc_text = None
        return self._logger.isEnabledFor(logging.DEBUG)


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
        self._runners: list[web.AppRunner] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._session: aiohttp.ClientSession | None = None
        self._http_filter: _MalformedHttp | None = None

    async def start(self) -> None:
        config = self.config
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=30),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=config.connect_timeout),
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),
        )
        proxy = Proxy(
            state=self.state, metrics=self.metrics, samples=self.samples, config=config, session=self._session
        )
        http_log = logging.getLogger("specpilot.router.http")
        self._http_filter = _MalformedHttp(http_log, self.metrics.refused.labels("malformed_http").inc)
        http_log.addFilter(self._http_filter)
        traffic = web.Application(client_max_size=config.max_body_bytes)
        traffic.router.add_route("*", "/v1/{tail:.*}", proxy.handle)
        self._runners = [
            web.AppRunner(
                traffic,
                access_log=None,
                logger=http_log,
                handler_cancellation=True,
                shutdown_timeout=SHUTDOWN_GRACE_SECONDS,
                max_line_size=config.max_header_bytes,
                max_field_size=config.max_header_bytes,
                max_headers=config.max_headers,
            ),
            web.AppRunner(admin_app(state=self.state, metrics=self.metrics, samples=self.samples), access_log=None),
        ]
        self._tasks = [
            asyncio.create_task(self.source.run(self.state), name="route-source"),
            asyncio.create_task(_tick(self.state), name="staleness"),
        ]
        for runner, address in zip(self._runners, (config.listen, config.admin_listen), strict=True):
            await runner.setup()
            host, port = _bind_address(address)
            await web.TCPSite(runner, host, port, backlog=1024).start()
            bound = runner.addresses[0]
            self.addresses.append((str(bound[0]), int(bound[1])))
            log.info("listening on %s:%d", *self.addresses[-1])

    async def wait(self) -> None:
        """Until the routing source fails (it never ends otherwise)."""
        await self._tasks[0]

    async def stop(self) -> None:
        """Stop taking requests, let in-flight ones finish (up to the grace period), then close."""
        for task in self._tasks:
            task.cancel()
        for runner in reversed(self._runners):
            await runner.cleanup()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._session is not None:
            await self._session.close()
        if self._http_filter is not None:
            logging.getLogger("specpilot.router.http").removeFilter(self._http_filter)


async def serve(config: RouterConfig) -> None:
    """Run the router until SIGTERM/SIGINT, then drain in-flight requests."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    router = Router(config)
    try:
        await router.start()
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
        asyncio.run(serve(config))
    except OSError as exc:
        log.error("router failed: %s", exc)
        return 1
    return 0
