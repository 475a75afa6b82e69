"""The calibration's measuring code on this machine's GPU, with the shapes of Llama-3.1-8B (target) and
Llama-3.2-1B (draft): the code a calibration Job runs, in-process, with no weights. Prints the figures to
check first (decode steps over the batch, a 5-token verification against a decode step, the context's
share, the draft's cost against the target's, a prefill) and, given the H200 measurements, each beside
the same step there. Needs torch and a CUDA GPU.

    python bench/calibrate_gpu.py [--grid quick] [--out stepcost.json] \\
        [--compare ../shared/calibration/h200-stepcost.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from specpilot.calibrate.measure import plan, problems, run, shape_of

TARGET, DRAFT = "llama-3.1-8b", "llama-3.2-1b"
LLAMA = {"num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256, "model_type": "llama"}
CONFIGS = {
    TARGET: {**LLAMA, "hidden_size": 4096, "num_hidden_layers": 32, "intermediate_size": 14336},
    DRAFT: {**LLAMA, "hidden_size": 2048, "num_hidden_layers": 16, "intermediate_size": 8192, "head_dim": 64},
}
Step = tuple[str, int, int, int]  # model, batch, q, ctx
FIGURES: list[tuple[str, Step]] = [
    *((f"decode, batch {b}", (TARGET, b, 1, 1024)) for b in (1, 16, 64, 256)),
    *((f"verify 4 drafts, batch {b}", (TARGET, b, 5, 1024)) for b in (1, 64, 256)),
    *((f"decode, batch 64, ctx {c}", (TARGET, 64, 1, c)) for c in (256, 4096)),
    *((f"draft step, batch {b}", (DRAFT, b, 1, 1024)) for b in (1, 64, 256)),
    ("prefill 1024 tokens", (TARGET, 1, 1024, 0)),
]


def times(document: dict[str, Any]) -> dict[Step, float]:
    return {(r["model"], r["batch"], r["q"], r["ctx"]): float(r["ms"]) for r in document["rows"] if "ms" in r}


def table(measured: dict[str, Any], reference: dict[str, Any] | None) -> list[str]:
    """One line per figure: the step's time here, against the target's decode step at the same batch, and
    beside it the reference's time and theirs."""
    here, there = times(measured), times(reference) if reference else {}
    lines = [f"{measured['gpu']}, torch {measured['torch']}, {measured['elapsed_s']:.0f} s of measuring"]
    if reference:
        lines.append(f"reference: {reference['gpu']}, torch {reference['torch']}")
    for label, step in FIGURES:
        if step not in here:
            lines.append(f"  {label:<28} not measured")
            continue
        base = (TARGET, step[1], 1, 1024)  # the target's decode step at the same batch
        ratio = f"{here[step] / here[base]:5.2f}x its decode step" if base != step and base in here else " " * 20
        line = f"  {label:<28} {here[step]:8.2f} ms  {ratio}"
        if step in there:
            line += f"   reference {there[step]:8.2f} ms, here/there {here[step] / there[step]:.2f}"
        lines.append(line.rstrip())
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grid", default="quick", help="the measuring code's grid (quick, standard)")
    parser.add_argument("--out", type=Path, help="also keep the measurements in this file")
    parser.add_argument("--compare", type=Path, help="measurements to print beside these (h200-stepcost.json)")
    args = parser.parse_args()
    import torch  # noqa: PLC0415 - the measuring pod's dependency, not the project's

    if not torch.cuda.is_available():
        print(f"torch {torch.__version__} sees no CUDA device: this benchmark measures a GPU", file=sys.stderr)
        return 1
    models = {"target": (TARGET, shape_of(CONFIGS[TARGET])), "draft": (DRAFT, shape_of(CONFIGS[DRAFT]))}
    measured = run(
        models,
        plan(args.grid, roles=list(models)),
        device="cuda",
        reps=15,
        budget_s=600,
        progress=lambda line: print(line, file=sys.stderr, flush=True),
    )
    if args.out:
        args.out.write_text(json.dumps(measured, indent=1) + "\n")
    reference = json.loads(args.compare.read_text()) if args.compare else None
    print("\n".join(table(measured, reference)))
    return 1 if problems(measured) else 0


if __name__ == "__main__":
    sys.exit(main())
