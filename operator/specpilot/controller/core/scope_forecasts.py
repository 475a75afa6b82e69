"""Each scope's crossover forecast in status, and the Events that say when it cannot be made or is wrong.

Pure: the shell hands over spec.analysis.forecast's ConfigMap as it read it (a calibrated profile is
package data); the step costs are fitted once per content (`analysis.forecast.inputs.measured_costs`).
A scope is forecast once its windows measured enough (`MIN_WINDOWS`); the crossover its bands measured
(its decision's, or the curves' so far) outside the forecast's interval is a finding: the profile
does not describe these pods. Events come from transitions alone, read from the previous status.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specpilot.analysis.decision import crossover_point
from specpilot.analysis.evidence import Evidence
from specpilot.analysis.forecast.inputs import Costs, ProfileError, measured_costs, profile_costs, scope_forecast
from specpilot.analysis.forecast.model import Crossing, Forecast
from specpilot.analysis.rollout import Event, EventType
from specpilot.api.reasons import Reason
from specpilot.api.spec import Forecast as ForecastSpec
from specpilot.api.status import ScopeForecast, ScopeStatus, SpeculationPilotStatus
from specpilot.wire.names import STEPCOST_KEY
from specpilot.wire.profiles import calibrated_text


@dataclass(frozen=True)
class ForecastTick:
    """The scopes with their forecasts, why none could be made (None: it could), and the Events."""

    scopes: list[ScopeStatus]
    problem: str | None
    events: tuple[Event, ...]


def profile_label(spec: ForecastSpec) -> str:
    return spec.profile if spec.profile is not None else f"configmap/{spec.config_map}"


def costs(spec: ForecastSpec, config_map: Mapping[str, Any] | None) -> Costs | str:
    """The step costs spec.analysis.forecast names, or why they cannot be read, with the fix."""
    if spec.profile is not None:
        return profile_costs(calibrated_text(spec.profile))
    name = spec.config_map
    fix = f"run `kubectl specpilot calibrate {name}` in the pilot's namespace, or set spec.analysis.forecast.profile"
    text = ((config_map or {}).get("data") or {}).get(STEPCOST_KEY)
    if config_map is None:
        return f"spec.analysis.forecast.configMap: ConfigMap {name} not found or not readable; {fix}"
    if not isinstance(text, str):
        return f"spec.analysis.forecast.configMap: ConfigMap {name} holds no {STEPCOST_KEY}; {fix}"
    try:
        return measured_costs(text)
    except ProfileError as error:
        return f"spec.analysis.forecast.configMap: ConfigMap {name} {STEPCOST_KEY}: {error}; {fix}"


def _figure(value: float | None) -> float | None:
    """Four significant digits: status moves when a forecast does, not with each window's rounding."""
    return None if value is None else float(f"{value:.4g}")


def _load(crossing: Crossing) -> str:
    return "never" if crossing.load == 0 else f"{crossing.load:.3g}" if crossing.load is not None else "none"


def disagrees(found: Forecast, measured: tuple[float, float] | None) -> bool:
    """The measured crossover (a load, or the bracket it lies in) lies wholly outside the forecast's
    interval: every load of the bracket disagrees, and the bracket does not hold the whole interval."""
    if measured is None:
        return False
    low, high = measured
    top = found.high.load if found.high.load is not None else math.inf
    bottom = found.low.load if found.low.load is not None else found.low.reach
    holds = low < bottom and high > top
    return found.disagrees(low) and found.disagrees(high) and not holds


def scope_status(
    found: Forecast, *, profile: str, costs: Costs, windows: int, measured: tuple[float, float] | None
) -> ScopeForecast:
    """A scope's forecast as status says it."""
    point, low, high = found.point, found.low, found.high
    wrong = disagrees(found, measured)
    if point.load is None:
        said = f"speculation still pays at batch {costs.max_batch} ({point.reach:.3g} requests/s per replica)"
    else:
        said = f"speculation stops paying near {point.load:.3g} requests/s per replica"
    upper = f"to {_load(high)}" if high.load is not None else f"up to batch {costs.max_batch}"
    message = (
        f"forecast from {profile}: {said} ({_load(low)} {upper} at {found.confidence:.0%}), at "
        f"{point.committed:.2f} committed tokens per round over {windows} windows"
    )
    if measured is not None:
        verdict = "outside its interval: the profile does not describe these pods" if wrong else "within it"
        bands = (
            f"{measured[0]:.3g}" if measured[0] == measured[1] else f"between {measured[0]:.3g} and {measured[1]:.3g}"
        )
        message += f"; the bands measured it {bands}, {verdict}"
    return ScopeForecast(
        profile=profile,
        crossover_load=_figure(point.load),
        crossover_low=_figure(low.load),
        crossover_high=_figure(high.load),
        reach=_figure(point.reach) or 0.0,
        max_batch=costs.max_batch,
        committed=_figure(point.committed) or 1.0,
        windows=windows,
        measured_low=measured[0] if measured else None,
        measured_high=measured[1] if measured else None,
        disagrees=wrong,
        message=message,
    )


def forecast_scopes(
    spec: ForecastSpec | None,
    *,
    config_map: Mapping[str, Any] | None,
    evidence: Evidence,
    scopes: Sequence[ScopeStatus],
    previous: SpeculationPilotStatus | None,
    confidence: float,
) -> ForecastTick:
    """The scopes with their forecasts from `spec`'s step costs (`config_map`: its ConfigMap as read)."""
    if spec is None:
        return ForecastTick([scope.model_copy(update={"forecast": None}) for scope in scopes], None, ())
    found = costs(spec, config_map)
    before = previous.forecast_problem if previous is not None else None
    if isinstance(found, str):
        said = () if found == before else (Event(EventType.WARNING, Reason.FORECAST_UNAVAILABLE, found),)
        return ForecastTick([scope.model_copy(update={"forecast": None}) for scope in scopes], found, said)
    was = {scope.name: scope.forecast for scope in previous.scopes} if previous is not None else {}
    out: list[ScopeStatus] = []
    events: list[Event] = []
    for scope in scopes:
        forecast = _forecast(scope, spec, found, evidence, confidence)
        old = was.get(scope.name)
        if (
            forecast is not None
            and forecast.disagrees
            and not (old and old.disagrees and old.profile == forecast.profile)
        ):
            events.append(
                Event(EventType.WARNING, Reason.FORECAST_DISAGREES, f"scope {scope.name}: {forecast.message}")
            )
        out.append(scope.model_copy(update={"forecast": forecast}))
    return ForecastTick(out, None, tuple(events))


def _forecast(
    scope: ScopeStatus, spec: ForecastSpec, costs: Costs, evidence: Evidence, confidence: float
) -> ScopeForecast | None:
    record = evidence.scopes.get(scope.name)
    found = scope_forecast(record, costs, overlap=evidence.overlap, confidence=confidence) if record else None
    if record is None or found is None:
        return None
    measured = _measured(scope, evidence)
    windows = record.per_position[0].n
    return scope_status(found, profile=profile_label(spec), costs=costs, windows=windows, measured=measured)


def _measured(scope: ScopeStatus, evidence: Evidence) -> tuple[float, float] | None:
    """The crossover the scope's bands measured: its decision's load or bracket, else the curves' so far."""
    decision = scope.decision
    if decision is not None and decision.crossover_load is not None:
        return decision.crossover_load, decision.crossover_load
    if decision is not None and decision.crossover_low is not None and decision.crossover_high is not None:
        return decision.crossover_low, decision.crossover_high
    point = crossover_point(evidence, scope.name)
    return None if point is None else (point, point)
