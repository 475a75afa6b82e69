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
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
from collections.abc import Sequence

from specpilot.analysis.bands import first_crossing
from specpilot.analysis.forecast.model import Acceptance, Lengths, crossing, speedups
from specpilot.mockvllm import simulate
from specpilot.mockvllm.profile import calibrated_names, parse_profile


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
    args = parser.parse_args()
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
