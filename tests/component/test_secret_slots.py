"""A secret planted in every credential slot a pilot can fill (a webhook's Secret header, a score webhook's,
the credentials of the Prometheus endpoint it names) is sent where it belongs, and after a run in which
every such call fails, shows in no status text, Event or log line the operator writes."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Sequence
from typing import Any

import pytest
from aiohttp import ClientSession, web
from tests.component.loopback import Serve

from specpilot.api.spec import ProbeCase, Probes
from specpilot.controller.collect import Collector, PrometheusEngines
from specpilot.controller.core.policy import Policy
from specpilot.controller.metrics import OperatorMetrics
from specpilot.controller.quality_gates import HttpQuality, ProbeResult, run_probes
from specpilot.controller.reconcile import Controller
from specpilot.controller.secrets import KubeSecretValues
from specpilot.fetch.endpoints import PrometheusCredentials, parse_endpoints
from specpilot.fetch.outbound import allowing_loopback, outbound_session
from specpilot.testing.harness import Harness, pilot_doc

PLANTED = "planted-7e21-SECRET"
HEADER = f"Bearer {PLANTED}"  # the Secret's value: the whole header value
TENANT = f"tenant-{PLANTED}"  # the Prometheus endpoint's secret header
NAMESPACE = "team-a"


class Heard:
    """Where each planted value arrived, by path: a run in which none arrived would prove nothing."""

    def __init__(self) -> None:
        self.by_path: dict[str, list[str]] = {}

    def __call__(self, request: web.Request) -> str:
        values = [request.headers.get(key, "") for key in ("Authorization", "X-Scope-OrgID")]
        self.by_path.setdefault(request.path, []).extend(value for value in values if PLANTED in value)
        return " ".join(values)


def failing_app(heard: Heard) -> web.Application:
    """Every credentialed call fails, each echoing what it was sent: a business webhook 500s or redirects
    to a URL carrying the header, a score webhook 500s, Prometheus refuses with 401. The engine answers, so
    that the score webhook is called at all."""

    async def echo(request: web.Request) -> web.Response:
        return web.Response(status=500, text=f"refused: {heard(request)}")

    async def bounce(request: web.Request) -> web.Response:
        raise web.HTTPFound(f"http://elsewhere.example/?credential={heard(request)}")

    async def prometheus(request: web.Request) -> web.Response:
        body = {"status": "error", "errorType": "unauthorized", "error": f"bad credentials {heard(request)}"}
        return web.json_response(body, status=401)

    async def engine(request: web.Request) -> web.Response:
        return web.json_response({"choices": [{"text": "an answer", "finish_reason": "length"}]})

    app = web.Application()
    app.add_routes([web.post("/business", echo), web.post("/bounce", bounce), web.post("/score", echo)])
    app.add_routes([web.post("/v1/completions", engine), web.route("*", "/prom/api/v1/{query:.*}", prometheus)])
    return app


class EngineAt(HttpQuality):
    """HttpQuality with both arms' engines at one test server (the pods' IPs lead nowhere here)."""

    def __init__(self, session: ClientSession, kube: Any, engine: str) -> None:
        super().__init__(session, kube)
        self._engine, self._probe_session, self._secret_kube = engine, session, kube

    async def probe(
        self,
        *,
        baseline: str,
        speculative: str,
        probes: Probes,
        cases: Sequence[ProbeCase],
        model: str,
        namespace: str,
    ) -> ProbeResult:
        return await run_probes(
            self._probe_session,
            baseline=self._engine,
            speculative=self._engine,
            probes=probes,
            cases=cases,
            model=model,
            values=KubeSecretValues(self._secret_kube, namespace),
        )


def planted_pilot(url: str) -> dict[str, Any]:
    doc = pilot_doc(probes=True)
    secret = {"secretKeyRef": {"name": "hooks", "key": "authorization"}}
    quality = doc["spec"]["quality"]
    quality["webhooks"] = [
        {"name": "business", "url": f"{url}/business", "secretHeader": secret},
        {"name": "bounce", "url": f"{url}/bounce", "secretHeader": secret},
        {"name": "closed", "url": "http://127.0.0.1:9/closed", "secretHeader": secret},
    ]
    score = {"webhook": {"url": f"{url}/score", "secretHeader": secret}}
    sampled = {
        "kind": "sampled",
        "prompt": "Tell a story.",
        "chat": False,
        "temperature": 0.7,
        "repeats": 2,
        "score": score,
    }
    quality["probes"] = {"cases": [sampled], "maxTokens": 16, "interval": "30s"}
    doc["spec"]["analysis"]["metricsSource"] = {"prometheus": {"endpoint": "corp"}}
    return doc


async def test_a_planted_secret_reaches_its_calls_and_no_status_event_or_log_line(
    serve: Serve, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    heard = Heard()
    url = (await serve(failing_app(heard))).url
    endpoints = parse_endpoints(
        {
            "endpoints": [
                {
                    "name": "corp",
                    "url": f"{url}/prom",
                    "authorization": {"credentials": PLANTED},
                    "http_headers": {"X-Scope-OrgID": {"secrets": [TENANT]}},
                }
            ]
        }
    )
    h = Harness(planted_pilot(url))
    value = base64.b64encode(HEADER.encode()).decode()
    secret = {"metadata": {"name": "hooks", "namespace": NAMESPACE}, "data": {"authorization": value}}
    h.kube.objects[("Secret", NAMESPACE, "hooks")] = secret
    async with outbound_session(addresses=allowing_loopback()) as session:
        prometheus = PrometheusEngines(session, PrometheusCredentials(endpoints))
        h.controller = Controller(
            kube=h.kube,
            routes=h.routes,
            evidence=h.evidence,
            quality=EngineAt(session, h.kube, url),
            collector=lambda: Collector(samples=h.samples, direct=h.engines, prometheus=prometheus),
            metrics=OperatorMetrics(),
            router_image="specpilot/specpilot:test",
            policy=Policy(outbound=("127.0.0.1:*",), endpoints=("corp",)),
            clock=h.clock,
        )
        await h.reconcile()
        h.ready_pods = True
        for _ in range(12):  # past the warm-up, through several judged windows and probe rounds
            await h.step()
    assert set(heard.by_path) == {"/business", "/bounce", "/score", "/prom/api/v1/query"}, heard.by_path
    texts = [
        json.dumps(h.status()),
        *(json.dumps(obj) for key, obj in h.kube.objects.items() if key[0] != "Secret"),  # evidence, children
        *(json.dumps(event) for event in h.kube.events),
        *(record.getMessage() for record in caplog.records),
        *(str(record.exc_info[1]) for record in caplog.records if record.exc_info),
    ]
    assert h.status().get("conditions"), "a run that wrote no status would prove nothing"
    leaked = [text for text in texts if PLANTED in text or value in text]
    assert leaked == []
