"""A named Prometheus endpoint as multi-tenant setups run it: a real Prometheus (the Debian package)
scrapes mock vLLM processes, behind a loopback gateway that, like Mimir's or a mesh's, demands a client
certificate from a private CA, a tenant header (X-Scope-OrgID) and a bearer token. The operator's
Prometheus source, given the endpoint by name, reads the same figures through the gateway as it reads
from Prometheus directly; without the tenant header the window is inconclusive and says why, without a
client certificate too, and no secret reaches a reason.
"""

from __future__ import annotations

import json
import random
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from tests.certs import Authority, Issued
from tests.component.loopback import Serve
from tests.prometheus_server import Prometheus, running_prometheus, skip_reason, static_job

from specpilot.api.spec import Analysis
from specpilot.controller.collect import PrometheusEngines
from specpilot.controller.core.measurements import Queried
from specpilot.fetch.endpoints import PrometheusCredentials, PrometheusEndpoint, parse_endpoints
from specpilot.fetch.outbound import allowing_loopback, outbound_session
from specpilot.testing.waiting import wait_http, wait_until
from specpilot.wire.names import ENGINE_PORT, Arm

pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")

CLI = [sys.executable, "-m", "specpilot.cli"]
NAMESPACE, PILOT, TENANT, TOKEN = "team-a", "demo", "team-a", "tok-8c1f2e"
PODS = {Arm.BASELINE: "demo-baseline-6c7f9-x2k4q", Arm.SPECULATIVE: "demo-speculative-5d8b7-p9m3z"}
WINDOW = {"interval": "5s", "window": "5s", "warmup": "0s"}


@dataclass
class Engines:
    prometheus: Prometheus
    addresses: dict[Arm, str]


def _free_block() -> str:
    for _ in range(50):
        base = f"127.{random.randint(64, 250)}.{random.randint(1, 250)}"
        try:
            with socket.socket() as sock:
                sock.bind((f"{base}.11", ENGINE_PORT))
        except OSError:
            continue
        return base
    raise AssertionError("no free loopback block")


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engines]:
    """A baseline and a speculative mock vLLM with a few completed requests, scraped every second."""
    tmp, base = tmp_path_factory.mktemp("engines"), _free_block()
    addresses = {Arm.BASELINE: f"{base}.11", Arm.SPECULATIVE: f"{base}.21"}
    processes = []
    try:
        for arm, ip in addresses.items():
            argv = [*CLI, "mock-vllm", "test-model", "--host", ip, "--port", str(ENGINE_PORT)]
            if arm is Arm.SPECULATIVE:
                argv += ["--speculative-config", json.dumps({"model": "org/draft", "num_speculative_tokens": 3})]
            with (tmp / f"{arm.value}.log").open("wb") as log:
                processes.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT))
        for ip in addresses.values():
            wait_http(f"http://{ip}:{ENGINE_PORT}/health")
        targets = [
            (f"{addresses[arm]}:{ENGINE_PORT}", {"namespace": NAMESPACE, "pod": pod}) for arm, pod in PODS.items()
        ]
        with running_prometheus(tmp / "prometheus", [static_job("vllm", targets)]) as prometheus:
            prometheus.wait_until_up(len(targets))
            for ip in addresses.values():
                for _ in range(6):
                    body = json.dumps({"model": "test-model", "prompt": "hello there", "max_tokens": 24}).encode()
                    request = urllib.request.Request(
                        f"http://{ip}:{ENGINE_PORT}/v1/completions",
                        data=body,
                        headers={"Content-Type": "application/json"},
                    )
                    with urllib.request.urlopen(request, timeout=30) as response:
                        assert response.status == 200
            served = time.time()

            def scraped_since() -> bool:
                """Seven scrapes of each engine since its requests: a window's worth after the first."""
                since = f"{max(1, int(time.time() - served))}s"
                query = f'min(count_over_time(up{{job="vllm"}}[{since}]))'
                result = prometheus.api("/api/v1/query", query=query)["data"]["result"]
                return bool(result) and float(result[0]["value"][1]) >= 7

            wait_until("a window's worth of scrapes holding the requests", scraped_since, timeout=30)
            yield Engines(prometheus, addresses)
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)


@dataclass(frozen=True)
class Gateway:
    url: str
    ca: Path
    client: Issued
    seen: list[tuple[str | None, str | None]]  # (X-Scope-OrgID, Authorization) of each query let through


@pytest.fixture
async def gateway(engines: Engines, serve: Serve, tmp_path: Path) -> AsyncIterator[Gateway]:
    """HTTPS on loopback in front of the Prometheus: a client certificate from its CA, the tenant and the
    token, else refused as Mimir refuses (401 "no org id"), echoing a wrong Authorization header back."""
    authority = Authority.create(tmp_path / "ca")
    server, client = authority.issue("gateway", client=False), authority.issue("specpilot", client=True)
    seen: list[tuple[str | None, str | None]] = []

    async def query(request: web.Request) -> web.Response:
        tenant, authorization = request.headers.get("X-Scope-OrgID"), request.headers.get("Authorization")
        if tenant != TENANT:
            return web.Response(status=401, text="no org id\n")
        if authorization != f"Bearer {TOKEN}":
            return web.Response(status=401, text=f"authentication failed for {authorization}\n")
        seen.append((tenant, authorization))
        form = await request.post()
        async with (
            aiohttp.ClientSession() as upstream,
            upstream.post(f"{engines.prometheus.url}/api/v1/query", data=dict(form)) as answer,
        ):
            return web.Response(status=answer.status, body=await answer.read(), content_type="application/json")

    app = web.Application()
    app.router.add_post("/prometheus/api/v1/query", query)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(authority.cert))
    context.load_cert_chain(server.cert, server.key)
    context.verify_mode = ssl.CERT_REQUIRED
    served = await serve(app, tls=context)
    yield Gateway(f"{served.url}/prometheus", authority.cert, client, seen)


def endpoint(gateway: Gateway, token_file: Path, **changes: Any) -> PrometheusEndpoint:
    doc: dict[str, Any] = {
        "name": "mimir",
        "url": gateway.url,
        "authorization": {"credentials_file": str(token_file)},
        "tls_config": {
            "ca_file": str(gateway.ca),
            "cert_file": str(gateway.client.cert),
            "key_file": str(gateway.client.key),
        },
        "http_headers": {"X-Scope-OrgID": {"values": [TENANT]}},
        **changes,
    }
    return parse_endpoints({"endpoints": [{k: v for k, v in doc.items() if v is not None}]})["mimir"]


def analysis(prometheus: dict[str, Any]) -> Analysis:
    return Analysis.from_wire({**WINDOW, "metricsSource": {"prometheus": prometheus}})


async def read(held: PrometheusCredentials, source: Analysis, at: datetime) -> Queried:
    async with outbound_session(addresses=allowing_loopback()) as session:
        found = await PrometheusEngines(session, held).read(
            {}, pilot=(NAMESPACE, PILOT), analysis=source, horizon=timedelta(seconds=20), now=at
        )
    assert isinstance(found, Queried)
    return found


async def test_the_source_reads_the_same_figures_through_the_gateway_as_directly(
    engines: Engines, gateway: Gateway, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text(f"{TOKEN}\n")
    held = PrometheusCredentials({"mimir": endpoint(gateway, token)})
    at = datetime.now(UTC) - timedelta(seconds=1)
    through = await read(held, analysis({"endpoint": "mimir"}), at)
    direct = await read(PrometheusCredentials(), analysis({"url": engines.prometheus.url}), at)
    assert through.figures == direct.figures
    baseline = through.figures[Arm.BASELINE]
    assert baseline.inconclusive is None and baseline.kv_usage, baseline
    assert gateway.seen and set(gateway.seen) == {(TENANT, f"Bearer {TOKEN}")}


async def test_without_the_tenant_the_window_is_inconclusive_and_says_why(gateway: Gateway, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(f"{TOKEN}\n")
    held = PrometheusCredentials({"mimir": endpoint(gateway, token, http_headers=None)})
    found = await read(held, analysis({"endpoint": "mimir"}), datetime.now(UTC))
    for arm in PODS:
        reason = found.figures[arm].inconclusive
        assert reason is not None and "HTTP 401, not JSON: no org id" in reason, reason
    assert not gateway.seen


async def test_without_a_client_certificate_the_window_is_inconclusive(gateway: Gateway, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(f"{TOKEN}\n")
    held = PrometheusCredentials({"mimir": endpoint(gateway, token, tls_config={"ca_file": str(gateway.ca)})})
    found = await read(held, analysis({"endpoint": "mimir"}), datetime.now(UTC))
    reason = found.figures[Arm.BASELINE].inconclusive
    assert reason is not None and "Prometheus query for baseline" in reason, reason
    assert not gateway.seen


async def test_a_secret_echoed_by_the_server_never_reaches_the_reason(gateway: Gateway, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("tok-wrong-1234\n")
    held = PrometheusCredentials({"mimir": endpoint(gateway, token)})
    found = await read(held, analysis({"endpoint": "mimir"}), datetime.now(UTC))
    reason = found.figures[Arm.BASELINE].inconclusive
    assert reason is not None and "authentication failed for Bearer <secret>" in reason, reason
    assert "tok-wrong-1234" not in reason
