"""A fault that begins after many clean probe rounds flips its scope about as soon as one that begins
at the first round: the probe checks' change detector (`proportions`) is not diluted by the clean rounds.

One pilot, one scope `cancel` probed by a cancel case every 10 s, no traffic (an idle pod gives a
dropped stream's slot back at once). After CLEAN clean rounds, more than a block of the detector's,
the speculative pod starts keeping every dropped stream's slot. The scope flips back with a
QualityRegression record naming the cancel kind, within LATE_RATIO times the rounds the same fault
takes from the first round (`detector_delay`, the rounds the tests need for a leak on every ask
against none), give or take the round a window takes to be judged on it. Runs for about half an hour:
`-m long`."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import pytest

from specpilot.analysis.evidence import load
from specpilot.analysis.proportions import BLOCK, Sequential
from specpilot.analysis.quality import CHANGE_SHARE, probe_alpha
from specpilot.api.reasons import FallbackReason, MetricName
from specpilot.api.spec import Analysis, ProbeKind, Probes
from specpilot.testing.waiting import wait_until
from specpilot.wire.names import EVIDENCE_KEY
from tests.cluster.faults import SLOW_STAGES, fault_pilot, inject, scope_status
from tests.cluster.local import Cluster
from tests.cluster.operator_process import Operator, pilot, running_operator, wait_ready

pytestmark = [pytest.mark.cluster, pytest.mark.long]

CLEAN = BLOCK + 20  # clean rounds before the fault: past the detector's first block
LATE_RATIO = 1.5
INTERVAL_S = 10
CASE = {"kind": "cancel", "prompt": "Explain this repository's build in detail.", "maxTokens": 1000}
CASE |= {"afterChunks": 3, "settle": "2s"}


def detector_delay(per_round: int) -> int:
    """Rounds the probe tests take to show a leak on every ask against none on the baseline."""
    alpha, test = probe_alpha(Analysis().confidence), Sequential()
    for index in range(1, 1000):
        test = test.step([(per_round, per_round, 0, per_round)])
        if test.mixture_p() <= alpha * (1 - CHANGE_SHARE) or test.change_p() <= alpha * CHANGE_SHARE:
            return index
    raise AssertionError("a leak on every ask is never shown")


def late_pilot() -> dict[str, Any]:
    doc = fault_pilot()
    spec = doc["spec"]
    spec["quality"] = {"probes": {"interval": f"{INTERVAL_S}s"}}  # every scope has its own cases
    spec["scopes"] = [{"name": "cancel", "stages": SLOW_STAGES, "probes": {"cases": [CASE]}}]
    return doc


def cancel_rounds(cluster: Cluster, namespace: str) -> int:
    """Probe rounds of the cancel case the evidence store holds (0 before the first is stored)."""
    stored = cluster.get_json("configmap", "demo-evidence", "-n", namespace).get("data", {}).get(EVIDENCE_KEY)
    scope = load(stored).scopes.get("cancel") if stored else None
    counts = scope.probes.counts().get(ProbeKind.CANCEL) if scope is not None else None
    return counts.rounds if counts is not None else 0


@pytest.fixture(scope="module")
def operator(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    with running_operator(cluster, tmp_path_factory.mktemp("probe-late") / "operator.log") as running:
        yield running


def test_a_leak_after_many_clean_rounds_flips_within_the_rounds_of_one_from_the_first(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(late_pilot()))
    wait_ready(cluster, operator, namespace)

    def clean_rounds_done() -> bool:
        state = scope_status(cluster, namespace, "cancel").get("state")
        assert state != "RolledBack", f"flipped before the fault: {pilot(cluster, namespace)['status']}"
        return cancel_rounds(cluster, namespace) >= CLEAN

    try:
        wait_until(f"{CLEAN} clean probe rounds", clean_rounds_done, timeout=CLEAN * INTERVAL_S * 2, every=5)
    except AssertionError as error:
        raise AssertionError(f"{error}\n{operator.tail(40)}") from None
    before = cancel_rounds(cluster, namespace)
    inject(cluster, namespace, {"kind": "cancel_leak", "rate": 1.0})
    from_start = detector_delay(Probes().per_round)
    allowed = math.floor(LATE_RATIO * from_start) + 1  # and the round a window takes to be judged on it
    try:
        wait_until(
            "the cancel scope flipped back",
            lambda: scope_status(cluster, namespace, "cancel").get("state") == "RolledBack",
            timeout=(allowed + 4) * (INTERVAL_S + 2 * 2 * Probes().per_round),
            every=1,
        )
    except AssertionError as error:
        raise AssertionError(f"{error}: {cancel_rounds(cluster, namespace) - before} rounds since the fault") from None
    after = cancel_rounds(cluster, namespace) - before
    (record,) = pilot(cluster, namespace)["status"]["fallbacks"]
    assert (record["reason"], record["metric"]) == (FallbackReason.QUALITY_REGRESSION, MetricName.PROBE_CANCEL)
    assert after <= allowed, f"{after} rounds after {before} clean ones; {from_start} from the first round"
    print(f"cancel leak after {before} clean rounds: flipped within {after} rounds ({from_start} from the first)")
