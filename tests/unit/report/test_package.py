"""The handover package from a pilot and its evidence: files, numbers, replay workload, determinism."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from specpilot.analysis.evidence import Evidence
from specpilot.api.spec import SpeculationPilotSpec
from specpilot.api.status import DecisionOutcome, ScopeState, ScopeStatus, SpeculationPilotStatus
from specpilot.controller.core.decide import decide
from specpilot.loadgen.workload import load_mix
from specpilot.report.build import build
from specpilot.report.package import write_package
from tests.unit.analysis.crossover import analytic_crossover, pilot

ROOT = Path(__file__).resolve().parents[3]
ALPHAS = {"always": 0.95, "low": 0.5, "never": 0.1}
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def manifest() -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "manifests/demo/pilot.yaml").read_text())
    doc["metadata"]["namespace"] = "team-a"
    stages = [{"weight": 50, "minRequests": 10, "minDuration": "10s"}]
    doc["spec"]["scopes"] = [{"name": name, "stages": stages} for name in ALPHAS]
    return doc


@pytest.fixture(scope="module")
def evidence() -> Evidence:
    return pilot(ALPHAS)


def test_report_numbers_and_a_provisional_decision(evidence: Evidence) -> None:
    report = build(manifest(), evidence)
    assert report["decisionStated"] is False
    assert report["decision"]["outcome"] == DecisionOutcome.ADOPT_IN_LOW_LOAD_WINDOWS
    low = next(s for s in report["scopes"] if s["name"] == "low")
    assert low["crossover"]["load"] == pytest.approx(analytic_crossover(0.5), rel=0.15)
    assert low["timing"]["decodeShare"] > 0.5
    assert low["cost"]["kvCost"] == pytest.approx(0.2)
    assert len(low["acceptance"]["perPosition"]) == 3
    (schedule,) = report["schedules"]
    assert schedule["recommendation"] is True and schedule["derivedFrom"] == "low"
    per_batch = schedule["speculativeConfig"]["num_speculative_tokens_per_batch_size"]
    assert per_batch[0] == [1, 4] and per_batch[1][1] == 0
    assert per_batch[1][0] == int(low["crossover"]["low"]) + 1


def test_the_package_is_written_and_reads_back(tmp_path: Path, evidence: Evidence) -> None:
    folder = write_package(manifest(), evidence, tmp_path / "pkg")
    names = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    assert names == [
        "plots/acceptance.png",
        "plots/decode_share.png",
        "plots/kv_cache.png",
        "plots/load.png",
        "replay/pilot.yaml",
        "replay/workload.yaml",
        "report.json",
        "report.md",
    ]
    for png in folder.glob("plots/*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    md = (folder / "report.md").read_text()
    assert md.startswith("# Speculation pilot team-a/demo: AdoptInLowLoadWindows")
    assert "Recommended dynamic speculation schedule" in md and "not something the pilot ran" in md
    mix = load_mix(str(folder / "replay/workload.yaml"))
    assert [scope.name for scope in mix] == list(ALPHAS)
    assert mix[0].input_tokens.dist == "lognormal" and mix[0].input_tokens.low == 100
    replayed = yaml.safe_load((folder / "replay/pilot.yaml").read_text())
    assert replayed == {k: v for k, v in manifest().items() if k != "status"} | {
        "metadata": {"name": "demo", "namespace": "team-a"}
    }
    assert json.loads((folder / "report.json").read_text())["pilot"]["name"] == "demo"


def test_the_same_evidence_gives_the_same_package_byte_for_byte(tmp_path: Path, evidence: Evidence) -> None:
    first = write_package(manifest(), evidence, tmp_path / "a")
    second = write_package(manifest(), evidence, tmp_path / "b")
    for path in first.rglob("*"):
        if path.is_file():
            assert path.read_bytes() == (second / path.relative_to(first)).read_bytes(), path


def test_a_stated_decision_is_reported_as_stated_while_the_evidence_moves_within_its_noise() -> None:
    doc = manifest()
    spec = SpeculationPilotSpec.from_wire(doc["spec"])
    settled = [ScopeStatus(name=name, state=ScopeState.SPECULATIVE) for name in ALPHAS]
    stated = decide(pilot(ALPHAS), spec=spec, scopes=settled, fallbacks=[], annotations={}, previous=None, now=NOW)
    assert stated.decision is not None
    doc["status"] = SpeculationPilotStatus(scopes=stated.scopes, decision=stated.decision).to_wire()
    later = pilot(ALPHAS, per_load=5)  # more windows since: other sentences, the same decisions
    report = build(doc, later)
    assert report["decisionStated"] is True
    for scope in report["scopes"]:
        expected = next(s.decision for s in stated.scopes if s.name == scope["name"])
        assert expected is not None and scope["decision"]["reasons"] == expected.reasons
    fresh = build(manifest(), later)
    assert [s["decision"]["reasons"] for s in fresh["scopes"]] != [s["decision"]["reasons"] for s in report["scopes"]]
