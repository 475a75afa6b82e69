"""Webhooks' credentials come from a Secret in the pilot's namespace, sent as a header; a Secret's value
never shows in what a failing call leaves behind (its result, which reaches status and Events, or a log
line), however the call fails."""

from __future__ import annotations

import base64
import logging

import pytest
from aiohttp import web
from tests.component.loopback import Serve

from specpilot.api.spec import ProbeCase, Probes, Webhook
from specpilot.controller.kube import ApiError
from specpilot.controller.quality_gates import call_webhooks, run_probes
from specpilot.controller.secrets import KubeSecretValues
from specpilot.fetch.outbound import allowing_loopback, outbound_session
from specpilot.testing.fakes import FakeKube

SECRET = "Bearer planted-4f9c-SECRET"
NAMESPACE = "team-a"


def _kube(value: str = SECRET) -> FakeKube:
    kube = FakeKube()
    data = {"token": base64.b64encode(value.encode()).decode()}
    kube.objects[("Secret", NAMESPACE, "hooks")] = {"metadata": {"name": "hooks"}, "data": data}
    return kube


class Forbidding(FakeKube):
    """An API server that refuses to show the operator any Secret."""

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, object] | None:
        raise ApiError(403, f'secrets "{name}" is forbidden: User cannot get resource "secrets"')


def _hook(url: str, *, name: str = "hook", secret: str = "hooks", key: str = "token") -> Webhook:
    header = {"secretKeyRef": {"name": secret, "key": key}}
    return Webhook.from_wire({"name": name, "url": url, "secretHeader": header})


@pytest.fixture
async def server(serve: Serve) -> tuple[str, list[str | None]]:
    """/ok passes when the header carries the Secret's value; /fail answers 500 echoing the header;
    /bounce redirects to a URL that carries the value; /echo-user redirects to one with userinfo."""
    heard: list[str | None] = []

    async def ok(request: web.Request) -> web.Response:
        heard.append(request.headers.get("Authorization"))
        return web.Response(status=200 if request.headers.get("Authorization") == SECRET else 401)

    async def fail(request: web.Request) -> web.Response:
        return web.Response(status=500, text=f"denied for {request.headers.get('Authorization')}")

    async def bounce(request: web.Request) -> web.Response:
        raise web.HTTPFound(f"http://elsewhere.example/?token={request.headers.get('Authorization')}")

    async def echo_user(request: web.Request) -> web.Response:
        raise web.HTTPFound("http://alice:hunter2-SECRET@elsewhere.example/")

    app = web.Application()
    app.add_routes([web.post("/ok", ok), web.post("/fail", fail), web.post("/bounce", bounce)])
    app.add_routes([web.post("/echo-user", echo_user)])
    return (await serve(app)).url, heard


async def test_a_webhook_sends_its_secret_header_read_from_the_pilots_namespace(
    server: tuple[str, list[str | None]],
) -> None:
    url, heard = server
    async with outbound_session(addresses=allowing_loopback()) as session:
        [result] = await call_webhooks(
            session, [_hook(f"{url}/ok")], {"scope": "chat"}, KubeSecretValues(_kube(), NAMESPACE)
        )
    assert (result.ok, result.detail) == (True, "HTTP 200")
    assert heard == [SECRET]


async def test_a_score_webhook_sends_its_secret_header_too(serve: Serve) -> None:
    heard: list[str | None] = []

    async def engine(request: web.Request) -> web.Response:
        return web.json_response({"choices": [{"text": "an answer", "finish_reason": "length"}]})

    async def rater(request: web.Request) -> web.Response:
        heard.append(request.headers.get("Authorization"))
        return web.json_response({"score": 1.0})

    app = web.Application()
    app.add_routes([web.post("/v1/completions", engine), web.post("/score", rater)])
    url = (await serve(app)).url
    header = {"secretKeyRef": {"name": "hooks", "key": "token"}}
    case = {"kind": "sampled", "prompt": "p", "chat": False, "temperature": 0.7, "repeats": 2}
    parsed = [ProbeCase.from_wire(case | {"score": {"webhook": {"url": f"{url}/score", "secretHeader": header}}})]
    async with outbound_session(addresses=allowing_loopback()) as session:
        result = await run_probes(
            session,
            baseline=url,
            speculative=url,
            probes=Probes(cases=parsed),
            cases=parsed,
            model="m",
            values=KubeSecretValues(_kube(), NAMESPACE),
        )
    assert result.error is None and heard == [SECRET] * 4


async def test_a_planted_secret_shows_in_no_result_or_log_line_of_a_failing_call(
    server: tuple[str, list[str | None]], free_port: int, caplog: pytest.LogCaptureFixture
) -> None:
    url, _ = server
    caplog.set_level(logging.DEBUG)
    hooks = [
        _hook(f"{url}/fail", name="fail"),
        _hook(f"{url}/bounce", name="bounce"),
        _hook(f"{url}/echo-user", name="echo-user"),
        _hook(f"http://127.0.0.1:{free_port}/closed", name="closed"),
        _hook(f"{url}/ok", name="missing-key", key="other"),
    ]
    async with outbound_session(addresses=allowing_loopback()) as session:
        results = await call_webhooks(session, hooks, {"scope": "chat"}, KubeSecretValues(_kube(), NAMESPACE))
        [forbidden] = await call_webhooks(session, hooks[:1], {}, KubeSecretValues(Forbidding(), NAMESPACE))
    details = {result.name: result.detail for result in results}
    assert details["fail"] == "HTTP 500"
    assert details["bounce"].startswith("HTTP 302: redirect to http://elsewhere.example/?token=<secret> refused")
    assert details["echo-user"].startswith("HTTP 302: redirect to http://<secret>@elsewhere.example/ refused")
    assert details["closed"].startswith("no answer: Cannot connect to host 127.0.0.1")
    assert details["missing-key"] == f"Secret {NAMESPACE}/hooks has no key other"
    assert forbidden.detail == (
        f"Secret {NAMESPACE}/hooks unreadable (HTTP 403): the operator reads only the Secrets its installer lists "
        "(the chart's rbac.webhookSecrets)"
    )
    said = [*details.values(), forbidden.detail, *(record.getMessage() for record in caplog.records)]
    assert not [line for line in said if "planted" in line or "hunter2" in line]
    assert not any(result.ok for result in [*results, forbidden])
