"""Link-local and cloud metadata addresses are never called, and loopback only where the installer names
it, whether a URL writes one or a name resolves to one (a Service of type ExternalName, a DNS record): the
call fails naming the address."""

from __future__ import annotations

import socket
from datetime import UTC, datetime

import aiohttp
import pytest
from aiohttp import web
from aiohttp.abc import ResolveResult
from tests.component.loopback import Serve

from specpilot.api.spec import Webhook
from specpilot.controller.quality_gates import call_webhooks
from specpilot.fetch.outbound import LOOPBACK, allowing_loopback, outbound_session
from specpilot.fetch.scrape import ScrapeTarget, scrape
from specpilot.metrics.engine_window import ScrapeFailure

# What the fake DNS answers, by name.
ZONE = {
    "metadata.test": ["169.254.169.254"],
    "both.test": ["169.254.169.254", "127.0.0.1"],
}


class FakeDns:
    """aiohttp's resolver for the names in ZONE."""

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        return [
            {"hostname": host, "host": ip, "port": port, "family": family, "proto": 0, "flags": 0} for ip in ZONE[host]
        ]

    async def close(self) -> None:
        pass


@pytest.fixture
async def server(serve: Serve, monkeypatch: pytest.MonkeyPatch) -> tuple[int, list[str]]:
    """A webhook on loopback that records what reaches it; names resolve through FakeDns."""
    monkeypatch.setattr(aiohttp, "DefaultResolver", FakeDns)
    reached: list[str] = []

    async def record(request: web.Request) -> web.Response:
        reached.append(request.host)
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/{tail:.*}", record)
    served = await serve(app)
    return int(served.url.rsplit(":", 1)[1]), reached


async def test_metadata_addresses_are_never_called_however_they_are_reached(server: tuple[int, list[str]]) -> None:
    port, reached = server
    hooks = [
        Webhook.from_wire({"name": "written", "url": f"http://169.254.169.254:{port}/latest/meta-data/"}),
        Webhook.from_wire({"name": "aws6", "url": f"http://[fd00:ec2::254]:{port}/latest/meta-data/"}),
        Webhook.from_wire({"name": "resolved", "url": f"http://metadata.test:{port}/latest/meta-data/"}),
        Webhook.from_wire({"name": "both", "url": f"http://both.test:{port}/check"}),
    ]
    async with outbound_session(addresses=allowing_loopback()) as session:
        written, aws6, resolved, both = await call_webhooks(session, hooks, {"scope": "chat"})
    never = "refused: the operator never calls link-local or cloud metadata addresses"
    assert (written.ok, written.detail) == (False, f"169.254.169.254 {never}")
    assert (aws6.ok, aws6.detail) == (False, f"fd00:ec2::254 {never}")
    assert not resolved.ok and f"metadata.test (resolved to 169.254.169.254) {never}" in resolved.detail, resolved
    assert both.ok, both  # the address that is no metadata address is the one connected to
    assert reached == [f"both.test:{port}"]


@pytest.fixture
async def local(serve: Serve) -> tuple[int, list[str]]:
    """A server on loopback that records what reaches it, found through the real resolver."""
    reached: list[str] = []

    async def record(request: web.Request) -> web.Response:
        reached.append(request.path)
        return web.Response(text="vllm:num_requests_running 0\n")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    served = await serve(app)
    return int(served.url.rsplit(":", 1)[1]), reached


async def test_loopback_is_refused_by_default_however_it_is_named(local: tuple[int, list[str]]) -> None:
    port, reached = local
    hooks = [
        Webhook.from_wire({"name": "named", "url": f"http://localhost:{port}/named"}),
        Webhook.from_wire({"name": "written", "url": f"http://127.0.0.1:{port}/written"}),
        Webhook.from_wire({"name": "unspecified", "url": f"http://0.0.0.0:{port}/unspecified"}),
    ]
    target = ScrapeTarget("engine-0", f"http://localhost:{port}/metrics")
    async with outbound_session() as session:
        named, written, unspecified = await call_webhooks(session, hooks, {"scope": "chat"})
        scraped = await scrape(session, target, families=(), timeout_s=5, at=datetime.now(UTC))
    never = f"refused: the operator never calls {LOOPBACK}"
    assert named.detail.startswith("localhost (resolved to ") and named.detail.endswith(never), named.detail
    assert (written.ok, written.detail) == (False, f"127.0.0.1 {never}")
    assert (unspecified.ok, unspecified.detail) == (False, f"0.0.0.0 {never}")
    assert isinstance(scraped, ScrapeFailure) and never in scraped.reason, scraped
    assert reached == []


async def test_loopback_is_called_where_the_installer_names_it(local: tuple[int, list[str]]) -> None:
    port, reached = local
    hooks = [Webhook.from_wire({"name": "named", "url": f"http://localhost:{port}/named"})]
    async with outbound_session(addresses=allowing_loopback()) as session:
        [named] = await call_webhooks(session, hooks, {"scope": "chat"})
    assert (named.ok, named.detail) == (True, "HTTP 200")
    assert reached == ["/named"]
