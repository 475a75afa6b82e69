"""No call the operator makes for a pilot follows a redirect: an allowed server that answers 302 to
another host fails the call, names where it pointed, and the other host hears nothing."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest
from aiohttp import web
from tests.component.loopback import Serve

from specpilot.api.spec import Probes, Webhook
from specpilot.controller.quality_gates import call_webhooks, run_probes
from specpilot.fetch.outbound import allowing_loopback, outbound_session
from specpilot.fetch.prometheus import query
from specpilot.fetch.scrape import ReadFailure, ScrapeTarget, read_samples, scrape
from specpilot.metrics.engine_window import ScrapeFailure
from specpilot.metrics.promql import QueryFailure


@dataclass
class Loopback:
    """Two servers on loopback: `allowed` answers everything with a 302 to `elsewhere`, which records
    every request it gets (none should come)."""

    allowed: str
    elsewhere: str
    reached: list[str] = field(default_factory=list)


def _answering(handler: web.RequestHandler) -> web.Application:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    return app


@pytest.fixture
async def loopback(serve: Serve) -> Loopback:
    reached: list[str] = []

    async def record(request: web.Request) -> web.Response:
        reached.append(f"{request.method} {request.path}")
        return web.Response(text="secret")

    elsewhere = (await serve(_answering(record))).url

    async def redirect(request: web.Request) -> web.Response:
        raise web.HTTPFound(f"{elsewhere}/latest/meta-data/")

    allowed = (await serve(_answering(redirect))).url
    return Loopback(allowed, elsewhere, reached)


def _names_the_refusal(detail: str, loopback: Loopback) -> bool:
    return f"HTTP 302: redirect to {loopback.elsewhere}/latest/meta-data/ refused" in detail


async def test_a_webhook_redirected_elsewhere_fails_and_the_other_host_hears_nothing(loopback: Loopback) -> None:
    hooks = [
        Webhook.from_wire({"name": "business", "url": f"{loopback.allowed}/check", "critical": True}),
    ]
    async with outbound_session(addresses=allowing_loopback()) as session:
        results = await call_webhooks(session, hooks, {"scope": "chat"})
    for result in results:
        assert not result.ok, result
        assert _names_the_refusal(result.detail, loopback), result.detail
        assert "secret" not in result.detail
    assert loopback.reached == []


async def test_probes_scrapes_samples_and_prometheus_refuse_the_redirect(loopback: Loopback) -> None:
    now = datetime.now(UTC)
    probes = Probes.from_wire({"prompts": ["hello"]})
    (case,) = probes.all_cases
    async with outbound_session(addresses=allowing_loopback()) as session:
        probed = await run_probes(
            session, baseline=loopback.allowed, speculative=loopback.allowed, probes=probes, cases=[case], model="m"
        )
        scraped = await scrape(
            session, ScrapeTarget("pod", f"{loopback.allowed}/metrics"), families=(), timeout_s=5, at=now
        )
        read = await read_samples(session, loopback.allowed, cursor=0, limit=10, timeout_s=5)
        queried = await query(session, loopback.allowed, "up", at=now, timeout_s=5)
    assert probed.error is not None and _names_the_refusal(probed.error, loopback), probed
    assert isinstance(scraped, ScrapeFailure) and _names_the_refusal(scraped.reason, loopback), scraped
    assert isinstance(read, ReadFailure) and _names_the_refusal(read.reason, loopback), read
    assert isinstance(queried, QueryFailure) and _names_the_refusal(queried.reason, loopback), queried
    assert loopback.reached == []
