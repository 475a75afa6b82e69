"""The crossover forecast from a calibrated profile's step costs, against a direct open-loop sweep of the mock.

`specpilot.analysis.forecast.model` computes where the speculative arm's time per committed token rises through
the ordinary arm's (offered load, requests per second per replica) from the profile's target and draft
step costs, the acceptance and the lengths. The sweep runs the mock engine itself (`specpilot.mockvllm
.simulate`: its scheduler, its step-time accounting and its acceptance draws, in virtual time) for both
arms at each load on Poisson arrivals of fixed lengths, reads each arm's time per committed token as the
operator does (decode time over the tokens after each request's first, requests that end after the
warm-up), and finds the crossing between adjacent loads. Loads run from --low to --high times the
ordinary arm's load at batch --max-batch (the forecast's reach), in --points steps.

    .venv/bin/python bench/forecast_sweep.py --profile h200-llama-3.1-8b-draft-1b --alpha 0.7 --draft-tokens 4
    .venv/bin/python bench/forecast_sweep.py --profile h200-llama-3.1-8b-eagle --alpha 0.7 --draft-tokens 4

With --speedup-table DATASET it prints instead the forecast's speedup over batch (the speculative arm's
committed tokens per second over the ordinary arm's, each with that many requests in flight) at batches 1
to 128, on the dataset's mean lengths in SpecDecode-Bench (arXiv 2601.11580, vLLM on one H100, 3 drafts
per round), at that study's measured EAGLE acceptance (also on the study's own H100 step-cost fit) and at
--alpha with --draft-tokens, beside the study's measured EAGLE speedups on Llama-3.1-8B (`PUBLISHED`; it
has no draft-model curve for that target):

    .venv/bin/python bench/forecast_sweep.py --profile h200-llama-3.1-8b-eagle --speedup-table sharegpt
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from specpilot.analysis.bands import first_crossing
from specpilot.analysis.forecast.model import Acceptance, Lengths, batch_speedups, crossing, speedups
from specpilot.mockvllm import simulate
from specpilot.mockvllm.profile import calibrated_names, parse_profile
from specpilot.wire.stepcost import Form, StepCost


@dataclass(frozen=True)
class Published:
    """One dataset of SpecDecode-Bench's Llama-3.1-8B-Instruct runs (vLLM 0.10.1, one H100, 3 drafts per round).
    Lengths and EAGLE's committed tokens per round: from github.com/SpecDecode-Bench/simulator (commit
    2fdccbd) data/llama3.1-8B/combined_DATASET.jsonl, the measured accepted span at each output position
    walked with at most 3 drafts per round (every request). Speedups (throughput with EAGLE over without, by
    batch): the data points of the paper's end-to-end figure, as drawn in the vector figure
    github.com/SpecDecode-Bench/specdecode-bench.github.io (commit fb0e242) assets/img/fig1.pdf."""

    prompt: float
    output: float
    committed: float
    eagle: Mapping[int, float]


PUBLISHED = {
    "gsm8k": Published(prompt=94.5, output=165.4, committed=2.391, eagle={1: 1.731, 16: 1.678, 64: 1.466, 128: 1.214}),
    "sharegpt": Published(
        prompt=355.3, output=740.2, committed=2.254, eagle={1: 1.679, 16: 1.668, 64: 1.535, 128: 1.291}
    ),
    "cnn": Published(prompt=837.5, output=322.1, committed=2.329, eagle={1: 1.444, 16: 1.397, 64: 1.275, 128: 1.144}),
    "instructcoder": Published(
        prompt=171.2, output=250.3, committed=2.348, eagle={1: 1.973, 16: 1.854, 64: 1.538, 128: 1.298}
    ),
}
PUBLISHED_DRAFTS = 3

# The study's own fit of its H100 steps (github.com/SpecDecode-Bench/simulator, commit 2fdccbd,
# predictor.py Llama8BH100, "fitted with instructcoder bs=1,8,16,32,64"): a target step is
# kv * cached tokens + compute * batched tokens + fixed, each step adds a fixed overhead beyond the
# forward pass, and an EAGLE round of 3 drafts costs kv * cached tokens + per token * 4 + fixed, whatever the batch.
_TARGET_KV, _TARGET_COMPUTE, _TARGET_FIXED, _STEP_OVERHEAD = (
    3.92645679e-08,
    2.10103129e-05,
    5.88590713e-03,
    1.20683946e-03,
)
_DRAFT_KV, _DRAFT_PER_TOKEN, _DRAFT_FIXED = 2.37768493e-09, 8.41429603e-07, 2.13526175e-03
H100_TARGET = StepCost(
    form=Form.ADDITIVE,
    step_time_s=_TARGET_FIXED + _TARGET_COMPUTE + _STEP_OVERHEAD,
    per_seq_s=_TARGET_COMPUTE,
    extra_token_s=_TARGET_COMPUTE,
    prefill_per_token_s=_TARGET_COMPUTE,
    per_context_token_s=_TARGET_KV,
)
H100_EAGLE = StepCost(  # one of the round's 3 draft steps
    form=Form.ADDITIVE,
    step_time_s=(_DRAFT_FIXED + _DRAFT_PER_TOKEN * (PUBLISHED_DRAFTS + 1)) / PUBLISHED_DRAFTS,
    per_context_token_s=_DRAFT_KV / PUBLISHED_DRAFTS,
)
EAGLE_PROFILE = "h200-llama-3.1-8b-eagle"  # the profile whose draft is EAGLE's kind
TABLE_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)


def speedup_table(args: argparse.Namespace) -> None:
    """The forecast's speedup over batch on a SpecDecode-Bench dataset's lengths, beside the study's: for
    the EAGLE-style profile at EAGLE's measured acceptance too, and with the study's H100 step-cost fit in
    place of the profile's, each with its ratio to the study's measured figure."""
    profile = parse_profile({"calibrated": args.profile})
    assert profile.draft is not None
    data = PUBLISHED[args.speedup_table]
    lengths = Lengths(prompt=data.prompt, output=data.output)

    def curve(target: StepCost, draft: StepCost, k: int, committed: float) -> list[float]:
        found = batch_speedups(target, draft, k=k, committed=committed, lengths=lengths, batches=TABLE_BATCHES)
        return [speedup for _, speedup in found]

    assumed_committed = Acceptance.geometric(args.alpha, args.draft_tokens).committed
    assumed = curve(profile.cost, profile.draft, args.draft_tokens, assumed_committed)
    eagle = args.profile == EAGLE_PROFILE
    print(
        f"{args.profile} on {args.speedup_table}'s mean lengths (prompt {data.prompt}, output {data.output}): "
        "speculative over ordinary committed tokens per second, each arm with `batch` requests in flight"
    )
    if not eagle:
        print(f"at alpha {args.alpha} with {args.draft_tokens} drafts ({assumed_committed:.3f} committed per round);")
        print("the study has no draft-model curve for Llama-3.1-8B")
        print(f"{'batch':>6} {'assumed':>8}")
        for batch, at_alpha in zip(TABLE_BATCHES, assumed, strict=True):
            print(f"{batch:6d} {at_alpha:8.3f}")
        return
    measured = curve(profile.cost, profile.draft, PUBLISHED_DRAFTS, data.committed)
    h100 = curve(H100_TARGET, H100_EAGLE, PUBLISHED_DRAFTS, data.committed)
    print(
        f"forecast: the profile's step costs at EAGLE's measured acceptance ({PUBLISHED_DRAFTS} drafts, "
        f"{data.committed} committed per round); h100: the study's H100 step-cost fit, same acceptance; "
        f"paper: EAGLE measured on one H100; assumed: the profile at alpha {args.alpha} with "
        f"{args.draft_tokens} drafts ({assumed_committed:.3f})"
    )
    print(f"{'batch':>6} {'forecast':>9} {'h100':>7} {'paper':>7} {'ratio':>7} {'h100/p':>7} {'assumed':>8}")
    for batch, forecast, fit, at_alpha in zip(TABLE_BATCHES, measured, h100, assumed, strict=True):
        published = data.eagle.get(batch)
        shown = (
            ("-", "-", "-")
            if published is None
            else (f"{published:.3f}", f"{forecast / published:.3f}", f"{fit / published:.3f}")
        )
        print(f"{batch:6d} {forecast:9.3f} {fit:7.3f} {shown[0]:>7} {shown[1]:>7} {shown[2]:>7} {at_alpha:8.3f}")


def run(args: argparse.Namespace, *, speculative: bool, load: float, seed: int) -> tuple[float, float]:
    """One arm at one load: (time per committed token, mean decoding batch by Little's law)."""
    profile = {"calibrated": args.profile, "acceptance": {"default": args.alpha}}
    spec = {"method": args.method, "model": "draft", "num_speculative_tokens": args.draft_tokens}
    lengths = itertools.repeat((args.prompt, args.output))
    arrivals = simulate.poisson([load], args.seconds, scope="s", lengths=lengths, rng=random.Random(seed))
    engine = simulate.engine(profile, spec if speculative else None, seed=seed)
    served = [s for s in simulate.serve(engine, arrivals, until=args.seconds) if s.end >= args.warm_up]
    tokens = sum(s.output_tokens - 1 for s in served)
    decoding = [s.end - s.first_token for s in served]
    return sum(decoding) / tokens, load * statistics.fmean(decoding)


def sweep(
    args: argparse.Namespace, loads: Sequence[float], forecast: Sequence[tuple[float, float, float]]
) -> list[tuple[float, float, float, float]]:
    """(load, ordinary tpct, speculative tpct, ordinary batch) per load, each the mean of --seeds runs,
    printed beside the forecast's ordinary batch and speedup there."""
    out = []
    for load, (_, batch, speedup) in zip(loads, forecast, strict=True):
        ordinary = [run(args, speculative=False, load=load, seed=seed) for seed in range(args.seeds)]
        spec = [run(args, speculative=True, load=load, seed=seed) for seed in range(args.seeds)]
        out.append(
            (
                load,
                statistics.fmean(t for t, _ in ordinary),
                statistics.fmean(t for t, _ in spec),
                statistics.fmean(b for _, b in ordinary),
            )
        )
        row = out[-1]
        print(
            f"{load:8.3f} {row[3]:8.1f} {row[1] * 1000:10.3f} {row[2] * 1000:10.3f} {row[1] / row[2]:8.3f}"
            f" {batch:9.1f} {speedup:9.3f}",
            flush=True,
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", choices=calibrated_names(), default="h200-llama-3.1-8b-draft-1b")
    parser.add_argument(
        "--method", default="draft_model", help="the --speculative-config method (costs: the profile's)"
    )
    parser.add_argument("--alpha", type=float, default=0.7)
    parser.add_argument("--draft-tokens", type=int, default=4)
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--output", type=int, default=1792)
    parser.add_argument("--seconds", type=float, default=150.0, help="model seconds of arrivals per arm and load")
    parser.add_argument("--warm-up", type=float, default=40.0, help="model seconds left out at the start")
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--max-batch", type=int, default=256)
    parser.add_argument("--low", type=float, default=0.3)
    parser.add_argument("--high", type=float, default=1.0)
    parser.add_argument("--points", type=int, default=15)
    parser.add_argument(
        "--speedup-table",
        choices=sorted(PUBLISHED),
        help="print the forecast's speedup over batch beside SpecDecode-Bench's on this dataset instead",
    )
    args = parser.parse_args()
    if args.speedup_table is not None:
        speedup_table(args)
        return
    profile = parse_profile({"calibrated": args.profile})
    assert profile.draft is not None
    lengths = Lengths(prompt=args.prompt, output=args.output)
    acceptance = Acceptance.geometric(args.alpha, args.draft_tokens)
    found = crossing(
        profile.cost,
        profile.draft,
        k=args.draft_tokens,
        committed=acceptance.committed,
        lengths=lengths,
        max_batch=args.max_batch,
    )
    where = (
        "none" if found.load is None else f"{found.load:.3f} requests/s per replica (ordinary batch {found.batch:.1f})"
    )
    print(
        f"{args.profile}, alpha {args.alpha}, {args.draft_tokens} draft tokens, prompt {args.prompt}, "
        f"output {args.output}: forecast crossover {where}; reach (ordinary batch {args.max_batch}) {found.reach:.3f}"
    )
    loads = [found.reach * (args.low + (args.high - args.low) * i / (args.points - 1)) for i in range(args.points)]
    predicted = speedups(
        profile.cost, profile.draft, k=args.draft_tokens, committed=acceptance.committed, lengths=lengths, loads=loads
    )
    print("swept (ordinary batch by Little's law, ms per committed token) | forecast")
    print(f"{'load':>8} {'batch':>8} {'ord ms':>10} {'spec ms':>10} {'speedup':>8} {'batch':>9} {'speedup':>9}")
    rows = sweep(args, loads, predicted)
    measured = first_crossing([(load, spec - ordinary) for load, ordinary, spec, _ in rows])
    if measured is None:
        print(f"sweep: no crossover between {loads[0]:.3f} and {loads[-1]:.3f}")
    else:
        off = "" if found.load is None else f", {measured / found.load - 1:+.1%} from the forecast"
        print(f"sweep: crossover {measured:.3f} requests/s per replica{off}")


if __name__ == "__main__":
    main()
