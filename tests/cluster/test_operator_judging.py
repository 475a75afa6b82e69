"""The operator judging windows on real traffic: one scope adopted through every stage, one flipped
back for a net slowdown in time per committed token, one without traffic held as inconclusive.

Mock engines with per-scope draft acceptance (chat drafts well, code badly) run as pods; loadgen
sends chat and code through the router; the operator scrapes the arms, reads the router's samples,
judges each scope on a short clock and moves it through its stages."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from specpilot.testing.waiting import wait_until
from tests.cluster.local import Cluster
from tests.cluster.operator_process import Operator, events, pilot, running_operator, start_load, wait_ready
from tests.cluster.pilots import judged_pilot, router_ip, scopes

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def operator(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    with running_operator(cluster, tmp_path_factory.mktemp("judging") / "operator.log") as running:
        yield running


def test_adopt_flip_and_hold_on_real_traffic(cluster: Cluster, operator: Operator, namespace: str) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(judged_pilot()))
    wait_ready(cluster, operator, namespace)
    ip = router_ip(cluster, namespace)
    load = start_load(cluster, ip, seconds=150)
    try:

        def settled() -> dict[str, dict[str, Any]] | None:
            now = scopes(cluster, namespace)
            done = (
                now.get("chat", {}).get("state") == "Speculative" and now.get("code", {}).get("state") == "RolledBack"
            )
            return now if done else None

        try:
            final = wait_until("chat adopted and code flipped back", settled, timeout=150, every=1)
        except AssertionError as error:
            raise AssertionError(f"{error}: {scopes(cluster, namespace)}\n{operator.tail(80)}") from None
    finally:
        load.terminate()
        load.wait(timeout=30)
    chat, code, batch = final["chat"], final["code"], final["batch"]
    assert (chat["stage"], chat["weight"]) == (1, 50)
    assert chat["lastWindow"]["verdict"] == "Pass" and chat["lastWindow"]["ratio"] < 1
    assert code["weight"] == 0
    status = pilot(cluster, namespace)["status"]
    (record,) = [r for r in status["fallbacks"] if r["scope"] == "code"]
    assert (record["reason"], record["metric"]) == ("ThresholdExceeded", "timePerCommittedTokenRatio")
    assert record["observed"] > record["threshold"] == 1.0
    # the router took the flip: the routing table and the router's effective routes agree
    table = json.loads(cluster.get_json("configmap", "demo-routes", "-n", namespace)["data"]["routes.json"])
    weights = {s["name"]: s["weights"]["speculative"] for s in table["scopes"]}
    assert weights == {"chat": 50, "code": 0, "batch": 25}
    reasons = [e["reason"] for e in events(cluster, namespace)]
    assert "ScopeRolledBack" in reasons and "RoutesTaken" in reasons and "ScopePromoted" in reasons, reasons
    # a scope without traffic neither promotes nor flips, and says why
    assert batch["state"] in ("Held", "Piloting") and batch["weight"] == 25
    assert batch["lastWindow"]["verdict"] == "Inconclusive"
    assert "fewer than minSamples" in batch["lastWindow"]["reason"]
    assert status["phase"] == "Progressing"
    assert status["speculativeScopes"] == "1/3"
