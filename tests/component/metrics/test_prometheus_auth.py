"""A Prometheus that wants a bearer token over TLS with a private CA: the operator's credentials go to
it, and only to it, and a rotated token is picked up at the next query."""

from __future__ import annotations

import ssl
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from tests.component.loopback import Serve

from specpilot.fetch.endpoints import PrometheusEndpoint
from specpilot.fetch.prometheus import query
from specpilot.metrics.promql import QueryFailure

EMPTY = {"status": "success", "data": {"resultType": "vector", "result": []}}


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (its own CA), and its key."""
    cert, key = tmp_path / "ca.crt", tmp_path / "tls.key"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1"),
            *("-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


@pytest.fixture
async def prometheus(certificate: tuple[Path, Path], serve: Serve) -> tuple[str, Path, list[str | None]]:
    """HTTPS on loopback with that certificate; 401 without `Bearer good`."""
    cert, key = certificate
    seen: list[str | None] = []

    async def answer(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        if request.headers.get("Authorization") != "Bearer good":
            return web.json_response({"status": "error", "error": "unauthorized"}, status=401)
        return web.json_response(EMPTY)

    app = web.Application()
    app.router.add_post("/api/v1/query", answer)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return (await serve(app, tls=context)).url, cert, seen


async def test_credentials_reach_the_prometheus_they_are_for_and_nothing_else(
    prometheus: tuple[str, Path, list[str | None]], tmp_path: Path
) -> None:
    url, ca, seen = prometheus
    token = tmp_path / "token"
    token.write_text("good\n")
    auth = PrometheusEndpoint.bearer(f"{url}/", str(token), str(ca))
    now = datetime.now(UTC)
    async with aiohttp.ClientSession() as session:
        ok = await query(session, url, "up", at=now, timeout_s=5, auth=auth)
        assert not isinstance(ok, QueryFailure), ok
        token.write_text("rotated\n")  # the next query reads the file again
        refused = await query(session, url, "up", at=now, timeout_s=5, auth=auth)
        assert isinstance(refused, QueryFailure) and "HTTP 401" in refused.reason, refused
        # Credentials for another Prometheus neither verify this one nor travel to it.
        elsewhere = PrometheusEndpoint.bearer("https://prometheus.other.example/", str(token), str(ca))
        untrusted = await query(session, url, "up", at=now, timeout_s=5, auth=elsewhere)
    assert isinstance(untrusted, QueryFailure) and "certificate" in untrusted.reason.lower(), untrusted
    assert seen == ["Bearer good", "Bearer rotated"]


@pytest.mark.parametrize(
    ("url", "covered"),
    [
        ("https://prometheus.example:9091", True),
        ("https://prometheus.example:9091/", True),
        ("https://prometheus.example:9091/select/0/prometheus", True),
        ("https://PROMETHEUS.example:9091/select", True),
        ("http://prometheus.example:9091/select", False),  # not over TLS
        ("https://prometheus.example/select", False),  # another port
        ("https://prometheus.example:9091.attacker.io/", False),
        ("https://prometheus.example.attacker.io:9091/", False),
    ],
)
def test_credentials_cover_one_prometheus_exactly(url: str, covered: bool) -> None:
    assert PrometheusEndpoint.bearer("https://prometheus.example:9091/").covers(url) is covered
    under = PrometheusEndpoint.bearer("https://vm.example/select/0/prometheus")
    assert under.covers("https://vm.example/select/0/prometheus/") and not under.covers("https://vm.example/select/1")
    assert not under.covers("https://vm.example/select/0/prometheus-other")


@pytest.mark.parametrize(
    "url",
    [
        "https://prometheus-k8s.monitoring:9091",
        "https://prometheus-k8s.monitoring.svc:9091",
        "https://prometheus-k8s.monitoring.svc.cluster.local:9091/",
    ],
)
def test_credentials_for_a_service_cover_it_in_every_spelling(url: str) -> None:
    """A pilot's `name.ns` is called as `name.ns.svc`: the credentials follow the Service, not the spelling."""
    for written in ("https://prometheus-k8s.monitoring:9091", "https://prometheus-k8s.monitoring.svc:9091"):
        assert PrometheusEndpoint.bearer(written).covers(url)
        assert not PrometheusEndpoint.bearer(written).covers(url.replace("monitoring", "team-a"))
        assert not PrometheusEndpoint.bearer(written).covers(url.replace("9091", "9090"))
