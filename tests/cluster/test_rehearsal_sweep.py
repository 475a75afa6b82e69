"""Opt-in (`-m long`; about 42 minutes on two cores): does a peak rehearsal measure what a direct sweep
of the same engines does?

A pilot of the "mid" profile runs live below its crossover, and its rehearsal climbs a ladder of 60 s
steps past both arms' capacities, through the operator, the rehearsal router and the load Jobs. Then
the sweep (bench/mockvllm_concurrency.py, open loop) loads two mock engines of that profile directly,
one with the draft and one without, at the live load and the ladder's own loads, and reads each one's
capacity (the highest load it kept up with, completing 99% of requests within the 20 s deadline) and
the crossover (where their times per committed token cross at the same offered load). Each arm's
rehearsed capacity must land within 15% of the sweep's on the same grid of loads (so this checks what
the rehearsal measures, not how fine a ladder is), and the decision's crossover, combining live and
rehearsal evidence, within 15% of a second, finer sweep between the two loads that bracket it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.conftest import ROOT, Cluster, wait_until
from tests.cluster.operator_process import Operator, pilot, running_operator, wait_ready
from tests.cluster.pilots import router_ip
from tests.cluster.test_decisions import DRAFT_TOKENS, PROFILE
from tests.cluster.test_rehearsal import LIVE_RATE, live_load, rehearsed_pilot

pytestmark = [pytest.mark.cluster, pytest.mark.long]

PEAK = 4.8  # requests per second per replica: past both arms' capacities (about 2 and 4)
STEPS = 15  # 0.3 apart: a ladder step is the resolution of a capacity, within 15% from 2 per replica up
LIVE = LIVE_RATE / 4  # requests per second per replica of each compared arm, at a quarter share
TOLERANCE = 0.15


@pytest.fixture(scope="module")
def operator(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    with running_operator(cluster, tmp_path_factory.mktemp("sweep") / "operator.log") as running:
        yield running


def direct_sweep(tmp: Path, rates: list[float], *, seconds: int, window: int) -> dict[str, Any]:
    """The open-loop climb through `rates`, `seconds` at each, each read over its last `window` seconds."""
    out = tmp / "sweep.json"
    argv = [sys.executable, str(ROOT / "bench/mockvllm_concurrency.py"), "--profile", json.dumps(PROFILE)]
    argv += ["--scope", "mid", "--draft-tokens", str(DRAFT_TOKENS), "--rates", ",".join(map(str, rates))]
    argv += ["--level-seconds", str(seconds), "--window", str(window), "--deadline", "20", "--time-scale", "1"]
    argv += ["--input-tokens", "100", "--output-tokens", "50", "--json", str(out)]
    done = subprocess.run(argv, check=True, capture_output=True, text=True, timeout=1800)
    print(done.stdout)
    found: dict[str, Any] = json.loads(out.read_text())
    return found


def test_the_rehearsal_measures_each_arms_capacity_and_the_crossover_a_direct_sweep_does(
    cluster: Cluster, operator: Operator, namespace: str, tmp_path: Path
) -> None:
    doc = rehearsed_pilot()
    # the live stage runs long enough for its windows to form a band of their own below the crossover
    doc["spec"]["scopes"][0]["stages"] = [{"weight": 25, "minRequests": 5, "minDuration": "2m"}]
    doc["spec"]["rehearsal"] = {
        "peak": {"perReplica": PEAK},
        "steps": STEPS,
        "stepDuration": "60s",  # 4 analysis windows: each step forms a load band of its own
        "restart": False,
        "maxDuration": "25m",
    }
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(doc))
    wait_ready(cluster, operator, namespace)
    load = live_load(cluster, router_ip(cluster, namespace), tmp_path, seconds=1500)
    seen: list[Any] = []

    def settled() -> dict[str, Any] | None:
        """The rehearsal completed and the decision unchanged for 30 s since."""
        status = pilot(cluster, namespace).get("status", {})
        rehearsal = status.get("rehearsal") or {}
        if rehearsal.get("phase") == "Stopped":
            raise AssertionError(rehearsal)
        if rehearsal.get("phase") != "Completed":
            return None
        seen.append(json.dumps([scope.get("decision") for scope in status["scopes"]], sort_keys=True))
        stable = len(seen) > 15 and all(item == seen[-1] for item in seen[-15:])
        return status if stable else None

    try:
        status = wait_until("the rehearsal completed and the decision settled", settled, timeout=1500, every=2)
    finally:
        load.terminate()
    rehearsal, decision = status["rehearsal"], status["scopes"][0]["decision"]
    print(json.dumps(rehearsal, indent=1))
    print(json.dumps(decision, indent=1))
    ladder = [step["load"] for step in rehearsal["steps"] if not step.get("flip")]
    # the live stages' load on each compared arm, then the ladder's loads
    # each load read as the rehearsal reads a ladder step: past its first 15 s
    sweep = direct_sweep(tmp_path, [LIVE, *ladder], seconds=60, window=45)
    capacities = {"speculative": sweep["capacity"]["speculative"], "control": sweep["capacity"]["ordinary"]}
    rehearsed = {arm: rehearsal.get(f"{arm}Capacity") for arm in capacities}
    print(
        f"ladder {ladder}; capacity rehearsed {rehearsed}, swept {capacities}; crossover from the pilot's "
        f"windows {decision.get('crossoverLoad')}, swept {sweep['offered_crossover']}"
    )
    for arm, swept in capacities.items():
        assert swept is not None and rehearsed[arm] is not None, (arm, rehearsed, capacities)
        assert rehearsed[arm] == pytest.approx(swept, rel=TOLERANCE), (arm, rehearsed, capacities)
    # the live stages ran below the crossover; the rehearsal's bands reach past it
    coarse = sweep["offered_crossover"]
    assert coarse is not None and LIVE < coarse < ladder[-1], sweep
    # the sweep again between the two loads that bracket its crossover, so that the reference is finer
    # than the grid both share
    low = max(load for load in [LIVE, *ladder] if load <= coarse)
    high = min(load for load in ladder if load > coarse)
    # near the crossover the two arms' times per committed token differ by little, and a read of a dozen
    # requests cannot tell them apart: each finer load runs 2 minutes, read over its last 90 s
    fine_rates = [round(low + (high - low) * i / 5, 4) for i in range(6)]
    fine = direct_sweep(tmp_path, fine_rates, seconds=120, window=90)["offered_crossover"]
    print(f"crossover swept between {low} and {high}: {fine}")
    assert fine is not None, "the finer sweep crosses where the coarse one did"
    assert decision.get("crossoverLoad") is not None, decision
    assert decision["crossoverLoad"] == pytest.approx(fine, rel=TOLERANCE), decision
