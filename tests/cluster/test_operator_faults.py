"""Faults injected into the speculative arm's running pod flip the scope back, naming the cause.

The mock engines expose their fault endpoint (`--admin-port`, an engine flag shared by both arms);
a fault is posted to the speculative pod only, while loadgen keeps chat traffic flowing through the
router. Each case measures the time from the fault to the scope's rollback."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.cluster.conftest import Cluster, wait_until
from tests.cluster.operator_process import Operator, events, pilot, running_operator, start_load, wait_ready
from tests.cluster.test_operator import router_ip
from tests.cluster.test_operator_judging import judged_pilot

pytestmark = pytest.mark.cluster

ADMIN_PORT = 8001
SLOW_STAGES = [{"weight": 50, "minRequests": 10, "minDuration": "10m"}]  # stays piloting


def fault_pilot(*, probes: bool) -> dict[str, Any]:
    doc = judged_pilot()
    spec = doc["spec"]
    spec["engine"]["extraArgs"] = [f"--admin-port={ADMIN_PORT}"]
    spec["scopes"] = [{"name": "chat", "stages": SLOW_STAGES}]
    if probes:
        spec["quality"] = {
            "probes": {"prompts": ["Count from one to ten.", "Name three colours."], "maxTokens": 8, "interval": "10s"}
        }
    return doc


@pytest.fixture(scope="module")
def operator(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    with running_operator(cluster, tmp_path_factory.mktemp("faults") / "operator.log") as running:
        yield running


def speculative_ip(cluster: Cluster, namespace: str) -> str:
    pods = cluster.get_json("pods", "-n", namespace, "-l", "specpilot.io/arm=speculative")["items"]
    return str(next(p["status"]["podIP"] for p in pods if not p["metadata"].get("deletionTimestamp")))


def chat(cluster: Cluster, namespace: str) -> dict[str, Any]:
    scopes = pilot(cluster, namespace).get("status", {}).get("scopes", [])
    return next((s for s in scopes if s["name"] == "chat"), {})


@dataclass(frozen=True)
class Case:
    fault: dict[str, Any]
    reason: str  # of the fallback record
    metrics: frozenset[str]  # one of which the record names
    probes: bool = False


CASES = {
    "errors": Case({"kind": "errors", "rate": 0.5, "status": 500}, "HardLimit", frozenset({"errorRate"})),
    "probe-divergence": Case(
        {"kind": "divergence", "rate": 1.0, "after_tokens": 1},
        "QualityRegression",
        frozenset({"probeAgreement"}),
        probes=True,
    ),
    # The mock's latency fault slows every engine step, so every latency check fails; the record names
    # the first to show it (the engines' inter-token latency, a point comparison, usually wins).
    "latency": Case(
        {"kind": "latency", "factor": 1.0, "extra_s": 0.5},
        "ThresholdExceeded",
        frozenset({"ttftRatio", "interTokenLatencyRatio", "timePerCommittedTokenRatio", "endToEndRatio"}),
    ),
    "kv-pressure": Case({"kind": "memory", "fraction": 0.97}, "KvCachePressure", frozenset({"kvCacheUsage"})),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_fault_in_the_speculative_arm_flips_the_scope_back(
    cluster: Cluster, operator: Operator, namespace: str, case: Case
) -> None:
    doc = fault_pilot(probes=case.probes)
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(doc))
    wait_ready(cluster, operator, namespace)
    load = start_load(cluster, router_ip(cluster, namespace), seconds=120)
    try:
        try:
            wait_until(
                "chat piloting with a passing window",
                lambda: chat(cluster, namespace).get("lastWindow", {}).get("verdict") == "Pass",
                timeout=90,
                every=1,
            )
        except AssertionError as error:
            raise AssertionError(f"{error}: {chat(cluster, namespace)}\n{operator.tail(40)}") from None
        request = urllib.request.Request(
            f"http://{speculative_ip(cluster, namespace)}:{ADMIN_PORT}/faults",
            data=json.dumps(case.fault).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=5) as resp:
            assert resp.status == 201
        injected = time.monotonic()
        try:
            wait_until(
                "chat flipped back",
                lambda: chat(cluster, namespace).get("state") == "RolledBack",
                timeout=60,
                every=0.5,
            )
        except AssertionError as error:
            raise AssertionError(f"{error}: {chat(cluster, namespace)}\n{operator.tail(40)}") from None
        flip_seconds = time.monotonic() - injected
    finally:
        load.terminate()
        load.wait(timeout=30)
    status = pilot(cluster, namespace)["status"]
    (record,) = status["fallbacks"]
    assert record["scope"] == "chat" and record["reason"] == case.reason and record["metric"] in case.metrics, record
    assert chat(cluster, namespace)["weight"] == 0
    table = json.loads(cluster.get_json("configmap", "demo-routes", "-n", namespace)["data"]["routes.json"])
    assert table["scopes"][0]["weights"]["speculative"] == 0
    assert "RoutesTaken" in [e["reason"] for e in events(cluster, namespace)]
    print(f"{case.reason}: flipped {flip_seconds:.1f} s after the fault (interval 5 s, failureLimit 2)")
