"""Faults put into a pilot's speculative arm: a pilot whose mock engines take them on their admin
port, posting and clearing them, reading a scope back, and the cases that should each flip chat."""

from __future__ import annotations

import json
import urllib.request
from dataclasses import dataclass
from typing import Any

from specpilot.testing.waiting import wait_until
from tests.cluster.local import Cluster
from tests.cluster.operator_process import Operator, pilot
from tests.cluster.pilots import TIME_SCALE, judged_pilot

ADMIN_PORT = 8001


def model_seconds(wall_s: float) -> float:
    """A fault's time on the judged pilot's engines for `wall_s` seconds of the wall clock: the mock times
    its faults in model seconds, and these engines run TIME_SCALE wall seconds to one."""
    return wall_s / TIME_SCALE


SLOW_STAGES = [{"weight": 50, "minRequests": 10, "minDuration": "10m"}]  # stays piloting


def fault_pilot(
    *, probes: bool = False, request_timeout: str | None = None, ttft_max_ratio: float | None = None
) -> dict[str, Any]:
    doc = judged_pilot()
    spec = doc["spec"]
    spec["engine"]["extraArgs"].append(f"--admin-port={ADMIN_PORT}")
    if request_timeout is not None:
        spec["router"]["requestTimeout"] = request_timeout
    if ttft_max_ratio is not None:
        spec["analysis"]["thresholds"]["ttft"]["maxRatio"] = ttft_max_ratio
    spec["scopes"] = [{"name": "chat", "stages": SLOW_STAGES}]
    if probes:
        spec["quality"] = {
            "probes": {"prompts": ["Count from one to ten.", "Name three colours."], "maxTokens": 8, "interval": "10s"}
        }
    return doc


def speculative_ip(cluster: Cluster, namespace: str) -> str:
    pods = cluster.get_json("pods", "-n", namespace, "-l", "specpilot.io/arm=speculative")["items"]
    return str(next(p["status"]["podIP"] for p in pods if not p["metadata"].get("deletionTimestamp")))


def scope_status(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    scopes = pilot(cluster, namespace).get("status", {}).get("scopes", [])
    return next((s for s in scopes if s["name"] == name), {})


def chat(cluster: Cluster, namespace: str) -> dict[str, Any]:
    return scope_status(cluster, namespace, "chat")


def wait_for_a_pass(cluster: Cluster, operator: Operator, namespace: str, timeout: float = 90) -> None:
    try:
        wait_until(
            "chat piloting with a passing window",
            lambda: chat(cluster, namespace).get("lastWindow", {}).get("verdict") == "Pass",
            timeout=timeout,
            every=1,
        )
    except AssertionError as error:
        raise AssertionError(f"{error}: {chat(cluster, namespace)}\n{operator.tail(40)}") from None


def faults_url(cluster: Cluster, namespace: str) -> str:
    """The speculative pod's mock-engine fault endpoint."""
    return f"http://{speculative_ip(cluster, namespace)}:{ADMIN_PORT}/faults"


def inject(cluster: Cluster, namespace: str, fault: dict[str, Any] | list[dict[str, Any]]) -> None:
    """Post `fault` (or a list of faults, added at once) to the speculative pod's mock engine."""
    request = urllib.request.Request(
        faults_url(cluster, namespace), data=json.dumps(fault).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=5) as resp:
        assert resp.status == 201


def clear_faults(cluster: Cluster, namespace: str) -> None:
    """Remove every fault from the speculative pod's mock engine."""
    with urllib.request.urlopen(urllib.request.Request(faults_url(cluster, namespace), method="DELETE"), timeout=5):
        pass


@dataclass(frozen=True)
class Case:
    fault: dict[str, Any]
    reason: str  # of the fallback record
    metrics: frozenset[str]  # one of which the record names
    probes: bool = False
    request_timeout: str | None = None  # the router's, when the case needs it short
    ttft_max_ratio: float | None = None  # the TTFT limit, when the case judges it tighter than 10x
    faster: bool = False  # the flip window's successful requests were faster on the speculative arm


CASES = {
    "errors": Case({"kind": "errors", "rate": 0.5, "status": 500}, "HardLimit", frozenset({"errorRate"})),
    "probe-divergence": Case(
        {"kind": "divergence", "rate": 1.0, "after_tokens": 1},
        "QualityRegression",
        frozenset({"probeGreedy"}),  # every greedy answer parts from the baseline's, which never parts from itself
        probes=True,
    ),
    # Half of chat's requests wait 20 s before the engine takes them: a TTFT tail clear enough to show
    # on the thirty-odd requests of a window after a dozen looks; the record names it.
    "ttft-tail": Case(
        {"kind": "slow_start", "rate": 0.5, "extra_s": model_seconds(20.0), "scope": "chat"},
        "ThresholdExceeded",
        frozenset({"ttftRatio"}),
        ttft_max_ratio=4.0,
    ),
    "kv-pressure": Case({"kind": "memory", "fraction": 0.97}, "KvCachePressure", frozenset({"kvCacheUsage"})),
    # A third of chat's requests stall until the router's timeout answers 504; the ones that finish
    # are still faster than on the baseline, and the timeout rate flips the scope all the same.
    "timeouts-while-faster": Case(
        {"kind": "stalls", "rate": 0.3, "scope": "chat"},
        "HardLimit",
        frozenset({"timeoutRate"}),
        request_timeout="4s",
        faster=True,
    ),
}
