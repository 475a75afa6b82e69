"""The admin port: metrics, raw samples, health, readiness and the effective routes.

Kept off the traffic port so clients of the pilot never reach it. ``/samples`` serves a
`specpilot.wire.samples.SamplesPage`, which the operator parses with `SamplesPage.from_json`.
"""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from specpilot.router.core.sample_log import SampleLog
from specpilot.router.core.state import RouterState
from specpilot.router.metrics import RouterMetrics

MAX_PAGE = 10_000


def admin_app(*, state: RouterState, metrics: RouterMetrics, samples: SampleLog) -> web.Application:
    """``/metrics``, ``/samples?since=&limit=``, ``/healthz``, ``/readyz``, ``/routes``."""

    async def get_metrics(_: web.Request) -> web.Response:
        state.routes()  # bring the routing gauges up to date (a table may have gone stale)
        return web.Response(body=generate_latest(metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def get_samples(request: web.Request) -> web.Response:
        try:
            since = int(request.query.get("since", "0"))
            limit = min(int(request.query.get("limit", str(MAX_PAGE))), MAX_PAGE)
        except ValueError:
            raise web.HTTPBadRequest(text="since and limit must be integers") from None
        return web.json_response(samples.since(since, limit).to_json())

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(_: web.Request) -> web.Response:
        if state.ready:
            return web.Response(text="ok")
        return web.Response(status=503, text="not ready: waiting for the routing sources or a baseline endpoint")

    async def routes(_: web.Request) -> web.Response:
        return web.json_response(state.describe())

    app = web.Application()
    app.router.add_get("/metrics", get_metrics)
    app.router.add_get("/samples", get_samples)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/routes", routes)
    return app
