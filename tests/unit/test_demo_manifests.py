"""The demo's pilots are valid pilots, and `make demo SCENARIO=schedule`'s runs the decision tests' engine:
its mock profile, draft and traffic are the ones `specpilot.testing.decision_profile` states."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from specpilot.api import SpeculationPilot, validate
from specpilot.loadgen.workload import load_mix, parse_mix
from specpilot.testing.decision_profile import LENGTHS, PROFILE

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "manifests/demo"
PROFILE_ENV = "SPECPILOT_MOCK_PROFILE_JSON"


def _doc(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((DEMO / name).read_text())
    return doc


@pytest.mark.parametrize("name", ["pilot.yaml", "schedule.yaml"])
def test_a_demo_pilot_is_valid_and_its_mix_sends_its_scopes(name: str) -> None:
    doc = _doc(name)
    SpeculationPilot.from_wire(doc)
    assert validate(doc) == []
    mix = {"pilot.yaml": "mix.yaml", "schedule.yaml": "schedule-mix.yaml"}[name]
    sent = {scope.name for scope in load_mix(str(DEMO / mix))}
    assert sent <= {scope["name"] for scope in doc["spec"]["scopes"]}


def test_the_schedule_scenario_runs_the_decision_tests_engine_and_traffic() -> None:
    spec = _doc("schedule.yaml")["spec"]
    (env,) = (e for e in spec["engine"]["env"] if e["name"] == PROFILE_ENV)
    assert json.loads(env["value"]) == PROFILE
    assert not any(flag.startswith("--time-scale") for flag in spec["engine"].get("extraArgs", []))
    (mid,) = load_mix(str(DEMO / "schedule-mix.yaml"))
    (expected,) = parse_mix({"scopes": [{"name": "mid", "weight": 1, "deadline_s": 60, **LENGTHS}]})
    assert mid == expected
    acceptance: Any = PROFILE["acceptance"]
    assert mid.name in acceptance["scopes"]
