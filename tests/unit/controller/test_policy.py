"""The operator's policy: which hosts it calls for a pilot, which engine images pilots run."""

from __future__ import annotations

import pytest

from specpilot.api.spec import SpeculationPilotSpec
from specpilot.controller.core.policy import DEFAULT, Policy
from tests.unit.controller.specs import ROOT, load

_, SPEC = load(ROOT / "manifests/examples/local-demo.yaml")


def spec_with(
    *, webhook: str | None = None, prometheus: str | None = None, image: str | None = None
) -> SpeculationPilotSpec:
    doc = SPEC.to_wire()
    if webhook is not None:
        doc["quality"]["webhooks"] = [{"name": "business", "url": webhook}]
    if prometheus is not None:
        doc["analysis"]["metricsSource"] = {"prometheus": {"url": prometheus}}
    if image is not None:
        doc["engine"]["image"] = image
    return SpeculationPilotSpec.from_wire(doc)


@pytest.mark.parametrize(
    "url",
    [
        "http://checks.team-a.svc:8080/verdict",
        "https://prometheus-k8s.monitoring.svc.cluster.local:9091",
        "http://CHECKS.team-a.SVC/x",
    ],
)
def test_in_cluster_services_are_always_allowed(url: str) -> None:
    assert DEFAULT.problems(spec_with(webhook=url, prometheus=url)) == []


def test_other_hosts_are_refused_naming_the_field_and_the_setting() -> None:
    problems = DEFAULT.problems(spec_with(webhook="http://169.254.169.254/latest", prometheus="http://10.0.0.5:9090"))
    assert [p.field for p in problems] == ["spec.quality.webhooks[0].url", "spec.analysis.metricsSource.prometheus.url"]
    assert problems[0].message.startswith("the operator may not call 169.254.169.254: it calls in-cluster Services")
    assert "--allow-outbound" in problems[0].message and "policy.outboundHosts" in problems[0].message
    assert "10.0.0.5:9090" in problems[1].message
    # A lookalike of an in-cluster name is not one.
    assert DEFAULT.problems(spec_with(webhook="http://checks.svc.evil.example/x"))


def test_score_webhooks_of_sampled_cases_are_held_to_the_same_hosts() -> None:
    _, spec = load(ROOT / "manifests/examples/probe-cases.yaml")
    assert DEFAULT.problems(spec) == []  # its rater is an in-cluster Service
    doc = spec.to_wire()
    score = {"webhook": {"url": "http://169.254.169.254/latest"}}
    sampled = {"kind": "sampled", "prompt": "p", "temperature": 0.7, "score": score}
    doc["quality"]["probes"]["cases"] = [sampled]
    doc["scopes"][0]["probes"]["cases"].append(sampled)
    problems = DEFAULT.problems(SpeculationPilotSpec.from_wire(doc))
    assert [p.field for p in problems] == [
        "spec.quality.probes.cases[0].score.webhook.url",
        "spec.scopes[0].probes.cases[3].score.webhook.url",
    ]
    assert problems[0].message.startswith("the operator may not call 169.254.169.254")
    assert Policy(outbound=("169.254.169.254",)).problems(SpeculationPilotSpec.from_wire(doc)) == []


@pytest.mark.parametrize(
    ("allowed", "url", "ok"),
    [
        ("prometheus.example", "https://prometheus.example/api", True),
        ("prometheus.example:443", "https://prometheus.example/api", True),  # the scheme's port
        ("prometheus.example:9090", "https://prometheus.example/api", False),
        ("*.corp.example", "http://hooks.eu.corp.example:8080/x", True),
        ("*.corp.example", "http://corp.example.attacker.io/x", False),
        ("127.0.0.1:*", "http://127.0.0.1:59053", True),
        ("*", "http://checks.team-a.svc:80.evil/x", False),  # no port at all
    ],
)
def test_allowed_hosts_match_by_host_or_host_and_port(allowed: str, url: str, ok: bool) -> None:
    assert Policy(outbound=(allowed,)).allows_url(url) is ok


def test_engine_images_any_unless_named() -> None:
    assert DEFAULT.problems(spec_with(image="docker.io/anyone/anything:1")) == []
    policy = Policy(images=("registry.corp.example/vllm/*", "specpilot/specpilot:*"))
    assert policy.problems(spec_with(image="registry.corp.example/vllm/openai:v0.33")) == []
    (problem,) = policy.problems(spec_with(image="docker.io/someone/miner:latest"))
    assert problem.field == "spec.engine.image"
    assert "'docker.io/someone/miner:latest' is not one the operator runs" in problem.message
