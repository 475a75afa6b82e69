"""Step costs fitted to steps measured on a GPU (scipy's least squares on relative error).

The measurements are what a calibration writes: ``{"gpu", "params": {model: count}, "rows": [{"model",
"batch", "q", "ctx", "ms", ...}]}``, one row per step shape. A row with ``ctx`` 0 is a prefill of ``q``
tokens per sequence; any other row decodes (``q`` 1) or verifies ``q - 1`` draft tokens per sequence over
``ctx`` cached tokens each. Rows that carry an ``error`` instead of ``ms`` are left out.

Only what the rows tell apart is fitted: the context terms need rows at more than one context, the
draft-token cost needs rows with ``q`` above 1, the prefill cost prefill rows. What they cannot tell
apart keeps the value that leaves it inside another term (no context term: the per-sequence cost holds
the context the rows were measured at; no prefill rows: a prompt token costs what a draft token does).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from specpilot.wire.stepcost import Form, StepCost, step_seconds

# Starting points of the fit, in milliseconds (the knee and the attention floor are counts); several
# knees, as the error is not smooth in it. Parameters the rows cannot tell apart are held fixed.
_START_MS = {
    "step_time_s": 5.0,
    "per_seq_s": 0.01,
    "per_token_s": 0.02,
    "prefill_per_token_s": 0.02,
    "extra_token_s": 0.005,
    "per_context_token_s": 2e-5,
}
_KNEES = (8.0, 32.0, 128.0, 200.0)
_COUNTS = ("knee_tokens", "attention_min_seqs")


@dataclass(frozen=True)
class Measured:
    """One measured step: its shape and its time (seconds)."""

    model: str
    batch: int
    q: int
    ctx: int
    seconds: float

    @property
    def prefill(self) -> bool:
        return self.ctx == 0


def measured_steps(data: Mapping[str, Any], model: str) -> list[Measured]:
    """The rows of `model` that carry a time."""
    return [
        Measured(model=model, batch=int(r["batch"]), q=int(r["q"]), ctx=int(r["ctx"]), seconds=float(r["ms"]) / 1000)
        for r in data["rows"]
        if r["model"] == model and "ms" in r
    ]


def predicted(cost: StepCost, step: Measured) -> float:
    """The step time `cost` gives the measured step's shape."""
    if step.prefill:
        return step_seconds(cost, seqs=step.batch, tokens=0, prefill_tokens=step.batch * step.q)
    return step_seconds(
        cost,
        seqs=step.batch,
        tokens=step.batch * step.q,
        draft_tokens=step.batch * (step.q - 1),
        context_tokens=step.batch * step.ctx,
    )


@dataclass(frozen=True)
class Fit:
    """Fitted parameters, the relative error (predicted / measured - 1) of each row, and the condition
    number of the fit: how far apart the rows tell the free parameters, each relative to its value (the
    ratio of the largest to the smallest singular value of the Jacobian in relative parameters). Where it
    is large, parameters trade against each other along a valley of near-equal error, and the last bits
    of the arithmetic (which BLAS kernel the CPU runs) move them, while the predictions hardly move."""

    cost: StepCost
    steps: tuple[Measured, ...]
    errors: tuple[float, ...]
    condition: float

    @property
    def rms(self) -> float:
        return math.sqrt(sum(e * e for e in self.errors) / len(self.errors))

    @property
    def worst(self) -> float:
        return max(abs(e) for e in self.errors)


def _free(steps: Sequence[Measured], form: Form, context: bool) -> list[str]:
    names = ["step_time_s", "per_seq_s", "per_token_s"]
    decode = [s for s in steps if not s.prefill]
    if any(s.prefill for s in steps):
        names.append("prefill_per_token_s")
    if form is Form.ADDITIVE:
        names.append("knee_tokens")
        if any(s.q > 1 for s in decode):
            names.append("extra_token_s")
    if context and len({s.ctx for s in decode}) > 1:
        names += ["per_context_token_s", "attention_min_seqs"]
    return names


def _cost(names: Sequence[str], x: Sequence[float], form: Form) -> StepCost:
    values = {name: float(v) if name in _COUNTS else float(v) / 1000 for name, v in zip(names, x, strict=True)}
    cost = StepCost(form=form, **values)
    if "prefill_per_token_s" not in values:  # no prefill rows: a prompt token costs what a draft token does
        same = cost.extra_token_s if form is Form.ADDITIVE else cost.per_token_s
        cost = replace(cost, prefill_per_token_s=same)
    return cost


def fit(steps: Sequence[Measured], form: Form = Form.ADDITIVE, *, context: bool = True) -> Fit:
    """Least-squares fit of `form` to `steps` on relative error, the best of several starting knees;
    without `context`, no context term even where the rows hold several contexts."""
    names = _free(steps, form, context)
    measured = np.array([s.seconds for s in steps])

    def residuals(x: np.ndarray) -> np.ndarray:
        cost = _cost(names, list(x), form)
        out: np.ndarray = np.array([predicted(cost, s) for s in steps]) / measured - 1
        return out

    best = None
    for knee in _KNEES if "knee_tokens" in names else _KNEES[:1]:
        start = {**_START_MS, "knee_tokens": knee, "attention_min_seqs": 16.0}
        x0 = [start[name] for name in names]
        low = [1.0 if name == "attention_min_seqs" else 0.0 for name in names]
        found = least_squares(residuals, x0, bounds=(low, np.inf), x_scale=x0)
        if best is None or found.cost < best.cost:
            best = found
    assert best is not None
    cost = _cost(names, list(best.x), form)
    errors = tuple(predicted(cost, s) / s.seconds - 1 for s in steps)
    return Fit(cost=cost, steps=tuple(steps), errors=errors, condition=_condition(best.jac * best.x))


def _condition(relative_jacobian: np.ndarray) -> float:
    singular = np.linalg.svd(relative_jacobian, compute_uv=False)
    return float(singular[0] / singular[-1]) if singular[-1] > 0 else math.inf


def cost_fields(cost: StepCost, digits: int = 4) -> dict[str, float | str]:
    """`cost` as a profile section: every field, numbers to `digits` significant digits."""
    out: dict[str, float | str] = {}
    for field in fields(cost):
        value = getattr(cost, field.name)
        out[field.name] = str(value) if isinstance(value, Form) else float(f"{value:.{digits}g}")
    return out
