"""The operator's policy on a real apiserver: hosts it may call for a pilot and images it may run,
and engine pods without a service-account token."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator

import pytest
import yaml

from specpilot.testing.waiting import wait_until
from tests.cluster.listener import recording
from tests.cluster.local import ROOT, Cluster
from tests.cluster.operator_process import Operator, children, condition, pilot, running_operator, wait_ready

pytestmark = pytest.mark.cluster

DEMO = yaml.safe_load((ROOT / "manifests" / "examples" / "local-demo.yaml").read_text())
DEMO["spec"]["analysis"]["warmup"] = "1h"  # about reconciling, not judging
ALLOWED_IMAGES = "specpilot/specpilot:*"


@pytest.fixture(scope="module")
def operator(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    log = tmp_path_factory.mktemp("policy") / "operator.log"
    with running_operator(cluster, log, "--allow-image", ALLOWED_IMAGES) as running:
        yield running


@pytest.fixture
def listener() -> Iterator[tuple[str, list[str]]]:
    """An HTTP server on loopback that records every request it gets (none should come)."""
    with recording() as (port, seen):
        yield f"http://127.0.0.1:{port}", seen


def invalid_message(cluster: Cluster, namespace: str) -> str:
    def invalid() -> str | None:
        found = condition(pilot(cluster, namespace), "InvalidSpec")
        return found["message"] if found is not None and found["status"] == "True" else None

    return str(wait_until("InvalidSpec", invalid, timeout=30))


def test_urls_outside_the_policy_are_invalid_and_never_called(
    cluster: Cluster, operator: Operator, namespace: str, listener: tuple[str, list[str]]
) -> None:
    url, seen = listener
    doc = copy.deepcopy(DEMO)
    doc["spec"]["quality"]["webhooks"] = [{"name": "business", "url": f"{url}/check"}]
    doc["spec"]["analysis"]["metricsSource"] = {"prometheus": {"url": url}}
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(doc))
    message = invalid_message(cluster, namespace)
    host = url.removeprefix("http://")
    assert f"spec.quality.webhooks[0].url: the operator may not call {host}" in message, message
    assert f"spec.analysis.metricsSource.prometheus.url: the operator may not call {host}" in message, message
    operator.wait_reconciles(2)
    assert children(cluster, namespace) == {}
    assert seen == []


def test_an_engine_image_outside_the_policy_is_invalid(cluster: Cluster, operator: Operator, namespace: str) -> None:
    doc = copy.deepcopy(DEMO)
    doc["spec"]["engine"]["image"] = "docker.io/someone/miner:latest"
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(doc))
    message = invalid_message(cluster, namespace)
    assert "spec.engine.image: image 'docker.io/someone/miner:latest' is not one the operator runs" in message
    assert ALLOWED_IMAGES in message
    assert children(cluster, namespace) == {}


def test_engine_pods_carry_no_token_no_capabilities_and_the_default_seccomp(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(DEMO))
    wait_ready(cluster, operator, namespace)
    pods = cluster.get_json("pods", "-n", namespace, "-l", "specpilot.io/arm")["items"]
    assert {p["metadata"]["labels"]["specpilot.io/arm"] for p in pods} >= {"baseline", "speculative"}
    for pod in pods:
        assert pod["spec"]["automountServiceAccountToken"] is False
        assert pod["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod["spec"]["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert not any(v.get("projected") for v in pod["spec"].get("volumes", [])), pod["spec"].get("volumes")
    routers = cluster.get_json("pods", "-n", namespace, "-l", "app.kubernetes.io/component=router")["items"]
    assert routers and all(p["spec"]["serviceAccountName"] == "demo-router" for p in routers)
