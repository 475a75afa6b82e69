"""Step costs fitted to measured steps: the committed H200 data, and parameters recovered from known ones."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import pytest
import yaml

from specpilot.wire.stepcost import Form, StepCost
from specpilot.wire.stepfit import Measured, cost_fields, fit, measured_steps, predicted


def numbers(section: dict[str, Any]) -> dict[str, Any]:
    """A cost section's numbers (its form left out), for comparison within a tolerance."""
    return {k: v for k, v in section.items() if k != "form"}


PROFILES = resources.files("specpilot.mockvllm").joinpath("profiles")
DATA = json.loads(PROFILES.joinpath("h200-stepcost.json").read_text())


@pytest.mark.parametrize(
    ("model", "rows", "rms", "worst"),
    [("llama-3.1-8b", 79, 0.05, 0.10), ("qwen2.5-32b", 15, 0.08, 0.10), ("llama-3.2-1b", 9, 0.05, 0.10)],
)
def test_the_additive_form_fits_the_measured_h200_steps(model: str, rows: int, rms: float, worst: float) -> None:
    found = fit(measured_steps(DATA, model))
    assert len(found.steps) == rows
    assert found.rms <= rms and found.worst <= worst


def test_on_the_8b_grid_the_roofline_and_a_form_without_context_fit_worse_than_the_chosen_form() -> None:
    steps = measured_steps(DATA, "llama-3.1-8b")
    chosen = fit(steps)
    assert fit(steps, Form.ROOFLINE).worst > 2 * chosen.worst
    assert fit(steps, Form.ADDITIVE, context=False).worst > 2 * chosen.worst


def test_the_fit_recovers_the_parameters_that_made_the_steps() -> None:
    made = StepCost(
        form=Form.ADDITIVE,
        step_time_s=0.004,
        per_seq_s=2e-5,
        extra_token_s=1e-5,
        prefill_per_token_s=1.5e-5,
        per_token_s=3e-5,
        knee_tokens=150,
        per_context_token_s=3e-8,
        attention_min_seqs=12,
    )
    shapes = [(b, q, c) for b in (1, 4, 16, 64, 256) for q in (1, 3, 5) for c in (256, 2048)]
    shapes += [(1, 512, 0), (4, 512, 0)]
    steps = [Measured(model="m", batch=b, q=q, ctx=c, seconds=0.0) for b, q, c in shapes]
    steps = [Measured(model="m", batch=s.batch, q=s.q, ctx=s.ctx, seconds=predicted(made, s)) for s in steps]
    found = fit(steps)
    assert found.worst < 1e-3
    assert numbers(cost_fields(found.cost)) == pytest.approx(numbers(cost_fields(made)), rel=0.02)


def profile(name: str) -> Any:
    return yaml.safe_load(PROFILES.joinpath(f"{name}.yaml").read_text())


def cost(section: dict[str, Any]) -> StepCost:
    return StepCost(**{**section, "form": Form(section["form"])})


# A fit whose condition number is below this tells each parameter apart from the others, so the last
# bits of the arithmetic (which BLAS kernel the CPU runs) move its parameters by far less than 1e-3.
WELL_CONDITIONED = 1e4
# The committed profile predicts the measured steps as a fresh fit does, to this relative difference.
SAME_PREDICTION = 1e-3


@pytest.mark.parametrize(
    ("name", "model", "section", "rms", "worst"),
    [
        ("h200-llama-3.1-8b-draft-1b", "llama-3.1-8b", "cost", 0.05, 0.10),
        ("h200-llama-3.1-8b-draft-1b", "llama-3.2-1b", "draft", 0.05, 0.10),
        ("h200-llama-3.1-8b-eagle", "llama-3.1-8b", "cost", 0.05, 0.10),
        ("h200-llama-3.1-8b-eagle", "eagle-head-8b", "draft", 0.05, 0.10),
        ("h200-qwen2.5-32b", "qwen2.5-32b", "cost", 0.08, 0.10),
        ("h200-qwen2.5-32b", "llama-3.2-1b", "draft", 0.05, 0.10),
    ],
)
def test_the_calibrated_profiles_predict_the_committed_measurements_as_a_fresh_fit_does(
    name: str, model: str, section: str, rms: float, worst: float
) -> None:
    committed = profile(name)[section]
    assert committed["form"] == "additive"
    steps = measured_steps(DATA, model)
    fresh = fit(steps)
    held = [predicted(cost(committed), step) for step in steps]
    assert held == pytest.approx([predicted(fresh.cost, step) for step in steps], rel=SAME_PREDICTION)
    errors = [p / step.seconds - 1 for p, step in zip(held, steps, strict=True)]
    assert (sum(e * e for e in errors) / len(errors)) ** 0.5 <= rms and max(map(abs, errors)) <= worst
    if fresh.condition < WELL_CONDITIONED:
        fitted = numbers(cost_fields(fresh.cost))
        if section == "draft":  # not measured: from the target's and the parameter counts
            fitted.pop("prefill_per_token_s")
        assert {k: v for k, v in numbers(committed).items() if k in fitted} == pytest.approx(fitted, rel=1e-3)


@pytest.mark.parametrize(
    ("model", "well_conditioned"),
    [("llama-3.1-8b", True), ("qwen2.5-32b", True), ("llama-3.2-1b", True), ("eagle-head-8b", False)],
)
def test_the_condition_number_tells_which_fits_pin_their_parameters(model: str, well_conditioned: bool) -> None:
    """The EAGLE head's steps reach past the knee at one batch only, so its per-token cost and its knee
    trade against each other: every kernel finds the same predictions, but not the same parameters."""
    assert (fit(measured_steps(DATA, model)).condition < WELL_CONDITIONED) is well_conditioned
