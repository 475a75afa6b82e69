"""`specpilot router`: the per-pilot scope router process.

Flags have environment fallbacks (``SPECPILOT_<FLAG>``, e.g. ``SPECPILOT_PILOT``), so a Deployment
can configure the router either way. ``--static-routes`` with ``--static-endpoints`` runs it
without Kubernetes (benchmarks, local trials).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path

import aiohttp
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from specpilot.router.admin import admin_app
from specpilot.router.decide import Endpoint
from specpilot.router.kube import ClusterSource, load_access
from specpilot.router.metrics import RouterMetrics
from specpilot.router.proxy import Proxy, ProxySettings
from specpilot.router.samples import SampleLog
from specpilot.router.state import RouterState, RouteSource
from specpilot.router.static import StaticSource, parse_endpoints
from specpilot.router.table import SCOPE_HEADER, Arm

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


def _static_endpoints(spec: str) -> tuple[Arm, tuple[Endpoint, ...]]:
    try:
        return parse_endpoints(spec)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(f"SPECPILOT_{name.upper().replace('-', '_')}", default)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="specpilot router", description="Per-pilot scope router (OpenAI-compatible).")
    p.add_argument(
        "--namespace",
        default=_env("namespace", os.environ.get("POD_NAMESPACE")),
        help="namespace of the pilot (env SPECPILOT_NAMESPACE, then POD_NAMESPACE)",
    )
    p.add_argument("--pilot", default=_env("pilot"), help="name of the SpeculationPilot")
    p.add_argument("--listen", default=_env("listen", "0.0.0.0:8080"), help="traffic HOST:PORT")
    p.add_argument(
        "--admin-listen",
        default=_env("admin-listen", ":9090"),
        help="HOST:PORT of /metrics, /samples, /healthz, /readyz, /routes",
    )
    p.add_argument("--scope-header", default=_env("scope-header", SCOPE_HEADER))
    p.add_argument(
        "--affinity-header",
        default=_env("affinity-header"),
        help="header whose value keeps a conversation on one arm (default: none)",
    )
    p.add_argument(
        "--default-scope",
        default=_env("default-scope", "default"),
        help="scope label of requests no scope takes when the table names no defaultScope",
    )
    p.add_argument(
        "--request-timeout",
        type=float,
        default=_env("request-timeout", "600"),
        help="seconds a request may take end to end before 504",
    )
    p.add_argument("--connect-timeout", type=float, default=_env("connect-timeout", "5"))
    p.add_argument(
        "--max-table-age",
        type=float,
        default=_env("max-table-age", "300"),
        help="seconds after updatedAt a routing table turns stale (0: never)",
    )
    p.add_argument("--max-body-bytes", type=int, default=_env("max-body-bytes", str(8 << 20)))
    p.add_argument(
        "--max-header-bytes",
        type=int,
        default=_env("max-header-bytes", "8190"),
        help="longest request line or header field",
    )
    p.add_argument("--max-headers", type=int, default=_env("max-headers", "100"))
    p.add_argument(
        "--max-samples", type=int, default=_env("max-samples", "100000"), help="raw samples kept for /samples"
    )
    p.add_argument(
        "--static-routes",
        type=Path,
        default=_env("static-routes"),
        help="routing table JSON file; with --static-endpoints, runs without Kubernetes",
    )
    p.add_argument(
        "--static-endpoints",
        action="append",
        default=[],
        type=_static_endpoints,
        metavar="ARM=HOST:PORT[,HOST:PORT]",
        help="fixed endpoints of an arm (repeatable); no Kubernetes access",
    )
    p.add_argument(
        "--drain-seconds",
        type=float,
        default=_env("drain-seconds", "5"),
        help="on SIGTERM, seconds of reporting not ready while still serving, before in-flight requests drain",
    )
    p.add_argument("--log-level", default=_env("log-level", "INFO"))
    args = p.parse_args(list(argv))
    if not args.pilot:
        p.error("--pilot (or SPECPILOT_PILOT) is required")
    if not args.static_endpoints and not args.namespace:
        p.error("--namespace (or SPECPILOT_NAMESPACE / POD_NAMESPACE) is required to watch Kubernetes")
    return args


def split_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``:PORT`` binds every interface) as host and port."""
    host, _, port = address.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)


class Router:
    """The router's parts, wired from parsed arguments; `start` binds both ports."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.metrics = RouterMetrics()
        max_age = timedelta(seconds=args.max_table_age) if args.max_table_age > 0 else None
        self.state = RouterState(
            pilot=args.pilot,
            default_scope=args.default_scope,
            max_table_age=max_age,
            on_routes=self.metrics.show_routes,
        )
        self.samples = SampleLog(args.max_samples)
        self.source: RouteSource
        if args.static_endpoints:
            self.source = StaticSource(routes_file=args.static_routes, endpoints=dict(args.static_endpoints))
        else:
            self.source = ClusterSource(
                access=load_access(),
                namespace=args.namespace,
                pilot=args.pilot,
                on_restart=lambda resource, reason: self.metrics.watch_restarts.labels(resource, reason).inc(),
            )
        self.settings = ProxySettings(
            scope_header=args.scope_header,
            affinity_header=args.affinity_header,
            request_timeout=args.request_timeout,
            connect_timeout=args.connect_timeout,
            max_body_bytes=args.max_body_bytes,
        )
        self.addresses: list[tuple[str, int]] = []
        self._runners: list[web.AppRunner] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._session: aiohttp.ClientSession | None = None
        self._http_filter: _MalformedHttp | None = None

    async def start(self) -> None:
        args = self.args
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=30),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=args.connect_timeout),
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),
        )
        proxy = Proxy(
            state=self.state, metrics=self.metrics, samples=self.samples, settings=self.settings, session=self._session
        )
        http_log = logging.getLogger("specpilot.router.http")
        self._http_filter = _MalformedHttp(http_log, self.metrics.refused.labels("malformed_http").inc)
        http_log.addFilter(self._http_filter)
        traffic = web.Application(client_max_size=args.max_body_bytes)
        traffic.router.add_route("*", "/v1/{tail:.*}", proxy.handle)
        self._runners = [
            web.AppRunner(
                traffic,
                access_log=None,
                logger=http_log,
                handler_cancellation=True,
                shutdown_timeout=SHUTDOWN_GRACE_SECONDS,
                max_line_size=args.max_header_bytes,
                max_field_size=args.max_header_bytes,
                max_headers=args.max_headers,
            ),
            web.AppRunner(admin_app(state=self.state, metrics=self.metrics, samples=self.samples), access_log=None),
        ]
        self._tasks = [
            asyncio.create_task(self.source.run(self.state), name="route-source"),
            asyncio.create_task(_tick(self.state), name="staleness"),
        ]
        for runner, address in zip(self._runners, (args.listen, args.admin_listen), strict=True):
            await runner.setup()
            host, port = split_address(address)
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


async def serve(args: argparse.Namespace) -> None:
    """Run the router until SIGTERM/SIGINT, then drain in-flight requests."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    router = Router(args)
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
        log.info("stopping: not ready for %g s, then draining in-flight requests", args.drain_seconds)
        await asyncio.sleep(args.drain_seconds)
    finally:
        await router.stop()


async def _tick(state: RouterState) -> None:
    """Re-evaluate routes every second, so a table turning stale is logged and shown promptly."""
    while True:
        await asyncio.sleep(1.0)
        state.routes()


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        asyncio.run(serve(args))
    except OSError as exc:
        log.error("router failed: %s", exc)
        return 1
    return 0
