"""SIGKILLs of the operator while it pilots and flips: the same outcome as a run without kills,
exactly one fallback record per flip, and no transition announced twice. Ten during the rollback
run in `make test`; fifty spread over promotion, flip, decision and teardown are opt-in:

    .venv/bin/python -m pytest tests/cluster/test_operator_kills.py -m long -s
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from typing import Any

import pytest

from specpilot.testing.waiting import wait_until
from tests.cluster.local import Cluster
from tests.cluster.operator_process import (
    Operator,
    children,
    events,
    pilot,
    running_operator,
    start_load,
    wait_ready,
)
from tests.cluster.pilots import judged_pilot, router_ip, use_profile

pytestmark = pytest.mark.cluster


# A kill run (about 100 s): SIGKILLs mid-reconcile are in `make test` through the restarts of the
# decisions, rehearsal, takeover and peering tests.
@pytest.mark.long
def test_ten_sigkills_during_a_rollback_leave_one_record_per_flip(
    cluster: Cluster, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    log = tmp_path_factory.mktemp("kills") / "operator.log"
    with running_operator(cluster, log) as operator:
        cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(judged_pilot()))
        wait_ready(cluster, operator, namespace)
        load = start_load(cluster, router_ip(cluster, namespace), seconds=240)
        chance = random.Random(7)
        try:
            for _ in range(10):
                time.sleep(chance.uniform(1.0, 4.0))  # a random moment of the operator's work to kill it in
                operator.kill()
                operator.start()

            def states() -> dict[str, str]:
                return {s["name"]: s["state"] for s in pilot(cluster, namespace).get("status", {}).get("scopes", [])}

            try:
                wait_until(
                    "chat adopted and code flipped back",
                    lambda: states().get("chat") == "Speculative" and states().get("code") == "RolledBack",
                    timeout=180,
                    every=1,
                )
            except AssertionError as error:
                raise AssertionError(f"{error}: {states()}\n{operator.tail(60)}") from None
            landed = operator.reconciles()
        finally:
            load.terminate()
            load.wait(timeout=30)
        # The last Events land: the reconcile that wrote those states posts its Events before it ends.
        operator.wait_reconciles(1, since=landed)
        status = pilot(cluster, namespace)["status"]
        assert [(r["scope"], r["reason"]) for r in status["fallbacks"]] == [("code", "ThresholdExceeded")]
        # Transitions that happen once in this pilot's life are announced once. (A restarted operator
        # may hold a scope again while its measurements refill: that is a new transition, not a repeat.)
        reasons = Counter(e["reason"] for e in events(cluster, namespace))
        once = {"PilotCreated", "ScopeRolledBack", "ScopeSpeculative", "RoutesTaken"}
        assert {reason: reasons[reason] for reason in once} == dict.fromkeys(once, 1), reasons
        assert reasons["ScopePromoted"] == 1, "chat went from its first stage to its second once"
        assert "Synced" not in reasons


# The invented costs the judged pilot ran before it took the measured ones: the production guard's bound
# below (at most two changes of state) was set for where this load puts the baseline on them. On the
# measured 1B-draft costs the same load put it at the edge of saturation twice in one run (four changes,
# every other assertion holding); that load's place on the measured costs is not yet worked out.
INVENTED = {
    "cost": {"step_time_s": 0.02, "draft_cost_ratio": 0.3},
    "acceptance": {"default": 0.7, "scopes": {"chat": 0.9, "code": 0.1}},
}


@pytest.mark.long
def test_fifty_sigkills_over_promotion_flip_decision_and_teardown_leave_one_record_per_flip(
    cluster: Cluster, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Kills come in bursts (1 to 4 s apart) with a quiet spell after each, longer than a window:
    an operator killed every few seconds forever never fills a window, and judges nothing."""
    log = tmp_path_factory.mktemp("kills50") / "operator.log"
    chance = random.Random(50)
    pending: Counter[str] = Counter()  # kills while each transition was still to come
    kills = 0

    def items() -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = cluster.get_json("speculationpilots", "-n", namespace)["items"]
        return found

    def scopes() -> dict[str, dict[str, Any]]:
        body = items()
        return {s["name"]: s for s in (body[0].get("status", {}).get("scopes", []) if body else [])}

    def settled() -> bool:
        now = scopes()
        return now.get("chat", {}).get("state") == "Speculative" and now.get("code", {}).get("state") == "RolledBack"

    def kill(operator: Operator, *, at_once: bool = False) -> None:
        nonlocal kills
        time.sleep(0 if at_once else chance.uniform(1.0, 4.0))  # a random moment of its work to kill it in
        body = items()
        if not body or body[0]["metadata"].get("deletionTimestamp"):
            pending["teardown"] += 1
        else:
            now, decided = scopes(), bool(body[0].get("status", {}).get("decision"))
            pending["promotion"] += now["chat"].get("stage", 0) == 0 and now["chat"]["state"] != "Speculative"
            pending["flip"] += now["code"]["state"] != "RolledBack"
            pending["adoption"] += now["chat"]["state"] != "Speculative"
            pending["decision"] += not decided
        kills += 1
        operator.kill()
        operator.start()

    def burst(operator: Operator, count: int = 6, quiet: float = 30.0) -> None:
        for _ in range(count):
            kill(operator)
        time.sleep(quiet)  # a quiet spell after the burst, for the pilot to move on

    doc = judged_pilot()
    use_profile(doc["spec"], INVENTED)
    with running_operator(cluster, log) as operator:
        cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(doc))
        wait_ready(cluster, operator, namespace)
        load = start_load(cluster, router_ip(cluster, namespace), seconds=900)
        started = time.monotonic()
        try:
            while not settled():
                assert time.monotonic() - started < 600, f"no outcome under kills: {scopes()}\n{operator.tail(60)}"
                burst(operator)
            cluster.kubectl("annotate", "-n", namespace, "speculationpilot/demo", "specpilot.io/decide=now")
            kill(operator, at_once=True)  # while the decision is drawn
            while not pilot(cluster, namespace).get("status", {}).get("decision") or kills < 49:
                assert time.monotonic() - started < 900, f"no decision under kills\n{operator.tail(60)}"
                burst(operator, count=min(6, max(1, 49 - kills)), quiet=15.0)
            landed = operator.reconciles()
        finally:
            load.terminate()
            load.wait(timeout=60)
        operator.wait_reconciles(1, since=landed)
        final = pilot(cluster, namespace)["status"]
        reasons = Counter(e["reason"] for e in events(cluster, namespace))
        cluster.kubectl("delete", "-n", namespace, "speculationpilot/demo", "--wait=false")
        kill(operator, at_once=True)  # while it tears down
        while kills < 50 and items():
            kill(operator)
        wait_until(
            "the pilot and everything it made gone",
            lambda: (
                not cluster.get_json("speculationpilots", "-n", namespace)["items"]
                and not children(cluster, namespace)
                and not cluster.get_json("pods", "-n", namespace)["items"]
            ),
            timeout=180,
            every=1,
        )

    by_name = {s["name"]: s for s in final["scopes"]}
    print(
        f"\n{kills} SIGKILLs in {time.monotonic() - started:.0f} s; kills while each was still to come: {dict(pending)}"
    )
    print(f"final: { {name: (s['state'], (s.get('decision') or {}).get('outcome')) for name, s in by_name.items()} }")
    print(f"pilot decision: {final['decision'].get('outcome')}; Events: {dict(reasons)}")
    assert kills >= 50, kills
    assert all(pending[what] > 0 for what in ("promotion", "flip", "decision", "teardown")), pending
    # The same outcome as without kills: chat adopted, code flipped back once and not adopted.
    assert by_name["chat"]["state"] == "Speculative" and by_name["code"]["state"] == "RolledBack"
    assert [(r["scope"], r["reason"]) for r in final["fallbacks"]] == [("code", "ThresholdExceeded")]
    assert not str((by_name["code"].get("decision") or {}).get("outcome", "")).startswith("Adopt"), by_name["code"]
    once = {"PilotCreated", "ScopeRolledBack", "ScopeSpeculative", "RoutesTaken", "DecisionStated"}
    assert {reason: reasons[reason] for reason in once} == dict.fromkeys(once, 1), reasons
    assert reasons["ScopePromoted"] == 1 and "Synced" not in reasons
    # A baseline at the edge of saturation under this load toggled the guard every window without
    # hysteresis (11 times each way); with the defaults it changes state at most twice.
    guard = reasons["ProductionSaturated"] + reasons["ProductionHeadroom"]
    assert guard <= 2, f"the production guard changed state {guard} times: {dict(reasons)}"
