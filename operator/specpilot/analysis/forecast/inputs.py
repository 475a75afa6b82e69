"""A scope's forecast from what the pilot holds: the step costs of a profile, and the scope's evidence.

The step costs come from a calibrated profile's `cost` and `draft` sections, or from the measurements
`kubectl specpilot calibrate` wrote (fitted once per content: the larger model measured is the
target, the smaller the draft). The acceptance and lengths come from the scope's windows, once
MIN_WINDOWS of them measured the acceptance per draft position: the mean rate at each position, and
its uncertainty from the windows' spread of committed tokens per round (windows overlap, so
`Evidence.overlap` of them count as one), expressed as the rounds that give that spread.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, fields
from typing import Any

import yaml

from specpilot.analysis.evidence import Lengths as MeasuredLengths
from specpilot.analysis.evidence import ScopeEvidence
from specpilot.analysis.forecast.model import MAX_BATCH, Acceptance, Forecast, Lengths, forecast
from specpilot.wire.stepcost import Form, StepCost
from specpilot.wire.stepfit import fit, measured_steps

MIN_WINDOWS = 3  # windows that measured the acceptance per position before a scope is forecast


class ProfileError(ValueError):
    """Step costs that cannot be read; the message says why."""


@dataclass(frozen=True)
class Costs:
    """The target's and the draft's step costs, measured up to `max_batch`."""

    target: StepCost
    draft: StepCost
    max_batch: int = MAX_BATCH


def _cost(section: Any, name: str) -> StepCost:
    if not isinstance(section, dict) or "step_time_s" not in section:
        raise ProfileError(f"no {name} section with step_time_s")
    known = {field.name for field in fields(StepCost)}
    values = {key: float(value) for key, value in section.items() if key in known and key != "form"}
    return StepCost(form=Form(section.get("form", Form.ROOFLINE)), **values)


def profile_costs(text: str) -> Costs:
    """A calibrated profile's step costs (its YAML)."""
    data = yaml.safe_load(text)
    if not isinstance(data, dict):
        raise ProfileError("not a profile")
    return Costs(target=_cost(data.get("cost"), "cost"), draft=_cost(data.get("draft"), "draft"))


@functools.lru_cache(maxsize=8)
def measured_costs(text: str) -> Costs:
    """Step costs fitted to a calibration's measurements (its stepcost.json), once per content."""
    try:
        data = json.loads(text)
        models = sorted(data["params"], key=lambda model: data["params"][model])
        steps = {model: measured_steps(data, model) for model in models}
    except (ValueError, KeyError, TypeError) as error:
        raise ProfileError(f"unreadable measurements ({error})") from None
    measured = [model for model in models if steps[model]]
    if len(measured) < 2:
        raise ProfileError(f"a target and a draft must both be measured; measured: {', '.join(measured) or 'none'}")
    draft, target = measured[0], measured[-1]
    batch = max(step.batch for step in steps[target])
    return Costs(target=fit(steps[target]).cost, draft=fit(steps[draft]).cost, max_batch=batch)


def _mean_length(lengths: MeasuredLengths) -> float | None:
    """A lognormal's mean from the log-moments."""
    mu, sd = lengths.log.mean, lengths.log.sd
    return None if mu is None else math.exp(mu + (sd or 0.0) ** 2 / 2)


def acceptance(scope: ScopeEvidence, overlap: float) -> Acceptance | None:
    """The scope's acceptance per position, once MIN_WINDOWS windows measured it."""
    positions = scope.per_position
    if not positions or positions[0].n < MIN_WINDOWS:
        return None
    rates = tuple(min(1.0, max(0.0, p.mean or 0.0)) for p in positions)
    mean = sum(rates)
    per_round = sum((2 * i + 1) * p for i, p in enumerate(rates)) - mean * mean  # accepted drafts' variance
    spread = scope.acceptance_length.sd  # across windows
    windows = max(1.0, positions[0].n / max(overlap, 1.0))
    rounds = per_round / spread**2 * windows if spread and per_round > 0 else math.inf
    return Acceptance(per_position=rates, rounds=rounds)


def scope_forecast(scope: ScopeEvidence, costs: Costs, *, overlap: float, confidence: float) -> Forecast | None:
    """The scope's forecast, once its windows measured its acceptance per position and its lengths."""
    found = acceptance(scope, overlap)
    prompt, output = _mean_length(scope.prompt_tokens), _mean_length(scope.output_tokens)
    if found is None or prompt is None or output is None or output <= 1:
        return None
    lengths = Lengths(prompt=prompt, output=output)
    return forecast(costs.target, costs.draft, found, lengths, confidence=confidence, max_batch=costs.max_batch)
