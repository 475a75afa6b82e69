"""Manual actions through annotations: promote a scope, abort it, resume it; each acted on once."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from specpilot.testing.waiting import wait_until
from tests.cluster.local import Cluster
from tests.cluster.operator_process import Operator, events, pilot, running_operator, wait_ready
from tests.cluster.pilots import judged_pilot

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def operator(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    with running_operator(cluster, tmp_path_factory.mktemp("manual") / "operator.log") as running:
        yield running


def scope(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    return next(s for s in pilot(cluster, namespace)["status"]["scopes"] if s["name"] == name)


def annotate(cluster: Cluster, namespace: str, key: str, value: str) -> None:
    cluster.kubectl("annotate", "-n", namespace, "speculationpilot/demo", f"specpilot.io/{key}={value}", "--overwrite")


def test_promote_abort_and_resume_by_annotation(cluster: Cluster, operator: Operator, namespace: str) -> None:
    doc = judged_pilot()
    for entry in doc["spec"]["scopes"]:
        entry["stages"] = [{"weight": 10, "minRequests": 10, "minDuration": "10m"}, *entry["stages"]]
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(doc))
    wait_ready(cluster, operator, namespace)
    wait_until("chat piloting its first stage", lambda: scope(cluster, namespace, "chat")["state"] == "Piloting")

    annotate(cluster, namespace, "promote", "chat")
    wait_until("chat promoted", lambda: scope(cluster, namespace, "chat")["stage"] == 1, timeout=30)
    assert scope(cluster, namespace, "chat")["weight"] == 25
    assert scope(cluster, namespace, "code")["stage"] == 0, "the other scopes stay where they were"

    def annotation_gone(key: str) -> bool:
        return f"specpilot.io/{key}" not in (pilot(cluster, namespace)["metadata"].get("annotations") or {})

    wait_until("the promote annotation removed once acted on", lambda: annotation_gone("promote"), timeout=30)

    annotate(cluster, namespace, "abort", "chat")
    wait_until("chat aborted", lambda: scope(cluster, namespace, "chat")["state"] == "RolledBack", timeout=30)
    records = pilot(cluster, namespace)["status"]["fallbacks"]
    assert [(r["scope"], r["reason"], r["metric"]) for r in records] == [("chat", "ManualAbort", "manual")]
    table = json.loads(cluster.get_json("configmap", "demo-routes", "-n", namespace)["data"]["routes.json"])
    assert next(s for s in table["scopes"] if s["name"] == "chat")["weights"]["speculative"] == 0
    wait_until("the abort annotation removed", lambda: annotation_gone("abort"), timeout=30)

    annotate(cluster, namespace, "resume", "chat")
    wait_until("chat resumed", lambda: scope(cluster, namespace, "chat")["state"] in ("Piloting", "Held"), timeout=30)
    resumed = scope(cluster, namespace, "chat")
    assert (resumed["stage"], resumed["weight"]) == (0, 10)
    reasons = [e["reason"] for e in events(cluster, namespace)]
    assert reasons.count("ScopePromoted") >= 1 and reasons.count("ScopeAborted") == 1
    assert reasons.count("ScopeResumed") == 1
    assert len(pilot(cluster, namespace)["status"]["fallbacks"]) == 1, "no second record for one abort"
