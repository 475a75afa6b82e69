"""The peak rehearsal on a real cluster: after the live stages, the operator replays the scope's own mix
through a router of its own at a ladder of loads, as Jobs of the project's load generator, and reads
each arm's capacity and the loads the live stages never reached.

The pilot's live traffic stays below the crossover of its scope (the decisions test's "mid" profile:
speculation wins below about 1.6 requests per second per replica and loses above); the rehearsal climbs
past it. What users must be able to rely on: no rehearsal request reaches a production pod, the live
shares go to production meanwhile and come back after, and nothing of the rehearsal is left behind.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from specpilot.testing.waiting import wait_until
from tests.cluster.faults import ADMIN_PORT, inject
from tests.cluster.local import Cluster
from tests.cluster.operator_process import Operator, events, pilot, running_operator, wait_ready
from tests.cluster.pilots import router_ip, router_samples
from tests.cluster.rehearsals import MODEL_LOAD_SECONDS, PEAK, live_load, rehearsed_pilot

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def operator(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    with running_operator(cluster, tmp_path_factory.mktemp("rehearsal") / "operator.log") as running:
        yield running


def samples(address: str) -> list[dict[str, Any]]:
    return [sample.to_json() for sample in router_samples(address)]


# A rehearsal run (about 4 minutes): in `make test` through the rehearsal's climb in the controller's shell
# (tests/unit/controller/test_rehearsal.py) and, on the cluster, the rehearsal a fault stops (below).
@pytest.mark.long
def test_the_rehearsal_climbs_past_the_live_loads_on_its_own_router_and_leaves_production_alone(
    cluster: Cluster, operator: Operator, namespace: str, tmp_path: Path
) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(rehearsed_pilot()))
    wait_ready(cluster, operator, namespace)
    load = live_load(cluster, router_ip(cluster, namespace), tmp_path, seconds=420)
    rehearsal_router: list[str] = []
    seen_samples: list[dict[str, Any]] = []
    replacement: set[str] = set()  # the restart fallback's replica, by IP

    def running() -> dict[str, Any] | None:
        found = pilot(cluster, namespace).get("status", {}).get("rehearsal")
        if found is not None and found["phase"] == "Running":
            return found
        return None

    try:
        wait_until("the rehearsal running", running, timeout=180, every=1)
        # meanwhile the live table sends the rehearsed scope to production
        table = json.loads(cluster.get_json("configmap", "demo-routes", "-n", namespace)["data"]["routes.json"])
        assert [scope["weights"]["baseline"] for scope in table["scopes"]] == [100], table
        # the operator is SIGKILLed on the second step and started again: it resumes that step
        wait_until("the second step", lambda: (running() or {}).get("step", 0) >= 1, timeout=120, every=1)
        operator.kill()
        operator.start()

        def finished() -> dict[str, Any] | None:
            pods = cluster.get_json("pods", "-n", namespace, "-l", "app.kubernetes.io/component=rehearsal-router")
            for pod in pods["items"]:
                ip = pod["status"].get("podIP")
                if ip and ip not in rehearsal_router:
                    rehearsal_router.append(ip)
            restarted = cluster.get_json("pods", "-n", namespace, "-l", "app.kubernetes.io/component=rehearsal-restart")
            replacement.update(ip for pod in restarted["items"] if (ip := pod["status"].get("podIP")))
            for ip in rehearsal_router:
                try:
                    fresh = samples(ip)
                except OSError:
                    continue
                known = {s["seq"] for s in seen_samples}
                seen_samples.extend(s for s in fresh if s["seq"] not in known)
            found = pilot(cluster, namespace).get("status", {}).get("rehearsal")
            return found if found is not None and found["phase"] in ("Completed", "Stopped") else None

        done = wait_until("the rehearsal finished", finished, timeout=360, every=2)
    finally:
        load.terminate()
    status = pilot(cluster, namespace)["status"]
    assert done["phase"] == "Completed", (done, operator.tail(60))
    # the ladder, then the routing and the restart fallback at peak
    steps = [step for step in done["steps"] if not (step.get("flip") or step.get("restart"))]
    fallback, restart_step = done["steps"][-2:]
    print(json.dumps(done, indent=1))
    # every step sent its planned load: the requests the rehearsal router saw begin within the step,
    # per second and per replica of the two arms
    assert seen_samples, "the rehearsal router's samples were read"
    duration = 30.0
    for step in steps:
        began = datetime.fromisoformat(step["startedAt"]).timestamp()
        sent = [s for s in seen_samples if began + 2 <= s["at"] < began + duration]
        assert len(sent) / (duration - 2) / 2 == pytest.approx(step["load"], rel=0.3), step
    assert steps[-1]["load"] == pytest.approx(PEAK)
    # no rehearsal request reached a production pod: the rehearsal router knew none
    assert {s["arm"] for s in seen_samples} == {"speculative", "control"}
    # each arm's capacity is what it completed on a ladder step it met (or none below every step), and
    # the control arm, which decodes without a draft, keeps up where the speculative arm falls behind
    for arm in ("speculative", "control"):
        capacity = done.get(f"{arm}Capacity")
        assert capacity is None or capacity in {(step.get(arm) or {}).get("completedPerReplica") for step in steps}, (
            arm,
            done,
        )
    assert (done.get("speculativeCapacity") or 0) < (done.get("controlCapacity") or 0), done
    assert steps[-1]["control"]["keptUp"] and not steps[-1]["speculative"]["keptUp"], steps[-1]
    # during the rehearsal the scope's windows were evidence only: falling behind at loads production
    # never offered flips nothing
    assert [scope["state"] for scope in status["scopes"]] == ["Speculative"], status["scopes"]
    # the evidence now reaches loads the live stages never did
    stored = json.loads(cluster.get_json("configmap", "demo-evidence", "-n", namespace)["data"]["evidence.json"])
    print(json.dumps(status.get("decision"), indent=1))
    assert stored["scopes"]["mid"]["bins"], stored["scopes"]["mid"]
    # nothing of it is left, and the live share is back
    wait_until(
        "the rehearsal's objects gone",
        lambda: (
            not [
                item
                for item in cluster.get_json(
                    "deployments,services,configmaps,jobs", "-n", namespace, "-l", "specpilot.io/pilot"
                )["items"]
                if item["metadata"]["name"].startswith("demo-rehearsal")
            ]
        ),
        timeout=60,
    )
    table = json.loads(cluster.get_json("configmap", "demo-routes", "-n", namespace)["data"]["routes.json"])
    assert table["scopes"][0]["weights"]["speculative"] == 25, table
    reasons = [event["reason"] for event in events(cluster, namespace)]
    # one Event per step although the operator was killed mid-rehearsal, and no Job left behind
    assert reasons.count("RehearsalStep") == 6 and reasons.count("RehearsalCompleted") == 1, reasons
    assert cluster.get_json("jobs", "-n", namespace)["items"] == []
    # the routing fallback at peak ran on the rehearsal router: the control arm took the whole share
    assert fallback["flip"] and fallback["load"] == pytest.approx(PEAK)
    flip = done["routingFlip"]
    assert flip["requests"] > 0, flip
    assert flip["recovered"] == ("recoverySeconds" in flip), flip
    flipped_at = datetime.fromisoformat(flip["at"]).timestamp()
    after = [s for s in seen_samples if flipped_at + 1 <= s["at"] < flipped_at + 14]
    late = [round(s["at"] - flipped_at, 2) for s in after if s["arm"] != "control"]
    assert after and not late, f"requests to the speculative arm this many seconds after the flip: {late}"
    # the restart fallback at peak: the one speculative replica went and a replica running ordinary
    # decoding came up in its place, Ready only after loading its model; meanwhile the speculative
    # share fell back to the control arm, and once Ready the replacement served the speculative share
    assert restart_step["restart"] and restart_step["load"] == pytest.approx(PEAK)
    restart = done["restartFallback"]
    print(json.dumps(restart, indent=1))
    assert MODEL_LOAD_SECONDS <= restart["secondsToReady"] < 30, restart
    assert restart["fellBack"] > 0, restart
    assert replacement, "the replacement's pod was seen"
    ready_at = datetime.fromisoformat(restart["readyAt"]).timestamp()
    served = {
        s["endpoint"].rpartition(":")[0] for s in seen_samples if s["arm"] == "speculative" and s["at"] > ready_at
    }
    assert served & replacement, (served, replacement)
    # and the speculative arm is back at its size, running the speculative config
    wait_until(
        "the speculative arm back at one ready replica",
        lambda: cluster.get_json("deployment", "demo-speculative", "-n", namespace)["status"].get("readyReplicas") == 1,
        timeout=60,
    )
    # the handover package reports both fallbacks with their measured times
    folder = tmp_path / "report"
    argv = [sys.executable, "-m", "specpilot.cli", "report", "demo", "-n", namespace, "-o", str(folder)]
    subprocess.run(argv, check=True, capture_output=True, text=True, env=cluster.env(), timeout=120)
    text = (folder / "report.md").read_text()
    assert "## Peak and fallback rehearsal" in text
    assert "- Routing fallback (the speculative share flipped to the control arm at " in text, text
    assert f"Ready in {restart['secondsToReady']:.2f} s" in text, text


def test_a_fault_mid_rehearsal_stops_it_flips_the_scope_and_leaves_production_serving(
    cluster: Cluster, operator: Operator, namespace: str, tmp_path: Path
) -> None:
    doc = rehearsed_pilot()
    doc["spec"]["engine"]["extraArgs"].append(f"--admin-port={ADMIN_PORT}")
    doc["spec"]["rehearsal"] = {"peak": {"perReplica": 2.0}, "steps": 3, "stepDuration": "30s", "maxDuration": "6m"}
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(doc))
    wait_ready(cluster, operator, namespace)
    router = router_ip(cluster, namespace)
    load = live_load(cluster, router, tmp_path, seconds=300)
    try:
        wait_until(
            "the rehearsal running",
            lambda: (pilot(cluster, namespace).get("status", {}).get("rehearsal") or {}).get("phase") == "Running",
            timeout=180,
            every=1,
        )
        inject(cluster, namespace, {"kind": "errors", "rate": 1.0, "status": 500})
        stopped = wait_until(
            "the rehearsal stopped",
            lambda: (
                found
                if (found := pilot(cluster, namespace)["status"].get("rehearsal", {})).get("phase") == "Stopped"
                else None
            ),
            timeout=120,
            every=1,
        )
    finally:
        load.terminate()
    status = pilot(cluster, namespace)["status"]
    assert "flipped back to ordinary decoding" in stopped["message"], stopped
    assert [(f["scope"], f["metric"]) for f in status["fallbacks"]] == [("mid", "errorRate")], status["fallbacks"]
    wait_until(
        "the rehearsal's router and load gone",
        lambda: (
            not [
                item
                for item in cluster.get_json("deployments,jobs", "-n", namespace, "-l", "specpilot.io/pilot")["items"]
                if item["metadata"]["name"].startswith("demo-rehearsal")
            ]
        ),
        timeout=60,
    )
    # production serves the scope through the live router, which sends it nowhere else now
    table = json.loads(cluster.get_json("configmap", "demo-routes", "-n", namespace)["data"]["routes.json"])
    assert table["scopes"][0]["weights"]["baseline"] == 100, table
    body = json.dumps({"model": "demo", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    request = urllib.request.Request(
        f"http://{router}:8080/v1/chat/completions",
        data=body.encode(),
        headers={"Content-Type": "application/json", "x-specpilot-scope": "mid"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.status == 200 and answer.headers.get("X-Specpilot-Arm") == "baseline"
