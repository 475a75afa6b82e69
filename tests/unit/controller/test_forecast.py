"""Each scope's forecast in status: the step costs named, the Events of a missing profile and of measured
bands outside the forecast's interval, each once per change."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specpilot.analysis.evidence import Evidence
from specpilot.analysis.forecast.inputs import MIN_WINDOWS, profile_costs, scope_forecast
from specpilot.api.reasons import Reason
from specpilot.api.spec import Forecast as ForecastSpec
from specpilot.api.status import DecisionOutcome, ScopeDecision, ScopeStatus, SpeculationPilotStatus
from specpilot.controller.core.scope_forecasts import disagrees, forecast_scopes
from specpilot.wire.names import STEPCOST_KEY
from specpilot.wire.profiles import calibrated_text
from tests.unit.analysis.scope_evidence import scope

MEASURED = Path(__file__).resolve().parents[3] / "operator/specpilot/mockvllm/profiles/h200-stepcost.json"
PROFILE = ForecastSpec(profile="h200-llama-3.1-8b-draft-1b")
EVIDENCE = Evidence(scopes={"chat": scope(MIN_WINDOWS)})


def decided(low: float, high: float) -> ScopeDecision:
    return ScopeDecision(outcome=DecisionOutcome.ADOPT_IN_LOW_LOAD_WINDOWS, crossover_low=low, crossover_high=high)


def tick(spec: ForecastSpec | None, previous: SpeculationPilotStatus | None = None, **kwargs: object):  # type: ignore[no-untyped-def]
    scopes = [ScopeStatus(name="chat", **kwargs)]  # type: ignore[arg-type]
    return forecast_scopes(spec, config_map=None, evidence=EVIDENCE, scopes=scopes, previous=previous, confidence=0.95)


def test_a_scope_measured_enough_is_forecast_and_none_without_a_profile() -> None:
    found = tick(PROFILE)
    (chat,) = found.scopes
    assert chat.forecast is not None and chat.forecast.profile == "h200-llama-3.1-8b-draft-1b"
    assert chat.forecast.crossover_load is not None and chat.forecast.windows == MIN_WINDOWS
    assert not chat.forecast.disagrees and found.events == () and found.problem is None
    assert tick(None, forecast=chat.forecast).scopes[0].forecast is None


def test_bands_outside_the_interval_say_the_profile_does_not_describe_the_pods_once() -> None:
    first = tick(PROFILE, decision=decided(2.0, 10.0))
    forecast = first.scopes[0].forecast
    assert forecast is not None and forecast.disagrees and (forecast.measured_low, forecast.measured_high) == (2, 10)
    assert [event.reason for event in first.events] == [Reason.FORECAST_DISAGREES]
    assert "the profile does not describe these pods" in first.events[0].message
    landed = SpeculationPilotStatus(scopes=first.scopes)
    assert tick(PROFILE, landed, decision=decided(2.0, 10.0)).events == ()
    point = forecast.crossover_load
    assert point is not None
    agreeing = tick(PROFILE, decision=decided(point / 2, point * 2)).scopes[0].forecast
    assert agreeing is not None and not agreeing.disagrees, "a bracket holding the interval agrees"


def test_a_bracket_disagrees_only_when_wholly_on_one_side_of_the_interval() -> None:
    costs = profile_costs(calibrated_text("h200-llama-3.1-8b-draft-1b"))
    full = scope_forecast(scope(MIN_WINDOWS), costs, overlap=1, confidence=0.95)
    assert full is not None and full.point.load is not None
    load = full.point.load
    assert disagrees(full, (load * 2, load * 3)) and disagrees(full, (load / 3, load / 2))
    assert not disagrees(full, (load, load)) and not disagrees(full, (load / 2, load * 2))
    assert not disagrees(full, None)


def test_a_missing_or_unfittable_config_map_is_a_problem_named_once_and_no_forecast() -> None:
    spec = ForecastSpec(configMap="calibration")
    missing = tick(spec)
    assert missing.problem is not None and "ConfigMap calibration not found" in missing.problem
    assert "kubectl specpilot calibrate calibration" in missing.problem
    assert [event.reason for event in missing.events] == [Reason.FORECAST_UNAVAILABLE]
    assert missing.scopes[0].forecast is None
    again = tick(spec, SpeculationPilotStatus(forecast_problem=missing.problem))
    assert again.events == () and again.problem == missing.problem
    broken = forecast_scopes(
        spec,
        config_map={"data": {STEPCOST_KEY: "{}"}},
        evidence=EVIDENCE,
        scopes=[ScopeStatus(name="chat")],
        previous=None,
        confidence=0.95,
    )
    assert broken.problem is not None and "unreadable measurements" in broken.problem


def test_a_calibration_config_map_is_fitted_and_forecasts_as_the_profile_built_from_the_same_steps() -> None:
    data = json.loads(MEASURED.read_text())
    pair = {"llama-3.1-8b", "eagle-head-8b"}
    rows = [row for row in data["rows"] if row["model"] in pair]
    text = json.dumps({**data, "params": {m: data["params"][m] for m in pair}, "rows": rows})
    found = forecast_scopes(
        ForecastSpec(configMap="calibration"),
        config_map={"data": {STEPCOST_KEY: text}},
        evidence=EVIDENCE,
        scopes=[ScopeStatus(name="chat")],
        previous=None,
        confidence=0.95,
    )
    forecast = found.scopes[0].forecast
    assert found.problem is None and forecast is not None and forecast.profile == "configmap/calibration"
    built = tick(ForecastSpec(profile="h200-llama-3.1-8b-eagle")).scopes[0].forecast
    assert built is not None and built.crossover_load is not None
    # the same steps; the profile adds the draft's prompt cost, which its measurements leave out
    assert forecast.crossover_load == pytest.approx(built.crossover_load, rel=0.1)
