"""The Argo CD health check for SpeculationPilot (manifests/argocd/argocd-cm.yaml), run as Argo CD runs
it (Lua, `obj` the resource, returning {status, message}) on statuses captured from the chart-installed
operator on the local cluster (e2e/local/capture_statuses.py wrote tests/data/argocd/)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lupa
import pytest
import yaml
from tests.operator_annotations import KOPF_ANNOTATIONS

from specpilot.api.pilot import ACTION_ANNOTATIONS
from specpilot.api.status import Phase

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "tests" / "data" / "argocd"
CONFIG = yaml.safe_load((ROOT / "manifests" / "argocd" / "argocd-cm.yaml").read_text())
LUA = CONFIG["data"]["resource.customizations.health.specpilot.io_SpeculationPilot"]

# sample -> (Argo CD health, words its message holds)
CASES = {
    "progressing-arms-starting": ("Progressing", "Deployment not observed yet"),
    "progressing-piloting": ("Progressing", "scope chat Piloting stage 1 at 25%"),
    "progressing-generation-behind": ("Progressing", "Waiting for the operator to observe generation 4"),
    "suspended": ("Suspended", "spec.suspend is set"),
    "healthy": ("Healthy", "every scope is speculative or rolled back"),
    "degraded-image": ("Degraded", "ImageNotRunnable: image 'vllm/vllm-openai:v0.33.0'"),
    "degraded-invalid-spec": ("Degraded", "spec.scopes[0].match.headers[0].value: not a valid regular expression"),
}


def health(obj: dict[str, Any]) -> dict[str, str]:
    lua = lupa.LuaRuntime(unpack_returned_tuples=True)
    lua.globals().obj = lua.table_from(obj, recursive=True)
    result = lua.execute(LUA)
    return {key: result[key] for key in ("status", "message")}


def sample(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((SAMPLES / f"{name}.json").read_text())
    return loaded


@pytest.mark.parametrize(("name", "expected"), CASES.items(), ids=list(CASES))
def test_health_of_captured_statuses(name: str, expected: tuple[str, str]) -> None:
    status, words = expected
    got = health(sample(name))
    assert got["status"] == status, got
    assert words in got["message"], got


def test_a_status_older_than_the_spec_is_progressing_whatever_its_phase_says() -> None:
    behind = sample("progressing-generation-behind")
    assert behind["status"]["phase"] == "Healthy"
    assert behind["status"]["observedGeneration"] < behind["metadata"]["generation"]
    caught_up = {**behind, "metadata": {**behind["metadata"], "generation": behind["status"]["observedGeneration"]}}
    assert health(caught_up)["status"] == "Healthy"


def test_a_pilot_the_operator_has_not_seen_yet_is_progressing() -> None:
    applied = yaml.safe_load((ROOT / "manifests" / "demo" / "pilot.yaml").read_text())
    applied["metadata"]["generation"] = 1
    assert health(applied) == {
        "status": "Progressing",
        "message": "Waiting for the specpilot operator to report status",
    }


def test_samples_cover_every_phase_and_each_is_checked() -> None:
    assert sorted(p.stem for p in SAMPLES.glob("*.json")) == sorted(CASES)
    assert {sample(name)["status"]["phase"] for name in CASES} == {phase.value for phase in Phase}
    assert health({**sample("healthy"), "status": {**sample("healthy")["status"], "phase": "Sideways"}}) == {
        "status": "Unknown",
        "message": "Unknown phase Sideways",
    }


def test_ignore_differences_cover_what_the_operator_writes() -> None:
    rules = yaml.safe_load(CONFIG["data"]["resource.customizations.ignoreDifferences.specpilot.io_SpeculationPilot"])
    paths = rules["jqPathExpressions"]
    assert ".status" in paths and ".metadata.finalizers" in paths
    for key in (*ACTION_ANNOTATIONS, *KOPF_ANNOTATIONS):
        assert f'.metadata.annotations["{key}"]' in paths
