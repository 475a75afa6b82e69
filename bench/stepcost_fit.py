"""How well each step-cost form fits steps measured on a GPU, and the calibrated profiles built from them.

Prints, per model and form, the rows fitted, the rms and worst relative error and the fitted parameters
(`specpilot.wire.stepfit`: scipy's least squares on relative error), then every row measured against
what each form predicts. Forms: the mock's original roofline, the additive form with a knee and a
context term, and the additive form without the context term (where the rows hold several contexts).
With --write DIR, writes the calibrated mock profiles (`specpilot.mockvllm.profiles`) from the fits.

    .venv/bin/python bench/stepcost_fit.py [--data operator/specpilot/mockvllm/profiles/h200-stepcost.json]
        [--write operator/specpilot/mockvllm/profiles]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from specpilot.wire.stepcost import Form, StepCost
from specpilot.wire.stepfit import Fit, cost_fields, fit, measured_steps, predicted

DATA = Path(__file__).resolve().parent.parent / "operator/specpilot/mockvllm/profiles/h200-stepcost.json"
GIB = 1 << 30

# name: (target, draft, what the model section says, target and draft memory), from the models' shapes:
# weights in bf16 with the embedding table, KV bytes per token = layers x KV heads x head dim x 2 x 2.
PROFILES: dict[str, tuple[str, str, dict[str, Any], tuple[float, int], tuple[float, int]]] = {
    "h200-llama-3.1-8b-draft-1b": (
        "llama-3.1-8b",
        "llama-3.2-1b",
        {"max_model_len": 131072, "params_billion": 8.03},
        (8.03e9 * 2 / GIB, 131072),
        (1.236e9 * 2 / GIB, 32768),
    ),
    "h200-llama-3.1-8b-eagle": (
        "llama-3.1-8b",
        "eagle-head-8b",
        {"max_model_len": 131072, "params_billion": 8.03},
        (8.03e9 * 2 / GIB, 131072),
        (0.743e9 * 2 / GIB, 4096),
    ),
    "h200-qwen2.5-32b": (
        "qwen2.5-32b",
        "llama-3.2-1b",
        {"max_model_len": 32768, "params_billion": 32.76},
        (32.76e9 * 2 / GIB, 262144),
        (1.236e9 * 2 / GIB, 32768),
    ),
}


def fits(data: Mapping[str, Any]) -> dict[str, dict[str, Fit]]:
    """Per model, per form label: the fit to its rows."""
    out: dict[str, dict[str, Fit]] = {}
    for model in data["params"]:
        steps = measured_steps(data, model)
        found = {str(form): fit(steps, form) for form in Form}
        if len({s.ctx for s in steps if not s.prefill}) > 1:
            found["additive, no context term"] = fit(steps, Form.ADDITIVE, context=False)
        out[model] = found
    return out


def draft_cost(data: Mapping[str, Any], target: StepCost, target_model: str, draft: Fit) -> dict[str, float | str]:
    """The draft's fitted steps; its prefill (never measured) costs the target's compute-bound prompt token
    scaled by the draft's share of the parameters."""
    share = data["params"][draft.steps[0].model] / data["params"][target_model]
    prefill = (target.prefill_per_token_s + target.per_token_s) * share
    return {**cost_fields(draft.cost), "prefill_per_token_s": float(f"{prefill:.4g}")}


def profile(data: Mapping[str, Any], name: str, found: Mapping[str, Mapping[str, Fit]]) -> dict[str, Any]:
    target, draft, model, (weights, kv), (draft_weights, draft_kv) = PROFILES[name]
    chosen = found[target][str(Form.ADDITIVE)]
    return {
        "provenance": {
            "gpu": data["gpu"],
            "date": data["date"],
            "torch": data["torch"],
            "data": "h200-stepcost.json",
            "target": f"{target}: {data['shapes'][target]}",
            "draft": f"{draft}: {data['shapes'][draft]}",
            "method": "cost and draft: the additive form fitted to the measured steps (bench/stepcost_fit.py, "
            "scipy least squares on relative error); the draft's prefill is not measured: the target's "
            "compute-bound prompt token times the draft's share of the parameters. memory: from the shapes.",
        },
        "model": model,
        "cost": cost_fields(chosen.cost),
        "draft": draft_cost(data, chosen.cost, target, found[draft][str(Form.ADDITIVE)]),
        "memory": {
            "gpu_memory_gib": 131.0,
            "weights_gib": round(weights, 2),
            "kv_bytes_per_token": kv,
            "draft_weights_gib": round(draft_weights, 2),
            "draft_kv_bytes_per_token": draft_kv,
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--write", type=Path, default=None, help="write the calibrated profiles into this folder")
    args = parser.parse_args()
    data = json.loads(args.data.read_text())
    found = fits(data)
    print(f"{'model':<15} {'form':<27} {'rows':>4} {'rms':>6} {'worst':>6}  parameters (ms; knee, floor: counts)")
    for model, by_form in found.items():
        for label, result in by_form.items():
            shown = {
                k: v if k in ("knee_tokens", "attention_min_seqs") else v * 1000
                for k, v in cost_fields(result.cost).items()
                if not isinstance(v, str)
            }
            params = ", ".join(f"{k.removesuffix('_s')} {v:.4g}" for k, v in shown.items())
            print(f"{model:<15} {label:<27} {len(result.steps):>4} {result.rms:>6.1%} {result.worst:>6.1%}  {params}")
    for model, by_form in found.items():
        labels = list(by_form)
        print(f"\n{model}: measured ms against each form's prediction (error)")
        print(f"{'batch':>5} {'q':>5} {'ctx':>5} {'measured':>9}  " + "  ".join(f"{label:>28}" for label in labels))
        for index, step in enumerate(next(iter(by_form.values())).steps):
            cells = []
            for label in labels:
                result = by_form[label]
                cells.append(f"{predicted(result.cost, step) * 1000:>19.3f} ({result.errors[index]:+6.1%})")
            print(f"{step.batch:>5} {step.q:>5} {step.ctx:>5} {step.seconds * 1000:>9.3f}  " + "  ".join(cells))
    if args.write is not None:
        for name in PROFILES:
            header = (
                f"# Calibrated mock profile {name}: written by bench/stepcost_fit.py --write from h200-stepcost.json.\n"
            )
            text = yaml.safe_dump(profile(data, name, found), sort_keys=False, width=120)
            (args.write / f"{name}.yaml").write_text(header + text)
            print(f"wrote {args.write / name}.yaml")


if __name__ == "__main__":
    main()
