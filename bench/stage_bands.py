"""A climb's load bins as a pilot's windows read them, against the engines' steady state at each bin's
load, in virtual time: how far short stages near the crossover read from the long run.

Both arms serve the same Poisson arrivals (the control arm's mirror), a stage per rate of --rates
(requests per second per replica) of --stage-seconds each; windows of --window every --interval, none
across a stage's start, each binned (the store's quarter-octave bins) at the arrivals over up to --span
seconds of its stage (the operator's `RECENT_LOAD`: 60), or over its own span when that is longer. Per
bin with --min-windows or more: the speculative arm's time per committed token over the ordinary arm's
pooled over the bin's tokens (as a band reads them, `BinArm.time_per_token`), the same as the mean of
the windows' ratios (as bands read them before), and the engines' long-run ratio at the bin's load
(--truth-seconds of arrivals in --truth-seeds runs); then each stage's windows together, whatever their
loads, against the long run at the stage's rate. Defaults: the decision tests' engine and the band
test's climb; `--span 15` bins each window at its own arrivals, as the store did before. `--redraw` reads
each climb again on the same arrivals with other acceptance draws, and prints how far its bins move.

    .venv/bin/python bench/stage_bands.py [--rates 0.76,0.96,1.08] [--stage-seconds 75] [--seeds 8] [--span 60]
        [--redraw]
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from crossover_reference import Setup, long_run

from specpilot.analysis.evidence import load_bin
from specpilot.mockvllm import simulate
from specpilot.testing.decision_profile import DRAFT_TOKENS, LENGTHS, PROFILE

ARMS = ("speculative", "ordinary")


@dataclass(frozen=True)
class WindowRead:
    stage: int
    load: float
    decode: dict[str, float]  # per arm: seconds decoding the tokens after each request's first
    tokens: dict[str, int]  # per arm: those tokens

    def tpct(self, arm: str) -> float:
        return self.decode[arm] / self.tokens[arm]


@dataclass(frozen=True)
class Climb:
    """Stages of Poisson arrivals at `rates` (requests per second per replica), `stage_seconds` each,
    read in windows of `window` seconds every `interval`, none across a stage's start, each at the
    arrivals over its own span or over up to `span` seconds of its stage."""

    rates: tuple[float, ...]
    stage_seconds: float
    window: float = 15.0
    interval: float = 5.0
    span: float = 60.0


def climb(setup: Setup, plan: Climb, seed: int, *, draws: int | None = None) -> list[WindowRead]:
    """One seeded climb's windows, both arms on the same arrivals, their acceptances drawn from seed `draws`
    (else `seed`)."""
    stage = plan.stage_seconds
    lengths = setup.lengths(seed + 100)
    arrivals = simulate.poisson(plan.rates, stage, scope=setup.scope, lengths=lengths, rng=random.Random(seed + 50))
    until = stage * len(plan.rates)
    served = {
        arm: simulate.serve(
            simulate.engine(setup.profile, setup.spec_of(arm), seed=seed if draws is None else draws),
            arrivals,
            until=until + 60,
        )
        for arm in ARMS
    }
    out, end = [], plan.window
    while end <= until + 1e-9:
        stage_start = (end - 1e-9) // stage * stage
        if end - plan.window >= stage_start - 1e-9:
            span_start = max(stage_start, end - max(plan.window, plan.span))
            load = sum(1 for a in arrivals if span_start <= a.at < end) / (end - span_start)
            done = {arm: [s for s in served[arm] if end - plan.window <= s.end < end] for arm in ARMS}
            tokens = {arm: sum(s.output_tokens - 1 for s in done[arm]) for arm in ARMS}
            if load > 0 and all(tokens.values()):
                decode = {arm: sum(s.end - s.first_token for s in done[arm]) for arm in ARMS}
                out.append(WindowRead(stage=int(stage_start // stage), load=load, decode=decode, tokens=tokens))
        end += plan.interval
    return out


def windows_ratio(windows: Sequence[WindowRead]) -> float | None:
    """The speculative arm's mean time per committed token over its windows, over the ordinary arm's: the
    ratio bands read before they pooled their windows' tokens."""
    if not windows:
        return None
    return statistics.fmean(w.tpct("speculative") for w in windows) / statistics.fmean(
        w.tpct("ordinary") for w in windows
    )


def long_run_ratio(setup: Setup, load: float, *, seconds: float, seeds: int) -> float:
    """The speculative arm's time per committed token over the ordinary arm's in long runs at `load`, the
    mean over `seeds` runs of `seconds`."""
    return statistics.fmean(
        long_run(setup, "speculative", load, seconds, seed) / long_run(setup, "ordinary", load, seconds, seed)
        for seed in range(seeds)
    )


def decision_setup() -> Setup:
    """The decision tests' engine and lengths, scope mid."""
    return Setup(
        profile=PROFILE,
        speculative={"method": "draft_model", "model": "draft", "num_speculative_tokens": DRAFT_TOKENS},
        scope="mid",
        prompt=_range("input_tokens"),
        output=_range("output_tokens"),
    )


def _range(kind: str) -> tuple[int, int]:
    low, high = LENGTHS[kind]["min"], LENGTHS[kind]["max"]
    assert isinstance(low, int) and isinstance(high, int), LENGTHS
    return low, high


def bins(windows: Sequence[WindowRead], args: argparse.Namespace, setup: Setup) -> list[dict[str, float]]:
    grouped = _by_bin(windows)
    rows = []
    for index in sorted(grouped):
        found = grouped[index]
        if len(found) < args.min_windows:
            continue
        load = statistics.fmean(w.load for w in found)
        truth = long_run_ratio(setup, load, seconds=args.truth_seconds, seeds=args.truth_seeds)
        rows.append(
            {
                "load": load,
                "windows": len(found),
                "ratio": pooled_ratio(found) or math.nan,
                "mean": windows_ratio(found) or math.nan,
                "truth": truth,
            }
        )
    return rows


def pooled_ratio(windows: Sequence[WindowRead]) -> float | None:
    """The speculative arm's time per committed token over the ordinary arm's, pooled over the windows'
    tokens (each token weighs the same, as in a long run): the ratio a band reads."""
    if not windows:
        return None
    spec, ordinary = (sum(w.decode[arm] for w in windows) / sum(w.tokens[arm] for w in windows) for arm in ARMS)
    return spec / ordinary


def by_stage(windows: Sequence[WindowRead], args: argparse.Namespace, setup: Setup) -> None:
    """Each stage's windows together, however their loads fell: the mean of their reads against their
    tokens pooled and the long run at the stage's rate."""
    for index, rate in enumerate(args.rates):
        found = [w for w in windows if w.stage == index]
        truth = long_run_ratio(setup, rate, seconds=args.truth_seconds, seeds=args.truth_seeds)
        print(
            f"  stage at {rate:g} ({len(found)} windows): pooled {pooled_ratio(found) or math.nan:.3f}, "
            f"windows' mean {windows_ratio(found) or math.nan:.3f}, long run {truth:.3f}"
        )


def redrawn(setup: Setup, plan: Climb, args: argparse.Namespace) -> None:
    """Each climb read again on the same arrivals with other acceptance draws: how far its bins move."""
    moved = []
    for seed in range(args.seeds):
        once, again = (_by_bin(climb(setup, plan, seed, draws=draws)) for draws in (seed, seed + 1000))
        for index in once.keys() & again.keys():
            if min(len(once[index]), len(again[index])) >= args.min_windows:
                first, second = pooled_ratio(once[index]), pooled_ratio(again[index])
                if first is not None and second is not None:
                    moved.append(second - first)
    print(
        f"the same arrivals with other acceptance draws, {len(moved)} bins: their pooled ratios moved by "
        f"{statistics.pstdev(moved):.3f} (standard deviation), {max(map(abs, moved)):.3f} at most"
    )


def _by_bin(windows: Sequence[WindowRead]) -> dict[int, list[WindowRead]]:
    grouped: dict[int, list[WindowRead]] = {}
    for window in windows:
        grouped.setdefault(load_bin(window.load), []).append(window)
    return grouped


def main(args: argparse.Namespace) -> list[dict[str, float]]:
    setup = decision_setup()
    plan = Climb(
        rates=tuple(args.rates),
        stage_seconds=args.stage_seconds,
        window=args.window,
        interval=args.interval,
        span=args.span,
    )
    windows = [window for seed in range(args.seeds) for window in climb(setup, plan, seed)]
    rows = bins(windows, args, setup)
    print(f"stages {args.rates} x {args.stage_seconds:g} s, {args.seeds} climbs, load over up to {args.span:g} s")
    for row in rows:
        print(
            f"  load {row['load']:.3f} ({row['windows']:.0f} windows): pooled {row['ratio']:.3f} (windows' mean "
            f"{row['mean']:.3f}), long run {row['truth']:.3f}, difference {row['ratio'] - row['truth']:+.3f}"
        )
    print("each stage's windows together:")
    by_stage(windows, args, setup)
    if args.redraw:
        redrawn(setup, plan, args)
    return rows


def parser() -> argparse.ArgumentParser:
    out = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    out.add_argument("--rates", type=lambda text: [float(x) for x in text.split(",")], default=[0.76, 0.96, 1.08])
    out.add_argument("--stage-seconds", type=float, default=75.0)
    out.add_argument("--seeds", type=int, default=8, help="seeded climbs")
    out.add_argument("--window", type=float, default=15.0)
    out.add_argument("--interval", type=float, default=5.0)
    out.add_argument("--span", type=float, default=60.0, help="seconds of its stage a window's load is read over")
    out.add_argument("--min-windows", type=int, default=6)
    out.add_argument("--truth-seconds", type=float, default=1000.0)
    out.add_argument("--truth-seeds", type=int, default=2)
    out.add_argument("--redraw", action="store_true", help="read each climb again with other acceptance draws")
    return out


if __name__ == "__main__":
    main(parser().parse_args())
