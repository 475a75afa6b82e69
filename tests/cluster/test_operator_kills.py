"""Ten SIGKILLs of the operator while it pilots and flips: the same outcome as a run without kills,
exactly one fallback record per flip, and no transition announced twice."""

from __future__ import annotations

import json
import random
import time
from collections import Counter

import pytest

from tests.cluster.conftest import Cluster, wait_until
from tests.cluster.operator_process import events, pilot, running_operator, start_load, wait_ready
from tests.cluster.pilots import judged_pilot, router_ip

pytestmark = pytest.mark.cluster


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
                time.sleep(chance.uniform(1.0, 4.0))
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
