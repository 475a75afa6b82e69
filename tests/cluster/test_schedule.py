"""Adopt with a schedule: a climb of the "mid" scope past the crossover X of plain speculation, where the
batch-size schedule its own decision recommends (draft up to the batch it ran at below X, none above) wins
below its switch and holds even with the control arm above it, and is adopted up to the highest load
measured, past X; with the switch_stall fault (vLLM issue #49548) on the engines, the same pilot is
flipped back and its decision names the batch it ran at against the switch.

X is the engines' own crossover, the same engines loaded directly in virtual time
(bench/crossover_reference.py, as tests/cluster/test_climb.py holds its climb to it). Each pilot climbs
two stages, the first below the switch's load (the scheduled arm holds at most the switch batch in flight
there), the second above X; the limits are test_climb's (tests/cluster/pilots.py says why its latency
ratios are 10x: this test is about time per committed token).

The long test runs the whole path: the plain climb, its decision (AdoptInLowLoadWindows),
`kubectl specpilot follow-up` writing the next pilot with the recommended schedule, and that pilot. The
short ones run only the follow-up, its schedule derived as the report derives it (see
`derived_schedule`).
"""

from __future__ import annotations

import copy
import json
import math
import re
import subprocess
import sys
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from specpilot.analysis.scheduled import MARGIN
from specpilot.testing.decision_profile import DRAFT_TOKENS, PROFILE
from specpilot.testing.waiting import wait_until
from specpilot.wire.batchschedule import BatchRange, VllmRelease, below_and_off, switched_off_above
from tests.cluster.climbs import decided, engines_crossover, engines_in_flight, flipped_back, live_load
from tests.cluster.local import Cluster
from tests.cluster.operator_process import Operator, pilot, running_operator, wait_ready
from tests.cluster.pilots import judged_pilot, report, router_ip, use_profile

pytestmark = pytest.mark.cluster

RATE = 2.4  # mid's requests per second; each compared arm (one replica) takes its stage's weight of them
LOW, HIGH = RATE * 0.16, RATE * 0.5  # 0.384 and 1.2 requests per second per replica
# Plain speculation takes 0.75x the control's time per committed token at LOW and 1.2x at HIGH (X is near
# 1.0). The schedule derived below drafts up to a batch of 1: at LOW it holds 0.6 in flight per replica and
# takes 0.84x, at HIGH it holds 3 and takes 0.96x, inside the 3% margin (virtual time, 1,500 model s).
# The first stage is long because its windows are small: at LOW a 15 s window holds about 6 of mid's
# requests per arm, and one in four falls short of minSamples (5); two minutes give two full bands there.
# The second is as long, so that the decision, stated as mid passes it, holds full bands at its load.
STAGES = [
    {"weight": 16, "minRequests": 20, "minDuration": "2m"},
    {"weight": 50, "minRequests": 20, "minDuration": "2m"},
]
# Both stages, and three minutes for windows held inconclusive (a quiet spell at LOW holds the first stage
# until a window passes again); the load stops once mid has passed them.
LOAD_SECONDS = 420
STALL = {"kind": "switch_stall"}  # its default: a step whose k differs from the last takes 100 times longer
KEY = VllmRelease.V0_33.schedule_key


@pytest.fixture(scope="module")
def operator(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    with running_operator(cluster, tmp_path_factory.mktemp("schedule") / "operator.log") as running:
        yield running


def climb_pilot(*, faults: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """test_climb's pilot of mid (plain speculation, DRAFT_TOKENS drafts) on this climb's stages."""
    doc = copy.deepcopy(judged_pilot())
    spec = doc["spec"]
    use_profile(spec, {**PROFILE, "faults": list(faults)} if faults else PROFILE)
    spec["speculative"]["draft"]["numSpeculativeTokens"] = DRAFT_TOKENS
    spec["scopes"] = [{"name": "mid", "stages": STAGES}]
    spec["baseline"] = {"replicas": 2}  # production's share: at most 1.6 requests/s, 0.8 per replica
    spec["analysis"]["minSamples"] = 5
    return doc


def scheduled_pilot(schedule: Sequence[BatchRange], *, faults: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """The follow-up of the climb as `kubectl specpilot follow-up` writes it: the same pilot, the draft
    with `schedule`."""
    doc = climb_pilot(faults=faults)
    doc["spec"]["speculative"]["draft"]["schedule"] = [
        {"start": r.start, "end": r.end, "numSpeculativeTokens": r.k} for r in schedule
    ]
    return doc


def derived_schedule() -> tuple[int, tuple[BatchRange, ...]]:
    """The schedule the plain climb's report recommends, derived as the report derives it
    (report/build.py `schedule`): the draft's k up to the batch the speculative arm holds in flight per
    replica at the highest load it is adopted below, rounded down (at least 1), none above. The plain
    climb wins at its first stage's load, LOW, below X: the batch is read there, off the engines in
    virtual time. With the switch, the schedule."""
    batch = max(1, math.floor(engines_in_flight(LOW)))
    return batch, below_and_off(DRAFT_TOKENS, batch)


def rendered(schedule: Sequence[BatchRange]) -> list[list[int]]:
    return [r.render() for r in schedule]


def scope_state(cluster: Cluster, namespace: str, name: str = "demo") -> str | None:
    scopes = pilot(cluster, namespace, name).get("status", {}).get("scopes", [])
    return str(scopes[0]["state"]) if scopes else None


def passed_both_stages(cluster: Cluster, operator: Operator, namespace: str, name: str) -> None:
    def speculative() -> bool:
        state = scope_state(cluster, namespace, name)
        if state == "RolledBack":
            raise AssertionError(f"mid flipped back: {pilot(cluster, namespace, name)['status']}")
        return state == "Speculative"

    try:
        wait_until("mid through both stages", speculative, timeout=LOAD_SECONDS - 20, every=2)
    except AssertionError as error:
        raise AssertionError(f"{error}: {pilot(cluster, namespace, name).get('status')}\n{operator.tail(60)}") from None


def bands(body: dict[str, Any]) -> list[tuple[float, float, float | None, bool]]:
    """mid's speculative bands from the report: (load, in flight per replica, ratio, powered)."""
    scope = body["scopes"][0]
    return [
        (band["load"], band["inFlightPerReplica"], comparison["ratio"], comparison["powered"])
        for band, comparison in zip(scope["bands"]["speculative"], scope["comparisons"], strict=True)
    ]


def speculative_args(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    """The `--speculative-config` the speculative arm's pods run with, parsed."""
    deployment = cluster.get_json("deployment", f"{name}-speculative", "-n", namespace)
    args: list[str] = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    found: dict[str, Any] = json.loads(args[args.index("--speculative-config") + 1])
    return found


def run_scheduled(
    cluster: Cluster, operator: Operator, namespace: str, tmp: Path, name: str
) -> tuple[dict[str, Any], dict[str, Any], float]:
    """The scheduled pilot `name` (applied) climbed through both stages: its status once its decision is
    stated and settled, its report, and the engines' crossover X (measured while the decision settles)."""
    wait_ready(cluster, operator, namespace, name)
    load = live_load(cluster, router_ip(cluster, namespace), tmp, rate=RATE, seconds=LOAD_SECONDS)
    try:
        passed_both_stages(cluster, operator, namespace, name)
    finally:
        load.terminate()
        load.wait()
    with ThreadPoolExecutor(max_workers=1) as pool:
        truth = pool.submit(engines_crossover, tmp, 0.5, 1.5)
        status = decided(cluster, namespace, name)
        body = json.loads(report(cluster, namespace, tmp / "report", name)["report.json"])
        return status, body, truth.result()


def assert_adopted(
    status: dict[str, Any], body: dict[str, Any], schedule: Sequence[BatchRange], switch: int, truth: float
) -> None:
    """Adopted with `schedule` up to the highest load measured, past the engines' crossover `truth`."""
    (mid,) = status["scopes"]
    decision, scope = status["decision"], mid["decision"]
    found = bands(body)
    print(f"the engines' crossover {truth:.3f}; switch {switch}; {decision['outcome']} {decision.get('envelope')}")
    print("\n".join(decision["reasons"]))
    print("bands (load, in flight per replica, ratio, powered):", found)
    # the premise: the stages lie on both sides of the switch and of plain speculation's crossover
    assert LOW < truth < HIGH, truth
    below = [b for b in found if b[3] and b[1] <= switch]
    above = [b for b in found if b[3] and b[1] > switch]
    assert below and all(b[0] < truth for b in below), found
    assert above and any(b[0] > truth for b in above), found
    # wins below its switch, holds within the margin above it, and is adopted with its schedule
    assert all(b[2] is not None and b[2] < 1 for b in below), found
    assert all(b[2] is not None and b[2] <= 1 + MARGIN for b in above), found
    assert mid["state"] != "RolledBack" and not status.get("fallbacks"), status  # Held once the load stopped
    assert scope["outcome"] == decision["outcome"] == "AdoptWithSchedule", decision["reasons"]
    assert json.loads("{" + decision["schedule"] + "}") == {KEY: rendered(schedule)}, decision
    assert scope["schedule"] == decision["schedule"], scope
    # the envelope reaches the highest load measured, past the crossover plain speculation had
    envelope = decision["envelope"]
    assert envelope["scopes"] == ["mid"] and envelope["maxLoad"] == scope["maxLoad"], decision
    assert envelope["maxLoad"] > truth, (envelope, truth)
    assert f"{envelope['maxLoad']:.2f}" in decision["reasons"][0] and decision["schedule"] in decision["reasons"][0]
    assert body["decision"] == decision


# Opt-in (-m long), as the follow-up below: about 5.5 minutes of climbing on 2 cores, beyond what the
# cluster tier's budget leaves; the stalling schedule's flip below stays in make test.
@pytest.mark.long
def test_the_recommended_schedule_is_adopted_past_the_crossover_of_plain_speculation(
    cluster: Cluster, operator: Operator, namespace: str, tmp_path: Path
) -> None:
    switch, schedule = derived_schedule()
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(scheduled_pilot(schedule)))
    status, body, truth = run_scheduled(cluster, operator, namespace, tmp_path, "demo")
    # the schedule reached the engine's command line and the arm's status as the decision names it
    engine = speculative_args(cluster, namespace, "demo")
    assert engine[KEY] == rendered(schedule), engine
    assert json.loads(status["arms"]["speculative"]["speculativeConfig"]) == engine, status["arms"]
    assert_adopted(status, body, schedule, switch, truth)


def test_a_schedule_stalling_at_its_switch_is_flipped_back_naming_the_batch_it_ran_at(
    cluster: Cluster, operator: Operator, namespace: str, tmp_path: Path
) -> None:
    switch, schedule = derived_schedule()
    doc = scheduled_pilot(schedule, faults=[STALL])
    # straight to the climb's second stage, above the switch, where the stall shows: the first stage, at
    # its load, holds about one request in flight and seldom crosses the switch
    doc["spec"]["scopes"][0]["stages"] = STAGES[1:]
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(doc))
    wait_ready(cluster, operator, namespace)
    load = live_load(cluster, router_ip(cluster, namespace), tmp_path, rate=RATE, seconds=LOAD_SECONDS)
    try:
        flip = flipped_back(cluster, operator, namespace)
    finally:
        load.terminate()
        load.wait()
    status = decided(cluster, namespace)
    (mid,) = status["scopes"]
    decision = mid["decision"]
    print(f"mid flipped for {flip['metric']} at {flip['loads']}; {decision['outcome']}")
    print("\n".join(decision["reasons"]))
    assert mid["state"] == "RolledBack", mid
    assert decision["outcome"] == status["decision"]["outcome"] == "Defer", decision["reasons"]
    assert "schedule" not in status["decision"], status["decision"]
    # the sentence names the batch it ran at where it flipped (or at the highest load measured below, which
    # it names), against the switch: stalled steps pile the requests up past it
    first = decision["reasons"][0]
    named = f"the scheduled config (drafting up to a batch of {switch}, none above) was flipped back, holding "
    assert named in first, first
    held = re.search(
        r"holding ([0-9.]+) requests in flight per replica(?: at [0-9.]+ requests per second per replica)?, "
        r"(above|at or below) its switch",
        first,
    )
    assert held is not None and float(held[1]) > switch and held[2] == "above", first


@pytest.mark.long
def test_a_plain_climb_is_followed_up_with_its_schedule_which_is_adopted_past_its_crossover(
    cluster: Cluster, operator: Operator, namespace: str, tmp_path: Path
) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(climb_pilot()))
    wait_ready(cluster, operator, namespace)
    load = live_load(cluster, router_ip(cluster, namespace), tmp_path, rate=RATE, seconds=LOAD_SECONDS)
    try:
        # flipped back at the second stage, or through it slower than the control: a crossover either way
        settled = ("RolledBack", "Speculative")
        wait_until("mid settled", lambda: scope_state(cluster, namespace) in settled, timeout=LOAD_SECONDS - 20)
    finally:
        load.terminate()
        load.wait()
    plain = decided(cluster, namespace)["decision"]
    print("plain:", "\n".join(plain["reasons"]))
    assert plain["outcome"] == "AdoptInLowLoadWindows", plain["reasons"]
    plugin = Path(sys.executable).parent / "kubectl-specpilot"
    written = subprocess.run(
        [str(plugin), "follow-up", "demo", "-n", namespace],
        check=True,
        capture_output=True,
        text=True,
        env=cluster.env(),
        timeout=60,
    ).stdout
    follow_up, *_ = yaml.safe_load_all(written)
    name = follow_up["metadata"]["name"]
    ranges = follow_up["spec"]["speculative"]["draft"]["schedule"]
    schedule = tuple(BatchRange(r["start"], r["end"], r["numSpeculativeTokens"]) for r in ranges)
    switch = switched_off_above(schedule)
    assert switch is not None, schedule
    print(f"follow-up {name}: {rendered(schedule)}")
    cluster.kubectl("delete", "-n", namespace, "speculationpilot/demo", "--wait=true", timeout=120)
    wait_until(
        "the plain climb's pods gone",
        lambda: not cluster.get_json("pods", "-n", namespace, "-l", "specpilot.io/pilot=demo")["items"],
        timeout=120,
        every=1,
    )
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=written)
    status, body, truth = run_scheduled(cluster, operator, namespace, tmp_path, name)
    assert_adopted(status, body, schedule, switch, truth)
