"""Credentials that rotate while the operator runs: an exec plugin that issues client certificates
living a few seconds (as access brokers issue them for minutes or hours), and a kubeconfig tokenFile
rewritten every few seconds (as a projected token is). A loopback HTTPS server stands in for the API
server and checks each request's credential as it stands (an expired certificate, or a token rotated
away, is a 401); the operator's client keeps working through three expiries and more, renewing before
expiry, and after a 401 once, not per request."""

from __future__ import annotations

import asyncio
import ssl
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import aiohttp
import pytest
import yaml
from aiohttp import web
from tests.certs import Authority
from tests.component.loopback import Serve

from specpilot import kubeaccess
from specpilot.controller.kube import Kube
from specpilot.kubeaccess import load_access
from specpilot.plugin.client import connect

ROOT = Path(__file__).resolve().parents[2]
LIFETIME_S = 3  # each certificate the plugin issues
EXEC_API = "client.authentication.k8s.io/v1beta1"
PLUGIN = """
import json, sys
from datetime import timedelta
from pathlib import Path
sys.path.insert(0, {root!r})
from tests.certs import Authority
ca = Path({ca!r})
issued = Authority(ca, ca / "ca.crt", ca / "ca.key").issue("specpilot", client=True, lifetime=timedelta(seconds={life}))
with open({runs_path!r}, "a") as runs:
    runs.write("run\\n")
import subprocess
end = subprocess.run(["openssl", "x509", "-in", str(issued.cert), "-noout", "-enddate"], capture_output=True, text=True)
from datetime import datetime, UTC
after = datetime.strptime(end.stdout.strip().split("=", 1)[1], "%b %d %H:%M:%S %Y %Z").replace(tzinfo=UTC)
print(json.dumps({{
    "apiVersion": "client.authentication.k8s.io/v1beta1",
    "kind": "ExecCredential",
    "status": {{
        "clientCertificateData": issued.cert.read_text(),
        "clientKeyData": issued.key.read_text(),
        "expirationTimestamp": after.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }},
}}))
"""


@dataclass
class ApiServer:
    url: str
    authority: Authority
    serials: list[str] = field(default_factory=list)  # of the client certificates accepted, in order
    tokens: list[str] = field(default_factory=list)  # valid now: the newest two written
    refused: int = 0


@pytest.fixture
async def api_server(serve: Serve, tmp_path: Path) -> AsyncIterator[ApiServer]:
    """HTTPS on loopback: a request needs an unexpired client certificate from the CA, or one of the
    tokens valid now, else 401."""
    authority = Authority.create(tmp_path / "ca")
    server_cert = authority.issue("apiserver", client=False)
    state = ApiServer("", authority)

    async def get(request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peercert") if request.transport is not None else None
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        if peer:
            if ssl.cert_time_to_seconds(peer["notAfter"]) <= time.time():
                state.refused += 1
                return web.json_response({"kind": "Status", "code": 401, "message": "certificate expired"}, status=401)
            if not state.serials or state.serials[-1] != peer["serialNumber"]:
                state.serials.append(peer["serialNumber"])
        elif token not in state.tokens:
            state.refused += 1
            return web.json_response({"kind": "Status", "code": 401, "message": "Unauthorized"}, status=401)
        kind = "Job" if "/jobs/" in request.path else "ConfigMap"
        return web.json_response({"kind": kind, "metadata": {"name": request.match_info["name"]}})

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/{namespace}/configmaps/{name}", get)
    app.router.add_get("/apis/batch/v1/namespaces/{namespace}/jobs/{name}", get)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(authority.cert))
    context.load_cert_chain(server_cert.cert, server_cert.key)
    context.verify_mode = ssl.CERT_OPTIONAL
    state.url = (await serve(app, tls=context)).url
    yield state


def kubeconfig(tmp_path: Path, server: ApiServer, user: Mapping[str, object]) -> Path:
    path = tmp_path / "kubeconfig"
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "c", "cluster": {"server": server.url, "certificate-authority": str(server.authority.cert)}}
        ],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path.write_text(yaml.safe_dump(doc))
    return path


async def keep_calling(call: Callable[[float], Awaitable[None]], seconds: float) -> int:
    """`call` (given the seconds since the first) every 100 ms for `seconds`; how many calls there were."""
    calls, started = 0, time.monotonic()
    while (elapsed := time.monotonic() - started) < seconds:
        await call(elapsed)
        calls += 1
        await asyncio.sleep(0.1)  # 100 ms between calls, while the credentials expire and rotate
    return calls


def configmaps(kube: Kube) -> Callable[[float], Awaitable[None]]:
    """GET a ConfigMap: the call must succeed."""

    async def call(_: float) -> None:
        found = await kube.get("v1", "ConfigMap", "team-a", "demo-routes")
        assert found is not None and found["metadata"]["name"] == "demo-routes"

    return call


async def test_client_certificates_from_an_exec_plugin_are_reissued_before_they_expire(
    api_server: ApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    runs = tmp_path / "runs"
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        PLUGIN.format(root=str(ROOT), ca=str(api_server.authority.directory), life=LIFETIME_S, runs_path=str(runs))
    )
    exec_user = {
        "exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": sys.executable, "args": [str(plugin)]}
    }
    access = load_access(str(kubeconfig(tmp_path, api_server, exec_user)))
    async with aiohttp.ClientSession() as session:
        kube = Kube(access, session, observe=lambda *_: None)
        calls = await keep_calling(configmaps(kube), 4 * LIFETIME_S + 1)
    assert len(api_server.serials) >= 4, "four certificates: the first and three renewals, each before it expired"
    assert api_server.refused == 0, "renewed before expiry, no request was refused"
    issued = len(runs.read_text().splitlines())
    assert issued <= len(api_server.serials) + 1, f"{issued} plugin runs for {calls} calls"


async def test_a_401_reissues_the_certificate_once_and_then_backs_off(
    api_server: ApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plugin's expirationTimestamp says an hour, but the server stops honouring certificates after
    a few seconds (revoked, or a clock skew): each 401 has it issued again, once."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    runs = tmp_path / "runs"
    plugin = tmp_path / "plugin.py"
    text = PLUGIN.format(root=str(ROOT), ca=str(api_server.authority.directory), life=LIFETIME_S, runs_path=str(runs))
    plugin.write_text(text.replace('after.strftime("%Y-%m-%dT%H:%M:%SZ")', '"2099-01-01T00:00:00Z"'))
    exec_user = {
        "exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": sys.executable, "args": [str(plugin)]}
    }
    access = load_access(str(kubeconfig(tmp_path, api_server, exec_user)))
    async with aiohttp.ClientSession() as session:
        kube = Kube(access, session, observe=lambda *_: None)
        await keep_calling(configmaps(kube), 4 * LIFETIME_S + 1)
    assert len(api_server.serials) >= 4 and api_server.refused >= 3, "each expiry was a 401, then a new certificate"
    assert len(runs.read_text().splitlines()) == len(api_server.serials), "one plugin run per refusal"


async def test_a_token_file_rewritten_every_few_seconds_is_read_again(
    api_server: ApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setattr(kubeaccess, "TOKEN_FILE_REREAD", timedelta(seconds=1))  # client-go's minute, scaled down
    token_file = tmp_path / "token"

    def rotate(generation: int) -> None:
        token = f"token-{generation}"
        token_file.write_text(token + "\n")
        api_server.tokens[:] = [*api_server.tokens[-1:], token]  # the previous one stays valid one more period

    rotate(0)
    access = load_access(str(kubeconfig(tmp_path, api_server, {"tokenFile": str(token_file)})))
    rotated = 0

    async with aiohttp.ClientSession() as session:
        get = configmaps(Kube(access, session, observe=lambda *_: None))

        async def call(elapsed: float) -> None:
            """The token rotated every 2 s, between calls."""
            nonlocal rotated
            while rotated < min(5, int(elapsed // 2)):
                rotated += 1
                rotate(rotated)
            await get(elapsed)

        await keep_calling(call, 10.5)
    assert api_server.tokens[-1] == "token-5" and api_server.refused == 0


async def test_a_token_rotated_away_is_read_again_after_one_401(
    api_server: ApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With client-go's minute between reads, a token the server stops accepting sooner is read again
    after its first 401, and the call goes through."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    token_file = tmp_path / "token"
    token_file.write_text("token-0\n")
    api_server.tokens[:] = ["token-0"]
    access = load_access(str(kubeconfig(tmp_path, api_server, {"tokenFile": str(token_file)})))
    async with aiohttp.ClientSession() as session:
        kube = Kube(access, session, observe=lambda *_: None)
        for generation in range(1, 4):
            token_file.write_text(f"token-{generation}\n")
            api_server.tokens[:] = [f"token-{generation}"]
            # the first 401 backoff (1 s) passing: only then does a 401 load the credentials again
            await asyncio.sleep(kubeaccess.REJECTED_BACKOFF[0].total_seconds() + 0.1)
            assert await kube.get("v1", "ConfigMap", "team-a", "demo-routes") is not None
    assert api_server.refused == 3, "one 401 per rotation, then the file read again"


async def test_the_plugin_keeps_working_through_client_certificates_that_expire(
    api_server: ApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kubectl specpilot calibrate waits for its Job for minutes: its calls go on through renewals."""
    runs = tmp_path / "runs"
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        PLUGIN.format(root=str(ROOT), ca=str(api_server.authority.directory), life=LIFETIME_S, runs_path=str(runs))
    )
    exec_user = {"exec": {"apiVersion": EXEC_API, "command": sys.executable, "args": [str(plugin)]}}
    client = connect(kubeconfig=str(kubeconfig(tmp_path, api_server, exec_user)), context=None, namespace="team-a")

    async def call(_: float) -> None:
        job = await asyncio.to_thread(client.job, "calibrate")  # the plugin's client blocks: off the loop
        assert job["metadata"]["name"] == "calibrate"

    await keep_calling(call, 4 * LIFETIME_S + 1)
    assert len(api_server.serials) >= 4 and api_server.refused == 0
