"""The operator's policy: which hosts it calls for a pilot, which engine images pilots run."""

from __future__ import annotations

from pathlib import Path

import pytest

from specpilot.api.spec import SpeculationPilotSpec
from specpilot.controller.core.policy import DEFAULT, Policy, called_url, outbound_urls
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


EXAMPLES = sorted((ROOT / "manifests/examples").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda path: path.stem)
def test_every_example_is_within_the_default_policy(path: Path) -> None:
    _, spec = load(path)  # in team-a
    assert DEFAULT.problems(spec, "team-a") == []


@pytest.mark.parametrize(
    "url",
    [
        "http://checks:8080/verdict",
        "http://checks.team-a:8080/verdict",
        "http://checks.team-a.svc:8080/verdict",
        "https://checks.team-a.svc.cluster.local:9091",
        "https://checks.team-a.svc.cluster.local.:9091",
        "http://CHECKS.Team-A.SVC/x",
    ],
)
def test_the_pilots_own_services_are_allowed_in_any_spelling(url: str) -> None:
    assert DEFAULT.problems(spec_with(webhook=url, prometheus=url), "team-a") == []


@pytest.mark.parametrize(
    "url",
    [
        "http://prometheus-operated.monitoring:9090",
        "http://prometheus-operated.monitoring.svc:9090",
        "http://prometheus-operated.monitoring.svc.cluster.local:9090",
        "http://checks.team-b.svc/x",
    ],
)
def test_other_namespaces_services_are_refused_unless_named(url: str) -> None:
    (problem,) = DEFAULT.problems(spec_with(prometheus=url), "team-a")
    assert problem.field == "spec.analysis.metricsSource.prometheus.url"
    assert "the pilot's own namespace's Services (team-a)" in problem.message
    assert "--allow-outbound" in problem.message and "policy.outboundHosts" in problem.message


@pytest.mark.parametrize("allowed", ["prometheus-operated.monitoring:9090", "*.monitoring", "*.monitoring.svc"])
@pytest.mark.parametrize(
    "url",
    [
        "http://prometheus-operated.monitoring:9090",
        "http://prometheus-operated.monitoring.svc:9090",
        "http://prometheus-operated.monitoring.svc.cluster.local:9090",
    ],
)
def test_a_service_allowed_in_one_spelling_is_allowed_in_every_spelling(allowed: str, url: str) -> None:
    assert Policy(outbound=(allowed,)).problems(spec_with(prometheus=url), "team-a") == []
    assert Policy(outbound=(allowed,)).problems(spec_with(prometheus=url.replace("monitoring", "other")), "x")


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("https://kubernetes.default.svc/api", "never calls the Kubernetes API server"),
        ("https://kubernetes.default:443", "never calls the Kubernetes API server"),
        ("https://kubernetes.default.svc.cluster.local", "never calls the Kubernetes API server"),
        ("http://169.254.169.254/latest/meta-data", "never calls link-local or cloud metadata addresses"),
        ("http://169.254.1.1:8080", "never calls link-local or cloud metadata addresses"),
        ("http://[fd00:ec2::254]/latest", "never calls link-local or cloud metadata addresses"),
        ("http://[fe80::1]/", "never calls link-local or cloud metadata addresses"),
    ],
)
def test_the_api_server_and_metadata_addresses_are_never_allowed(url: str, why: str) -> None:
    for policy in (DEFAULT, Policy(outbound=("*", "*:*"))):
        (problem,) = policy.problems(spec_with(webhook=url), "default")
        assert problem.field == "spec.quality.webhooks[0].url" and why in problem.message, problem.message
    # `kubernetes` alone, in the pilot's namespace, is the pilot's own Service unless that namespace is default
    assert DEFAULT.problems(spec_with(webhook="https://kubernetes/x"), "team-a") == []
    assert DEFAULT.problems(spec_with(webhook="https://kubernetes/x"), "default")


def test_other_hosts_are_refused_naming_the_field_and_the_setting() -> None:
    problems = DEFAULT.problems(
        spec_with(webhook="http://hooks.corp.example/latest", prometheus="http://10.0.0.5:9090"), "team-a"
    )
    assert [p.field for p in problems] == ["spec.quality.webhooks[0].url", "spec.analysis.metricsSource.prometheus.url"]
    assert problems[0].message.startswith("the operator may not call hooks.corp.example: it calls the pilot's own")
    assert "--allow-outbound" in problems[0].message and "policy.outboundHosts" in problems[0].message
    assert "10.0.0.5:9090" in problems[1].message
    # A lookalike of an in-cluster name is not one.
    assert DEFAULT.problems(spec_with(webhook="http://checks.team-a.svc.evil.example/x"), "team-a")


@pytest.mark.parametrize(
    ("url", "called"),
    [
        ("http://checks:8080/verdict?x=1", "http://checks.team-a.svc:8080/verdict?x=1"),
        ("http://checks.team-b/x", "http://checks.team-b.svc/x"),
        ("https://user@prom.monitoring:9091/p", "https://user@prom.monitoring.svc:9091/p"),
        ("http://checks.team-b.svc:80/x", "http://checks.team-b.svc:80/x"),
        ("http://checks.team-b.svc.cluster.local/x", "http://checks.team-b.svc.cluster.local/x"),
        ("https://hooks.corp.example/x", "https://hooks.corp.example/x"),
        ("http://10.0.0.5:9090", "http://10.0.0.5:9090"),
    ],
)
def test_short_service_names_are_called_qualified(url: str, called: str) -> None:
    """The operator's pod would read `checks` in its own namespace, and `checks.team-b` falls through to
    the public DNS where no such Service exists."""
    assert called_url(url, "team-a") == called


def test_an_admitted_spec_carries_every_url_as_called() -> None:
    _, spec = load(ROOT / "manifests/examples/probe-cases.yaml")
    doc = spec_with(webhook="http://checks/x", prometheus="http://prometheus-operated:9090").to_wire()
    doc["quality"]["probes"] = spec.to_wire()["quality"]["probes"]
    doc["scopes"] = spec.to_wire()["scopes"]
    admitted = DEFAULT.admit(SpeculationPilotSpec.from_wire(doc), "team-a")
    assert isinstance(admitted, SpeculationPilotSpec)
    assert [url for _, url in outbound_urls(admitted)] == [
        "http://checks.team-a.svc/x",
        "http://answer-rater.team-a.svc:8080/score",
        "http://prometheus-operated.team-a.svc:9090",
    ]
    refused = DEFAULT.admit(spec_with(webhook="http://checks.team-b/x"), "team-a")
    assert [p.field for p in refused] == ["spec.quality.webhooks[0].url"]  # type: ignore[union-attr]


def test_score_webhooks_of_sampled_cases_are_held_to_the_same_hosts() -> None:
    _, spec = load(ROOT / "manifests/examples/probe-cases.yaml")
    assert DEFAULT.problems(spec, "team-a") == []  # its rater is a Service of the pilot's namespace
    doc = spec.to_wire()
    score = {"webhook": {"url": "http://10.0.0.7/score"}}
    sampled = {"kind": "sampled", "prompt": "p", "temperature": 0.7, "score": score}
    doc["quality"]["probes"]["cases"] = [sampled]
    doc["scopes"][0]["probes"]["cases"].append(sampled)
    problems = DEFAULT.problems(SpeculationPilotSpec.from_wire(doc), "team-a")
    assert [p.field for p in problems] == [
        "spec.quality.probes.cases[0].score.webhook.url",
        "spec.scopes[0].probes.cases[3].score.webhook.url",
    ]
    assert problems[0].message.startswith("the operator may not call 10.0.0.7")
    assert Policy(outbound=("10.0.0.7",)).problems(SpeculationPilotSpec.from_wire(doc), "team-a") == []


@pytest.mark.parametrize(
    ("allowed", "url", "ok"),
    [
        ("prometheus.example", "https://prometheus.example/api", True),
        ("prometheus.example:443", "https://prometheus.example/api", True),  # the scheme's port
        ("prometheus.example:9090", "https://prometheus.example/api", False),
        ("*.corp.example", "http://hooks.eu.corp.example:8080/x", True),
        ("*.corp.example", "http://corp.example.attacker.io/x", False),
        ("127.0.0.1:*", "http://127.0.0.1:59053", True),
        ("*", "http://checks.team-b.svc:80.evil/x", False),  # no port at all
    ],
)
def test_allowed_hosts_match_by_host_or_host_and_port(allowed: str, url: str, ok: bool) -> None:
    assert (Policy(outbound=(allowed,)).refusal(url, "team-a") is None) is ok


def test_engine_images_any_unless_named() -> None:
    assert DEFAULT.problems(spec_with(image="docker.io/anyone/anything:1"), "team-a") == []
    policy = Policy(images=("registry.corp.example/vllm/*", "specpilot/specpilot:*"))
    assert policy.problems(spec_with(image="registry.corp.example/vllm/openai:v0.33"), "team-a") == []
    (problem,) = policy.problems(spec_with(image="docker.io/someone/miner:latest"), "team-a")
    assert problem.field == "spec.engine.image"
    assert "'docker.io/someone/miner:latest' is not one the operator runs" in problem.message


def test_a_named_endpoint_must_be_one_the_operator_holds_and_needs_no_outbound_pattern() -> None:
    doc = SPEC.to_wire()
    doc["analysis"]["metricsSource"] = {"prometheus": {"endpoint": "mimir"}}
    spec = SpeculationPilotSpec.from_wire(doc)
    assert outbound_urls(spec) == [], "the installer's own endpoint is no URL the pilot names"
    assert Policy(endpoints=("thanos", "mimir")).problems(spec, "team-a") == []
    (problem,) = Policy(endpoints=("thanos",)).problems(spec, "team-a")
    assert problem.field == "spec.analysis.metricsSource.prometheus.endpoint"
    assert "no Prometheus endpoint named 'mimir'" in problem.message and "thanos" in problem.message


OPERATOR = Policy(accounts=(("specpilot", "specpilot"),))


def with_account(name: str) -> SpeculationPilotSpec:
    doc = SPEC.to_wire()
    doc["engine"]["podTemplate"] = {"serviceAccountName": name}
    return SpeculationPilotSpec.from_wire(doc)


def test_engine_pods_never_run_as_the_operators_own_service_account() -> None:
    [problem] = OPERATOR.problems(with_account("specpilot"), "specpilot")
    assert problem.field == "spec.engine.podTemplate.serviceAccountName"
    assert problem.message.startswith("specpilot is the operator's own ServiceAccount")
    assert "name a ServiceAccount made for the engine, or leave the field unset" in problem.message


@pytest.mark.parametrize(("name", "namespace"), [("specpilot", "team-a"), ("engine", "specpilot")])
def test_other_service_accounts_are_the_pilots_own(name: str, namespace: str) -> None:
    assert OPERATOR.problems(with_account(name), namespace) == []


def test_a_refusal_never_echoes_a_urls_credentials() -> None:
    (problem,) = DEFAULT.problems(spec_with(webhook="http://alice:hunter2-SECRET@hooks.example/x"), "team-a")
    assert problem.message.startswith("the operator may not call hooks.example: "), problem.message
    assert "hunter2" not in problem.message and "alice" not in problem.message
