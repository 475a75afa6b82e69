"""A scope's forecast from what the pilot holds: step costs from a profile or measurements, and the
acceptance and lengths from the scope's windows."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from specpilot.analysis.evidence import ScopeEvidence
from specpilot.analysis.forecast.inputs import (
    MIN_WINDOWS,
    ProfileError,
    acceptance,
    measured_costs,
    profile_costs,
    scope_forecast,
)
from specpilot.analysis.forecast.model import Acceptance, Lengths, forecast
from specpilot.mockvllm.profile import calibrated_names, calibrated_profile
from specpilot.wire.profiles import CALIBRATED, calibrated_text
from specpilot.wire.stepcost import Form, StepCost
from tests.unit.analysis.scope_evidence import RATES, moments, scope

MEASURED = Path(__file__).resolve().parents[3] / "operator/specpilot/mockvllm/profiles/h200-stepcost.json"


def test_the_operator_knows_every_calibrated_profile_the_mock_carries_and_reads_its_two_step_costs() -> None:
    assert calibrated_names() == CALIBRATED
    for name in CALIBRATED:
        costs = profile_costs(calibrated_text(name))
        data = calibrated_profile(name)
        assert costs.target == StepCost(**{**data["cost"], "form": Form(data["cost"]["form"])})
        assert costs.draft == StepCost(**{**data["draft"], "form": Form(data["draft"]["form"])})


def test_measurements_are_fitted_larger_model_as_target_and_a_single_model_names_what_is_missing() -> None:
    data = json.loads(MEASURED.read_text())
    pair = {"llama-3.1-8b", "llama-3.2-1b"}
    two = {
        **data,
        "params": {m: data["params"][m] for m in pair},
        "rows": [r for r in data["rows"] if r["model"] in pair],
    }
    costs = measured_costs(json.dumps(two))
    assert costs.target.step_time_s == pytest.approx(0.0053, rel=0.1)  # the 8B's one-sequence step, measured
    assert costs.draft.step_time_s < costs.target.step_time_s / 2
    assert costs.max_batch == max(r["batch"] for r in two["rows"] if r["model"] == "llama-3.1-8b")
    one = {**two, "params": {"llama-3.1-8b": 1}}
    with pytest.raises(
        ProfileError, match=re.escape("a target and a draft must both be measured; measured: llama-3.1-8b")
    ):
        measured_costs(json.dumps(one))
    with pytest.raises(ProfileError, match="unreadable measurements"):
        measured_costs("{not json")


def test_no_forecast_before_enough_windows_measured_the_acceptance_per_position() -> None:
    costs = profile_costs(calibrated_text("h200-llama-3.1-8b-draft-1b"))
    assert scope_forecast(scope(MIN_WINDOWS - 1), costs, overlap=1, confidence=0.95) is None
    assert scope_forecast(ScopeEvidence(), costs, overlap=1, confidence=0.95) is None
    found = scope_forecast(scope(MIN_WINDOWS), costs, overlap=1, confidence=0.95)
    assert found is not None
    direct = forecast(
        costs.target, costs.draft, Acceptance(per_position=RATES, rounds=math.inf), Lengths(prompt=200, output=300)
    )
    assert found.point.load == pytest.approx(direct.point.load)


def test_the_interval_is_the_windows_spread_of_committed_tokens_and_overlapping_windows_count_once() -> None:
    spread = [2.6, 2.9, 2.7, 2.8, 2.65, 2.85]
    found = acceptance(scope(6, committed=spread), overlap=1)
    assert found is not None
    low, high = found.committed_bounds(0.95)
    standard_error = moments(spread).sd / math.sqrt(6)  # type: ignore[operator]
    assert (high - low) / 2 == pytest.approx(1.959964 * standard_error, rel=1e-4)
    overlapping = acceptance(scope(6, committed=spread), overlap=3)  # six windows, two windows' worth of requests
    assert overlapping is not None
    wide = overlapping.committed_bounds(0.95)
    assert (wide[1] - wide[0]) == pytest.approx((high - low) * math.sqrt(3), rel=1e-4)
    steady = acceptance(scope(6), overlap=1)
    assert steady is not None and steady.committed_bounds(0.95)[0] == pytest.approx(steady.committed)
