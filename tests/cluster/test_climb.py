"""A staged climb past the crossover, on real traffic: the decisions' "mid" scope wins at its first stage's
load and loses at its second's, where its arms run past the crossover and it flips back for speed.

The flip's load is evidence: the decision adopts mid below its win, brackets the crossover between the
win and the flip's load, and the engines' own crossover lies inside the bracket. The reference is the
same engines loaded directly in virtual time (bench/crossover_reference.py, which
tests/component/mockvllm/test_simulate.py holds to the served mock), on a grid across the bracket. With a
rehearsal configured, the rolled-back scope is rehearsed on the rehearsal's own router within the bracket
while production keeps it on ordinary decoding, and the stated crossover narrows to the engines'.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specpilot.testing.decision_profile import DRAFT_TOKENS, PROFILE
from specpilot.testing.waiting import wait_until
from tests.cluster.climbs import decided, engines_crossover, flipped_back, live_load
from tests.cluster.local import Cluster
from tests.cluster.operator_process import Operator, events, pilot, restart, running_operator, wait_ready
from tests.cluster.pilots import judged_pilot, report, router_ip, use_profile

pytestmark = pytest.mark.cluster

FORECAST = "h200-llama-3.1-8b-eagle"

RATE = 3.0  # mid's requests per second: 0.6 per replica of each compared arm at 20%, 1.5 at 50%
# The engines cross near 0.95 requests per second per replica: speculation takes 0.78x the time per
# committed token at 0.6 and 1.9x at 1.5, where both arms still keep up (about 2 and 4 per replica).
STAGES = [
    {"weight": 20, "minRequests": 20, "minDuration": "75s"},  # a band's worth of windows (9) and some
    {"weight": 50, "minRequests": 20, "minDuration": "1m"},
]


@pytest.fixture(scope="module")
def operator(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    with running_operator(cluster, tmp_path_factory.mktemp("climb") / "operator.log") as running:
        yield running


def climb_pilot() -> dict[str, Any]:
    doc = copy.deepcopy(judged_pilot())
    spec = doc["spec"]
    use_profile(spec, PROFILE)
    spec["speculative"]["draft"]["numSpeculativeTokens"] = DRAFT_TOKENS
    spec["scopes"] = [{"name": "mid", "stages": STAGES}]
    # production takes mid's whole load after the flip: 1.5 per replica, well within its capacity
    spec["baseline"] = {"replicas": 2}
    spec["analysis"]["minSamples"] = 5
    # A forecast from a profile that does not describe these pods: an H200 with an EAGLE-style head,
    # where speculation still pays at batch 256, against the mock's invented "mid" engine.
    spec["analysis"]["forecast"] = {"profile": FORECAST}
    return doc


def routes(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    table = json.loads(cluster.get_json("configmap", "demo-routes", "-n", namespace)["data"]["routes.json"])
    return list(table["scopes"])


def test_a_climb_past_the_crossover_is_adopted_below_its_win_with_the_engines_crossover_bracketed(
    cluster: Cluster, operator: Operator, namespace: str, tmp_path: Path
) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(climb_pilot()))
    wait_ready(cluster, operator, namespace)
    load = live_load(cluster, router_ip(cluster, namespace), tmp_path, rate=RATE, seconds=240)
    try:
        flip = flipped_back(cluster, operator, namespace)
    finally:
        load.terminate()
        load.wait()
    status = decided(cluster, namespace)
    (mid,) = status["scopes"]
    decision = mid["decision"]
    before = report(cluster, namespace, tmp_path / "before")
    body = json.loads(before["report.json"])
    truth = engines_crossover(tmp_path, 0.5, 1.5)
    print(
        f"mid flipped for {flip['metric']} at {flip['loads']}; {decision['outcome']} below {decision.get('maxLoad')}, "
        f"crossover in [{decision.get('crossoverLow')}, {decision.get('crossoverHigh')}]; the engines' {truth:.3f}"
    )
    print("\n".join(decision["reasons"]))
    print(json.dumps(body["scopes"][0]["comparisons"], indent=None))
    # it flipped back for speed at its second stage's load, which the flip records
    assert flip["metric"] == "timePerCommittedTokenRatio", flip
    assert flip["loads"]["speculative"] == pytest.approx(1.5, rel=0.3), flip
    assert mid["state"] == "RolledBack", mid
    # the win below stands, with the engines' crossover between it and the flip
    assert decision["outcome"] == "AdoptInLowLoadWindows", decision["reasons"]
    assert decision["maxLoad"] < truth, decision
    assert decision["crossoverLow"] <= truth <= decision["crossoverHigh"], (decision, truth)
    assert decision["crossoverHigh"] <= flip["loads"]["speculative"] * 1.05, (decision, flip)
    # the first sentence says both: where it is adopted and where the crossover lies
    first = decision["reasons"][0]
    assert f"{decision['maxLoad']:.2f}" in first, decision["reasons"]
    assert all(f"{decision[end]:.2f}" in first for end in ("crossoverLow", "crossoverHigh")), decision["reasons"]
    # the forecast said speculation pays far above these loads: the measured crossover says the profile
    # does not describe these pods, in status, in the report and in a warning Event
    forecast = mid["forecast"]
    assert forecast["profile"] == FORECAST and forecast["disagrees"], forecast
    assert "the profile does not describe these pods" in forecast["message"], forecast
    assert body["scopes"][0]["forecast"] == forecast
    warned = [e for e in events(cluster, namespace) if e["reason"] == "ForecastDisagrees"]
    assert warned and all(e["type"] == "Warning" and "scope mid" in e["message"] for e in warned), warned
    # the pilot's decision and the report agree with the scope's, and survive an operator restart
    assert status["decision"]["outcome"] == "AdoptInLowLoadWindows", status["decision"]
    assert body["decision"] == status["decision"] and body["scopes"][0]["decision"] == decision
    restart(cluster, operator, namespace)
    after = report(cluster, namespace, tmp_path / "after")
    assert after == before, [name for name in before if before[name] != after.get(name)]


# The ladder's four steps across the bracket (about 0.6 to 1.5), the routing fallback's step and two
# crossover steps: about 9 minutes.
REHEARSAL = {
    "peak": {"perReplica": 1.5},
    "steps": 4,
    "stepDuration": "60s",  # 4 windows: a step's windows form a band with its neighbour's
    "restart": False,
    "crossoverSteps": 2,
    "maxDuration": "20m",
}


@pytest.mark.long
def test_a_rolled_back_climb_is_rehearsed_within_its_bracket_and_the_crossover_narrows_to_the_engines(
    cluster: Cluster, operator: Operator, namespace: str, tmp_path: Path
) -> None:
    doc = climb_pilot()
    doc["spec"]["rehearsal"] = REHEARSAL
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(doc))
    wait_ready(cluster, operator, namespace)
    load = live_load(cluster, router_ip(cluster, namespace), tmp_path, rate=RATE, seconds=1500)
    live: list[list[dict[str, Any]]] = []  # the live routing table while the rehearsal runs

    def rehearsal(*phases: str) -> dict[str, Any] | None:
        found = pilot(cluster, namespace).get("status", {}).get("rehearsal")
        if found is not None and found["phase"] == "Running":
            live.append(routes(cluster, namespace))
        return found if found is not None and found["phase"] in phases else None

    try:
        flipped_back(cluster, operator, namespace)
        (first,) = decided(cluster, namespace)["scopes"]
        bracket = first["decision"]
        assert bracket["outcome"] == "AdoptInLowLoadWindows", bracket["reasons"]
        running = wait_until("the rehearsal running", lambda: rehearsal("Running"), timeout=240, every=1)
        assert running["brackets"] == [
            {"scope": "mid", "low": bracket["crossoverLow"], "high": bracket["crossoverHigh"]}
        ], running
        done = wait_until("the rehearsal finished", lambda: rehearsal("Completed", "Stopped"), timeout=1200, every=2)
        assert done["phase"] == "Completed", (done, operator.tail(60))
        (final,) = decided(cluster, namespace)["scopes"]
        stored = cluster.get_json("configmap", "demo-evidence", "-n", namespace)["data"]["evidence.json"]
        (tmp_path / "evidence.json").write_text(stored)  # the bands and crossover read again, when it fails
    finally:
        load.terminate()
        load.wait()
    decision = final["decision"]
    truth = engines_crossover(tmp_path, bracket["crossoverLow"], bracket["crossoverHigh"], seeds=3)
    print(
        f"bracket [{bracket['crossoverLow']:.3f}, {bracket['crossoverHigh']:.3f}] -> {decision['outcome']}, crossover "
        f"{decision.get('crossoverLoad')} in [{decision['crossoverLow']:.3f}, {decision['crossoverHigh']:.3f}]; "
        f"the engines' {truth:.3f}; ladder {[step['load'] for step in done['steps']]}"
    )
    print("\n".join(decision["reasons"]))
    # production kept mid on ordinary decoding throughout, and mid stays rolled back
    assert live and all(table[0]["weights"]["baseline"] == 100 for table in live), live[-1:]
    assert final["state"] == "RolledBack", final
    # the ladder lay within the bracket, and the crossover it measured narrowed to the engines'
    inside = [
        bracket["crossoverLow"] - 1e-3 <= step["load"] <= bracket["crossoverHigh"] + 1e-3 for step in done["steps"]
    ]
    assert all(inside), done
    assert decision["outcome"] == "AdoptInLowLoadWindows", decision["reasons"]
    assert decision["crossoverLoad"] == pytest.approx(truth, rel=0.15), (decision, truth)
    narrowed = decision["crossoverHigh"] - decision["crossoverLow"]
    assert narrowed < bracket["crossoverHigh"] - bracket["crossoverLow"], (decision, bracket)
