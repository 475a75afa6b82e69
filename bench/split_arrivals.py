"""How the router's split of a scope's requests shapes each compared arm's arrivals, and what that does to
the ratio a pilot reads: the speculative over the ordinary arm's time per committed token, in virtual time.

A scope's requests arrive as a Poisson stream. Drawn at random, each arm's share of it is a Poisson
stream too (a thinning), which is what each arm would see serving all of the scope's traffic. Split in
turn so that the arms' counts stay within one of each other (every k-th request to an arm), each arm's
arrivals are far more regular than that, and a speculative engine, whose steps cost what their batch
costs, reads better on regular arrivals than on the bursts the scope really sends. Nor does a looser
bound help: a pair whose counts may part by at most b (the compared pair drawn at random, each of its
requests to either arm at even odds until one leads by b, then to the other) holds each arm's count
within b of half the pair's over any span, so over long spans each arm's arrivals vary half as much as
a Poisson stream's, whatever b is. Side by side at each load: each arm on Poisson arrivals at that load
(the truth; also what a mirrored control arm, sent a copy of each speculative request, would see), on a
random draw from a scope stream at the share that puts it there, on the same stream split in turn, and
held within each `--bounds` value.

    .venv/bin/python bench/split_arrivals.py [--loads 0.76,0.96,1.08] [--share 0.25] [--seconds 2000] [--seeds 2]
        [--bounds 1,2,4]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from crossover_reference import WARM_UP, Setup, tpct

from specpilot.mockvllm import simulate
from specpilot.testing.decision_profile import DRAFT_TOKENS, LENGTHS, PROFILE

SPEC = {"method": "draft_model", "model": "draft", "num_speculative_tokens": DRAFT_TOKENS}

Split = Callable[[list[simulate.Arrival], float, random.Random], tuple[list[simulate.Arrival], list[simulate.Arrival]]]


def at_random(
    arrivals: list[simulate.Arrival], share: float, rng: random.Random
) -> tuple[list[simulate.Arrival], list[simulate.Arrival]]:
    """Each request to the speculative arm with chance `share`, else to control with chance `share`."""
    spec: list[simulate.Arrival] = []
    control: list[simulate.Arrival] = []
    for arrival in arrivals:
        draw = rng.random()
        if draw < share:
            spec.append(arrival)
        elif draw < 2 * share:
            control.append(arrival)
    return spec, control


def in_turn(
    arrivals: list[simulate.Arrival], share: float, rng: random.Random
) -> tuple[list[simulate.Arrival], list[simulate.Arrival]]:
    """Smooth weighted round-robin over the speculative, control and ordinary arms: the compared arms'
    counts within one of each other after every request."""
    weights = {"speculative": share, "control": share, "baseline": 1 - 2 * share}
    credit = dict.fromkeys(weights, 0.0)
    taken: dict[str, list[simulate.Arrival]] = {arm: [] for arm in weights}
    for arrival in arrivals:
        for arm, weight in weights.items():
            credit[arm] += weight
        arm = max(credit, key=lambda a: credit[a])
        credit[arm] -= 1
        taken[arm].append(arrival)
    return taken["speculative"], taken["control"]


def within(bound: int) -> Split:
    """The compared pair drawn at random, its requests to either arm at even odds until one leads by `bound`."""

    def split(
        arrivals: list[simulate.Arrival], share: float, rng: random.Random
    ) -> tuple[list[simulate.Arrival], list[simulate.Arrival]]:
        spec: list[simulate.Arrival] = []
        control: list[simulate.Arrival] = []
        for arrival in arrivals:
            if rng.random() >= 2 * share:
                continue
            lead = len(spec) - len(control)
            to_spec = lead <= -bound or (lead < bound and rng.random() < 0.5)
            (spec if to_spec else control).append(arrival)
        return spec, control

    return split


def ratio(
    setup: Setup, spec: Sequence[simulate.Arrival], control: Sequence[simulate.Arrival], *, seconds: float, seed: int
) -> float:
    def run(arm: str, arrivals: Sequence[simulate.Arrival]) -> float:
        served = simulate.serve(simulate.engine(setup.profile, setup.spec_of(arm), seed=seed), arrivals, until=seconds)
        found = tpct([s for s in served if s.end >= WARM_UP])
        assert found is not None
        return found

    return run("speculative", spec) / run("ordinary", control)


def main(args: argparse.Namespace) -> None:
    prompt, output = (LENGTHS[key] for key in ("input_tokens", "output_tokens"))
    setup = Setup(
        profile=PROFILE,
        speculative=SPEC,
        scope="mid",
        prompt=(int(str(prompt["min"])), int(str(prompt["max"]))),
        output=(int(str(output["min"])), int(str(output["max"]))),
    )
    splits: dict[str, Split] = {"random draw": at_random, "in turn": in_turn}
    splits.update({f"within {bound}": within(bound) for bound in args.bounds})
    print(f"share {args.share:.0%} per compared arm; {args.seconds:g} model seconds x {args.seeds} seeds per cell")
    print(f"{'load':>6} {'Poisson (truth)':>16} " + " ".join(f"{name:>12}" for name in splits))
    for load in args.loads:
        cells: dict[str, list[float]] = {"truth": [], **{name: [] for name in splits}}
        for seed in range(args.seeds):
            own = simulate.poisson(
                [load], args.seconds, scope="mid", lengths=setup.lengths(seed + 1), rng=random.Random(seed)
            )
            cells["truth"].append(ratio(setup, own, own, seconds=args.seconds, seed=seed))
            scope = simulate.poisson(
                [load / args.share], args.seconds, scope="mid", lengths=setup.lengths(seed + 1), rng=random.Random(seed)
            )
            for name, split in splits.items():
                spec, control = split(scope, args.share, random.Random(seed + 100))
                cells[name].append(ratio(setup, spec, control, seconds=args.seconds, seed=seed))
        row = " ".join(f"{statistics.fmean(cells[name]):>12.3f}" for name in splits)
        print(f"{load:>6.2f} {statistics.fmean(cells['truth']):>16.3f} {row}", flush=True)


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loads", type=lambda s: [float(x) for x in s.split(",")], default=[0.76, 0.96, 1.08])
    parser.add_argument("--share", type=float, default=0.25)
    parser.add_argument("--seconds", type=float, default=2000.0)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--bounds", type=lambda s: [int(x) for x in s.split(",") if x], default=[1, 2, 4])
    return parser


if __name__ == "__main__":
    main(parser().parse_args())
