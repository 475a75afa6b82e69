"""Opt-in (`-m long`; about 30 minutes on two cores): does a peak rehearsal find each arm's capacity and
the crossover that the engines themselves have?

A pilot of the "mid" profile runs live below its crossover, and its rehearsal climbs a ladder of 60 s
steps past both arms' capacities, through the operator, the rehearsal router and the load Jobs, then runs
two crossover steps where the windows so far placed the crossover. The reference is the same engines loaded directly
(bench/crossover_reference.py) in virtual time, which tests/component/mockvllm/test_simulate.py holds to
the served mock on the same arrivals, so that the reference can hold hours of load: near the crossover
the arms differ by a few percent and a minute's read of the speculative arm swings with each burst of
arrivals, so a sweep over HTTP with a minute or two per load is itself a draw, not a reference (one put
this crossover at 0.68 requests/s per replica, where hours of load put it at 0.95).

- Each arm's rehearsed capacity (the load it completed on the highest ladder step it met) lands within
  15% of the highest step of the same ladder that the engine keeps up with on time when offered it
  exactly (the median of nine seeded climbs).
- The decision's crossover, combining live and rehearsal evidence, lands within 15% of the engines'
  long-run crossover (three runs of 4,000 model seconds per load on a fine grid across it).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specpilot.analysis.evidence import Evidence, bin_bounds
from specpilot.testing.decision_profile import DRAFT_TOKENS, LENGTHS, PROFILE
from specpilot.testing.waiting import wait_until
from tests.cluster.local import ROOT, Cluster
from tests.cluster.operator_process import Operator, pilot, running_operator, wait_ready
from tests.cluster.pilots import router_ip
from tests.cluster.rehearsals import LIVE_RATE, live_load, rehearsed_pilot

pytestmark = [pytest.mark.cluster, pytest.mark.long]

PEAK = 4.8  # requests per second per replica: past both arms' capacities (about 2 and 4)
STEPS = 15  # 0.3 apart: a ladder step is the resolution of a capacity, within 15% from 2 per replica up
LIVE = LIVE_RATE / 4  # requests per second per replica of each compared arm, at a quarter share
TOLERANCE = 0.15


@pytest.fixture(scope="module")
def operator(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    with running_operator(cluster, tmp_path_factory.mktemp("sweep") / "operator.log") as running:
        yield running


def reference(tmp: Path, ladder: list[float]) -> dict[str, Any]:
    """The engines' own crossover above the live load, and each arm's capacity over `ladder` (60 s per
    step read over its last 45 s, as the rehearsal reads a ladder step past its first window)."""
    out = tmp / "reference.json"
    argv = [sys.executable, str(ROOT / "bench/crossover_reference.py"), "--profile", json.dumps(PROFILE)]
    argv += ["--scope", "mid", "--draft-tokens", str(DRAFT_TOKENS), "--ladder", ",".join(map(str, ladder))]
    argv += ["--from", str(LIVE), "--step-seconds", "60", "--read", "45", "--deadline", "20", "--json", str(out)]
    lengths = [f"{LENGTHS[key]['min']}:{LENGTHS[key]['max']}" for key in ("input_tokens", "output_tokens")]
    argv += ["--input-tokens", lengths[0], "--output-tokens", lengths[1]]
    done = subprocess.run(argv, check=True, capture_output=True, text=True, timeout=1800)
    print(done.stdout)
    found: dict[str, Any] = json.loads(out.read_text())
    return found


def bins(cluster: Cluster, namespace: str) -> str:
    """mid's evidence per load bin and arm: windows, their mean load and time per committed token (ms)."""
    stored = cluster.get_json("configmap", "demo-evidence", "-n", namespace)["data"]["evidence.json"]
    scope = Evidence.model_validate_json(stored).scopes["mid"]
    lines = ["bin load range | arm: windows (rehearsed), mean load, tpct ms mean (sd)"]
    for index in sorted({index for cells in scope.bins.values() for index in cells}):
        low, high = bin_bounds(index)
        cells = []
        for arm, found in sorted(scope.bins.items()):
            cell = found.get(index)
            if cell is not None and cell.tpct.n:
                sd = cell.tpct.sd
                cells.append(
                    f"{arm.value}: {cell.tpct.n} ({scope.rehearsed.get(index, 0)}), {cell.load.mean or 0:.3f}, "
                    f"{(cell.tpct.mean or 0) * 1000:.1f} ({'-' if sd is None else f'{sd * 1000:.1f}'})"
                )
        lines.append(f"{low:.3f}-{high:.3f} | " + "; ".join(cells))
    return "\n".join(lines)


def test_the_rehearsal_finds_each_arms_capacity_and_the_crossover_the_engines_have(
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
        "maxDuration": "25m",  # the ladder, two crossover steps of two minutes and the routing fallback fit
    }
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(doc))
    wait_ready(cluster, operator, namespace)
    load = live_load(cluster, router_ip(cluster, namespace), tmp_path, seconds=1800)
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
        status = wait_until("the rehearsal completed and the decision settled", settled, timeout=1800, every=2)
    finally:
        load.terminate()
    rehearsal, decision = status["rehearsal"], status["scopes"][0]["decision"]
    print(json.dumps(rehearsal, indent=1))
    print(json.dumps(decision, indent=1))
    print(bins(cluster, namespace))
    ladder = [step["load"] for step in rehearsal["steps"] if not (step.get("flip") or step.get("crossover"))]
    # the live stages never reached the crossover: the ladder placed it, and two steps ran there
    crossover_steps = [step for step in rehearsal["steps"] if step.get("crossover")]
    assert [step["crossover"] for step in crossover_steps] == ["mid", "mid"], rehearsal["steps"]
    engines = reference(tmp_path, ladder)
    # the engine's climbs are offered exactly their Poisson load, and one that kept up served it; what it
    # completed within a step's read lags that near capacity (1.64 of 1.80 for the speculative arm)
    capacities = {
        arm: (engines["capacity"][engine] or {}).get("load")
        for arm, engine in (("speculative", "speculative"), ("control", "ordinary"))
    }
    rehearsed = {arm: rehearsal.get(f"{arm}Capacity") for arm in capacities}
    cross = engines["crossover"]
    print(
        f"ladder {ladder}; crossover steps at {[step['load'] for step in crossover_steps]}; capacity rehearsed "
        f"{rehearsed}, the engines' {capacities}; crossover decided {decision.get('crossoverLoad')} "
        f"({decision.get('crossoverLow')} to {decision.get('crossoverHigh')}), the engines' {cross}"
    )
    for arm, engine in capacities.items():
        assert engine is not None and rehearsed[arm] is not None, (arm, rehearsed, capacities)
        assert rehearsed[arm] == pytest.approx(engine, rel=TOLERANCE), (arm, rehearsed, capacities)
    assert cross is not None and LIVE < cross < ladder[-1], engines
    assert decision.get("crossoverLoad") is not None, decision
    assert decision["crossoverLoad"] == pytest.approx(cross, rel=TOLERANCE), decision
