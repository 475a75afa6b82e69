"""Component tier: real processes and HTTP on loopback, no cluster.

`mock_vllm` starts in-process mock vLLM servers on 127.0.0.1 (port 0) and stops them after the
test; `scrape` reads a server's /metrics through prometheus-client's parser; `serve` serves any
aiohttp app on loopback (fakes of the API server, Prometheus, webhooks, engines) until the test ends;
`free_port` is a loopback port nothing listens on.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families
from tests.component.loopback import RunningMock, Scrape, Serve, Served, StartMock

from specpilot.mockvllm.config import parse_args
from specpilot.mockvllm.profile import parse_profile
from specpilot.mockvllm.server import MockServer


@pytest.fixture
async def mock_vllm() -> AsyncIterator[StartMock]:
    """Start mock servers: `await mock_vllm(*vllm_flags, profile={...}, env={...})`."""
    running: list[RunningMock] = []

    async def start(
        *flags: str, profile: dict[str, Any] | None = None, model: str = "test-model", env: dict[str, str] | None = None
    ) -> RunningMock:
        crashes: list[int] = []
        server = MockServer(parse_args([model, *flags]), parse_profile(profile), env=env or {}, on_crash=crashes.append)
        await server.start("127.0.0.1", 0, 0)
        mock = RunningMock(server, f"http://127.0.0.1:{server.port}", f"http://127.0.0.1:{server.admin_port}", crashes)
        running.append(mock)
        return mock

    yield start
    for mock in running:
        await mock.server.stop()


@pytest.fixture
def scrape() -> Scrape:
    """Read /metrics; return each sample name (plus its non-`engine`/`model_name` labels) summed."""

    async def read(url: str) -> dict[str, float]:
        async with aiohttp.ClientSession() as session, session.get(url + "/metrics") as response:
            assert response.status == 200
            text = await response.text()
        out: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                extra = ",".join(
                    f"{k}={v}" for k, v in sorted(sample.labels.items()) if k not in ("engine", "model_name")
                )
                key = f"{sample.name}{{{extra}}}" if extra else sample.name
                out[key] = out.get(key, 0.0) + sample.value
        return out

    return read


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """Serve apps on loopback: `await serve(app, ports=n, tls=context)`; a handler whose client goes
    away is cancelled."""
    runners: list[web.AppRunner] = []

    async def start(app: web.Application, *, ports: int = 1, tls: ssl.SSLContext | None = None) -> Served:
        runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await runner.setup()
        runners.append(runner)
        for _ in range(ports):
            await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls).start()
        scheme = "http" if tls is None else "https"
        return Served(tuple(f"{scheme}://127.0.0.1:{address[1]}" for address in runner.addresses), runner)

    yield start
    for runner in runners:
        await runner.cleanup()


@pytest.fixture
def free_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
