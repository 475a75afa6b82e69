"""`kubectl specpilot follow-up`: the next pilot from a decision, on stdout, valid as the operator judges it
(against a fake of the plugin's client holding a pilot and its evidence)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from specpilot.analysis.evidence import Evidence
from specpilot.api.spec import SpeculationPilotSpec
from specpilot.api.status import DecisionOutcome, ScopeState, ScopeStatus, SpeculationPilotStatus
from specpilot.api.validate import validate
from specpilot.controller.core.decide import decide
from specpilot.plugin.followup import FOLLOWS_ANNOTATION, FOLLOWS_DECISION_ANNOTATION, Overrides, follow_up
from specpilot.plugin.kubectl import completions, main
from specpilot.report.build import build
from specpilot.wire.batchschedule import below_and_off, switched_off_above
from specpilot.wire.batchschedule import validate as vllm_reads
from tests.unit.report.evidence import pilot

ROOT = Path(__file__).resolve().parents[3]
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
LOW_LOAD = {"always": 0.95, "low": 0.5, "never": 0.1}  # adopted in low-load windows, below low's crossover
NO_GAIN = {"never": 0.1}  # deferred: no schedule to recommend
SERVER_FIELDS = {"uid": "0c1d", "resourceVersion": "4711", "generation": 3, "managedFields": [{"manager": "kubectl"}]}

Json = dict[str, Any]


def manifest(alphas: dict[str, float]) -> Json:
    """The demo pilot with one scope per acceptance, as the API server returns it (server fields, labels)."""
    doc: Json = yaml.safe_load((ROOT / "manifests/demo/pilot.yaml").read_text())
    doc["metadata"] |= {"namespace": "team-a", "labels": {"team": "a"}, **SERVER_FIELDS}
    doc["metadata"]["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": "{}"}
    stages = [{"weight": 50, "minRequests": 10, "minDuration": "10s"}]
    doc["spec"]["scopes"] = [{"name": name, "stages": stages} for name in alphas]
    return doc


def finished(alphas: dict[str, float], evidence: Evidence) -> Json:
    """The pilot with every scope settled and its decision stated, as the operator leaves it."""
    doc = manifest(alphas)
    spec = SpeculationPilotSpec.from_wire(doc["spec"])
    settled = [ScopeStatus(name=name, state=ScopeState.SPECULATIVE) for name in alphas]
    stated = decide(evidence, spec=spec, scopes=settled, fallbacks=[], annotations={}, previous=None, now=NOW)
    assert stated.decision is not None
    doc["status"] = SpeculationPilotStatus(scopes=stated.scopes, decision=stated.decision).to_wire()
    return doc


class FakeClient:
    """The calls `follow-up` makes: the pilot and its evidence store."""

    def __init__(self, doc: Json, evidence: Evidence | None) -> None:
        self.namespace = "team-a"
        self.doc, self.stored = doc, evidence

    def pilot(self, name: str) -> Json:
        assert name == self.doc["metadata"]["name"]
        return copy.deepcopy(self.doc)

    def evidence(self, name: str) -> Evidence | None:
        return self.stored


@pytest.fixture(scope="module")
def low_load() -> Evidence:
    return pilot(LOW_LOAD)


@pytest.fixture(scope="module")
def no_gain() -> Evidence:
    return pilot(NO_GAIN)


def run(capsys: pytest.CaptureFixture[str], fake: FakeClient, *flags: str) -> tuple[int, str, str]:
    code = main(["follow-up", "demo", "-n", "team-a", *flags], connect_to=lambda **_: fake)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def without_schedule(spec: Json) -> Json:
    found = copy.deepcopy(spec)
    found["speculative"]["draft"].pop("schedule")
    return found


def test_a_low_load_decision_is_followed_by_its_schedule_and_nothing_else_changes(
    capsys: pytest.CaptureFixture[str], low_load: Evidence
) -> None:
    doc = finished(LOW_LOAD, low_load)
    report = build(doc, low_load)
    assert report["decision"]["outcome"] == DecisionOutcome.ADOPT_IN_LOW_LOAD_WINDOWS
    code, out, err = run(capsys, FakeClient(doc, low_load))
    assert (code, err) == (0, "")
    followed, workload = yaml.safe_load_all(out)
    assert validate(followed) == []
    (recommended,) = report["schedules"]
    ranges = [
        [r["start"], r["end"], r["numSpeculativeTokens"]] for r in followed["spec"]["speculative"]["draft"]["schedule"]
    ]
    assert ranges == recommended["speculativeConfig"]["num_speculative_tokens_per_batch_size"]
    assert switched_off_above(vllm_reads(ranges)) == recommended["lastSpeculativeBatchSize"]
    assert without_schedule(followed["spec"]) == doc["spec"]
    first = report["decision"]["reasons"][0].split(". ")[0]
    assert followed["metadata"] == {
        "name": "demo-follow-up",
        "namespace": "team-a",
        "labels": {"team": "a"},
        "annotations": {FOLLOWS_ANNOTATION: "demo", FOLLOWS_DECISION_ANNOTATION: f"AdoptInLowLoadWindows: {first}"},
    }
    assert "status" not in followed
    assert out.startswith("# The pilot that follows demo: AdoptInLowLoadWindows: ")
    assert workload["metadata"]["name"] == "demo-follow-up-workload"
    assert yaml.safe_load(workload["data"]["workload.yaml"]) == report["replay"]["mix"]


def test_scopes_that_each_recommend_a_schedule_give_the_smallest_switch_batch(low_load: Evidence) -> None:
    doc = finished(LOW_LOAD, low_load)
    report = build(doc, low_load)
    (low,) = report["schedules"]
    smaller = low["lastSpeculativeBatchSize"] - 5
    config = {
        **low["speculativeConfig"],
        "num_speculative_tokens_per_batch_size": [r.render() for r in below_and_off(2, smaller)],
    }
    other = {**low, "derivedFrom": "always", "lastSpeculativeBatchSize": smaller, "speculativeConfig": config}
    made = follow_up(doc, {**report, "schedules": [low, other]}, Overrides())
    schedule = made.documents[0]["spec"]["speculative"]["draft"]["schedule"]
    assert [(r["start"], r["end"]) for r in schedule] == [(1, smaller), (smaller + 1, smaller + 1)]
    assert (
        f"smallest switch batch of the scopes' recommendations (low {smaller + 5}, always {smaller})" in made.render()
    )


def test_a_running_pilot_follows_its_provisional_decision_and_says_so(
    capsys: pytest.CaptureFixture[str], low_load: Evidence
) -> None:
    code, out, err = run(capsys, FakeClient(manifest(LOW_LOAD), low_load))
    followed, _ = yaml.safe_load_all(out)
    assert code == 0 and "demo has stated no decision yet" in err and "provisional" in err
    assert followed["metadata"]["annotations"][FOLLOWS_DECISION_ANNOTATION].endswith("(provisional)")
    assert followed["spec"]["speculative"]["draft"]["schedule"]


@pytest.mark.parametrize(
    ("flag", "value", "field"),
    [("--image", "vllm/vllm-openai:v0.34.0", "image"), ("--model", "meta-llama/Llama-4-8B", "model")],
    ids=["image", "model"],
)
def test_a_new_target_without_a_recommendation_carries_the_old_draft(
    capsys: pytest.CaptureFixture[str], no_gain: Evidence, flag: str, value: str, field: str
) -> None:
    doc = finished(NO_GAIN, no_gain)
    code, out, err = run(capsys, FakeClient(doc, no_gain), flag, value)
    assert (code, err) == (0, "")
    followed, _ = yaml.safe_load_all(out)
    assert validate(followed) == []
    assert followed["spec"]["engine"][field] == value
    expected = copy.deepcopy(doc["spec"])
    expected["engine"][field] = value
    assert followed["spec"] == expected
    assert followed["metadata"]["annotations"][FOLLOWS_DECISION_ANNOTATION].startswith("Defer: ")


def test_a_new_model_drops_the_revision_pinned_to_the_old_one(
    capsys: pytest.CaptureFixture[str], no_gain: Evidence
) -> None:
    doc = finished(NO_GAIN, no_gain)
    doc["spec"]["engine"]["revision"] = "8f3a1c"
    code, out, _ = run(capsys, FakeClient(doc, no_gain), "--model", "meta-llama/Llama-4-8B", "--image", "vllm:v2")
    followed, _ = yaml.safe_load_all(out)
    assert code == 0 and "revision" not in followed["spec"]["engine"]
    assert "# engine.revision 8f3a1c pinned the old model: dropped" in out


def test_no_recommendation_and_no_new_target_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str], no_gain: Evidence
) -> None:
    code, out, err = run(capsys, FakeClient(finished(NO_GAIN, no_gain), no_gain))
    assert (code, out) == (1, "")
    assert err.startswith("error: demo: pilot 'demo' recommends no schedule (decision Defer: ") and err.count("\n") == 1
    assert "--no-schedule" in err


def test_no_schedule_carries_the_draft_unchanged(capsys: pytest.CaptureFixture[str], low_load: Evidence) -> None:
    doc = finished(LOW_LOAD, low_load)
    code, out, _ = run(capsys, FakeClient(doc, low_load), "--no-schedule", "--name", "demo-again")
    followed, _ = yaml.safe_load_all(out)
    assert code == 0 and followed["metadata"]["name"] == "demo-again"
    assert followed["spec"] == doc["spec"] and validate(followed) == []


def test_a_workload_pilot_takes_no_new_image(capsys: pytest.CaptureFixture[str], no_gain: Evidence) -> None:
    doc = finished(NO_GAIN, no_gain)
    del doc["spec"]["engine"]
    doc["spec"]["workloadRef"] = {"name": "chat-vllm"}
    doc["spec"].pop("baseline")
    code, _, err = run(capsys, FakeClient(doc, no_gain), "--image", "vllm:v2")
    assert code == 1 and "runs the engine of spec.workloadRef" in err and err.count("\n") == 1


def test_a_follow_up_that_the_operator_would_refuse_is_not_printed(
    capsys: pytest.CaptureFixture[str], low_load: Evidence
) -> None:
    code, out, err = run(capsys, FakeClient(finished(LOW_LOAD, low_load), low_load), "--name", "x" * 41)
    assert (code, out) == (1, "")
    assert err.startswith("error: demo: the follow-up would be refused: metadata.name: ") and "--name" in err


def test_completion_offers_the_command_and_its_flags() -> None:
    assert completions(["foll"]) == ["follow-up"]
    assert "--no-schedule" in completions(["--no"])
