"""A mock profile's crossover and each arm's capacity, measured in virtual time, and how closely a peak
rehearsal's decision finds the crossover, with and without a crossover step.

The mock engine runs here without a clock (`specpilot.mockvllm.simulate`: the scheduler, cost model and
acceptance draws a served mock runs; tests/component/mockvllm/test_simulate.py checks that both give the
same figures on the same arrivals), so a reference can hold hours of load where a sweep over HTTP holds
minutes. Near the crossover the arms differ by a few percent, and a minute's read of the speculative arm
swings with every burst of arrivals, so a reference needs those hours:

- **the crossover**: each arm's time per committed token over --seconds of Poisson arrivals per load
  (after a warm-up), in --seeds runs, on a coarse scan up from --from, then on a fine grid between the two
  loads that bracket the sign change (or on the --grid given); the crossover is where the speculative
  arm's rises through the ordinary arm's (each seed's crossing gives the spread);
- **each arm's capacity** over --ladder, climbed as a rehearsal climbs it (--step-seconds per load, read
  over its last --read seconds, never drained between): the highest load at which it kept up and met
  --on-time-target, the median of --climbs seeded climbs;
- with --rehearsals N, **the decision's crossover**: N simulated rehearsals (--live-seconds at --live,
  then the ladder), each arm on its own arrivals as the rehearsal router splits them, their windows
  (--window every --interval, none across a step's start) binned at the pair's mean load and decided
  by the operator's own bands and crossover; then again after each of --crossover-steps crossover steps
  (twice --step-seconds at the crossover the windows so far place). How often each lands within
  --tolerance of the reference, side by side.

    .venv/bin/python bench/crossover_reference.py --profile JSON --scope mid --draft-tokens 3 \\
        --ladder 0.5,0.81,1.11,1.42,1.73,2.04 [--rehearsals 40] [--json PATH]
    .venv/bin/python bench/crossover_reference.py --profile JSON --scope mid --grid 0.6:1.4:9 --seconds 1500 \
        --seeds 1 --climbs 0   # the crossover alone, on a fixed grid (about 20 s)
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from specpilot.analysis.bands import bands, compare, crossover, first_crossing
from specpilot.analysis.evidence import BinArm, load_bin
from specpilot.mockvllm import simulate

ARMS = ("ordinary", "speculative")
WARM_UP = 100.0  # model seconds of each long run left out: the queue of an empty engine is not the load's


@dataclass(frozen=True)
class Setup:
    profile: dict[str, Any]
    speculative: dict[str, Any]
    scope: str
    prompt: tuple[int, int]
    output: tuple[int, int]

    def spec_of(self, arm: str) -> dict[str, Any] | None:
        return self.speculative if arm == "speculative" else None

    def lengths(self, seed: int) -> Iterator[tuple[int, int]]:
        draw = random.Random(seed)
        return iter(lambda: (draw.randint(*self.prompt), draw.randint(*self.output)), None)


def tpct(served: Sequence[simulate.Served]) -> float | None:
    """Decode seconds over the tokens after each request's first, as the operator computes it."""
    tokens = sum(s.output_tokens - 1 for s in served)
    return sum(s.end - s.first_token for s in served) / tokens if tokens else None


def long_run(setup: Setup, arm: str, load: float, seconds: float, seed: int) -> float:
    arrivals = simulate.poisson(
        [load], seconds, scope=setup.scope, lengths=setup.lengths(seed + 1), rng=random.Random(seed)
    )
    served = simulate.serve(simulate.engine(setup.profile, setup.spec_of(arm), seed=seed), arrivals, until=seconds)
    found = tpct([s for s in served if s.end >= WARM_UP])
    assert found is not None, (arm, load)
    return found


def differences(setup: Setup, loads: Sequence[float], seconds: float, seed: int) -> list[tuple[float, float]]:
    """(load, speculative - ordinary time per committed token) at each load."""
    return [
        (load, long_run(setup, "speculative", load, seconds, seed) - long_run(setup, "ordinary", load, seconds, seed))
        for load in loads
    ]


def reference_crossover(setup: Setup, start: float, *, seconds: float, seeds: int) -> dict[str, Any]:
    """A coarse scan up from `start` by a tenth of it (one run of a quarter of `seconds` per load) until the
    difference is non-negative at two loads running; then eleven loads from three scan steps below the
    first of them to two above (the scan's runs are short, and near the crossover they swing either
    way), each the mean of `seeds` runs of `seconds`."""
    step, scan = start / 10, []
    for index in range(80):
        scan.extend(differences(setup, [round(start + index * step, 4)], seconds / 4, 1000))
        if len(scan) >= 2 and scan[-1][1] >= 0 and scan[-2][1] >= 0:
            break
    else:
        return {"crossover": None, "scan": scan}
    turned = scan[-2][0]
    low, high = max(start, turned - 3 * step), turned + 2 * step
    return {**grid_crossover(setup, low, high, 11, seconds=seconds, seeds=seeds), "scan": scan}


def grid_crossover(setup: Setup, low: float, high: float, count: int, *, seconds: float, seeds: int) -> dict[str, Any]:
    """The crossover on `count` loads from `low` to `high`: where the mean of `seeds` runs of `seconds` per
    load turns from speculation's favour (and each seed's crossing, the spread)."""
    grid = [round(low + (high - low) * i / (count - 1), 4) for i in range(count)]
    runs = [differences(setup, grid, seconds, seed) for seed in range(seeds)]
    mean = [(x, statistics.fmean(run[i][1] for run in runs)) for i, x in enumerate(grid)]
    each = [first_crossing(run) for run in runs]
    return {"crossover": first_crossing(mean), "each_seed": each, "grid": mean}


def climb(
    setup: Setup, arm: str, ladder: Sequence[float], args: argparse.Namespace, seed: int
) -> tuple[float, float] | None:
    """The highest ladder load the arm kept up with on time, climbing as a rehearsal does, and the load it
    completed there (requests per second over the read); None where it met none."""
    seconds, read = args.step_seconds, args.read
    arrivals = simulate.poisson(
        ladder, seconds, scope=setup.scope, lengths=setup.lengths(seed + 1), rng=random.Random(seed)
    )
    served = simulate.serve(
        simulate.engine(setup.profile, setup.spec_of(arm), seed=seed), arrivals, until=len(ladder) * seconds
    )
    found = None
    for level, load in enumerate(ladder):
        end = (level + 1) * seconds
        read_in = [s for s in served if end - read <= s.end < end]
        expected = load * read
        kept_up = len(read_in) >= expected - 3 * math.sqrt(expected)
        on_time = sum(s.e2e <= args.deadline for s in read_in) / len(read_in) if read_in else 0.0
        if not (kept_up and on_time >= args.on_time_target):
            break
        found = (load, len(read_in) / read)
    return found


@dataclass(frozen=True)
class Phase:
    start: float
    end: float
    load: float


def phases(ladder: Sequence[float], args: argparse.Namespace, extra: Sequence[tuple[float, float]]) -> list[Phase]:
    out = [Phase(0.0, args.live_seconds, args.live)]
    for load, seconds in [*((x, args.step_seconds) for x in ladder), *extra]:
        start = out[-1].end
        out.append(Phase(start, start + seconds, load))
    return out


def rehearsed_crossover(
    setup: Setup, planned: Sequence[Phase], args: argparse.Namespace, seed: int
) -> tuple[float, float, float] | None:
    """The decision's crossover and its interval over a simulated rehearsal's windows, binned and decided
    as the operator does."""
    until = planned[-1].end
    served = {}
    for index, arm in enumerate(ARMS):
        draw = random.Random(seed * 2 + index)
        lengths = setup.lengths(seed * 2 + index + 10_000)
        arrivals = []
        for phase in planned:
            at = phase.start
            while (at := at + draw.expovariate(phase.load)) < phase.end:
                prompt, output = next(lengths)
                arrivals.append(simulate.Arrival(at=at, scope=setup.scope, prompt_tokens=prompt, output_tokens=output))
        served[arm] = simulate.serve(
            simulate.engine(setup.profile, setup.spec_of(arm), seed=seed), arrivals, until=until
        )
    bins: dict[str, dict[int, BinArm]] = {arm: {} for arm in ARMS}
    window, interval = args.window, args.interval
    for phase in planned:
        end = phase.start + window  # a window within which a step began is kept out, as the operator does
        while end <= phase.end + 1e-9:
            read = {arm: [s for s in served[arm] if end - window <= s.end < end] for arm in ARMS}
            load = statistics.fmean(len(read[arm]) / window for arm in ARMS)  # the pair's mean: matched
            if load > 0:
                for arm in ARMS:
                    cell = bins[arm].get(load_bin(load), BinArm())
                    tokens = sum(s.output_tokens - 1 for s in read[arm])
                    decode = sum(s.end - s.first_token for s in read[arm]) if tokens else None
                    bins[arm][load_bin(load)] = BinArm(
                        load=cell.load.add(load),
                        tpct=cell.tpct.add(decode / tokens if decode is not None else None),
                        decode=cell.decode.add(decode),
                        tokens=cell.tokens.add(tokens or None),
                        routed=cell.routed + len(read[arm]),
                    )
            end += interval
    overlap = window / interval
    found = crossover(
        compare(bands(bins["speculative"], overlap=overlap), bins["ordinary"], overlap=overlap), confidence=0.95
    )
    return (found.load, found.low, found.high) if found is not None else None


def accuracy(
    estimates: Sequence[tuple[float, float, float] | None], reference: float, tolerance: float
) -> dict[str, Any]:
    found = sorted(e[0] for e in estimates if e is not None)
    within = sum(abs(e / reference - 1) <= tolerance for e in found)
    covered = sum(e[1] <= reference <= e[2] for e in estimates if e is not None)

    def rank(q: float) -> float | None:
        return found[min(len(found) - 1, int(q * len(found)))] if found else None

    return {
        "runs": len(estimates),
        "crossed": len(found),
        "within": within,
        "share_within": within / len(estimates) if estimates else None,
        "interval_covers": covered,
        "p10": rank(0.1),
        "median": rank(0.5),
        "p90": rank(0.9),
    }


def main(args: argparse.Namespace) -> dict[str, Any]:
    profile = json.loads(args.profile)
    setup = Setup(
        profile=profile,
        speculative={"method": "draft_model", "model": "draft", "num_speculative_tokens": args.draft_tokens},
        scope=args.scope,
        prompt=tuple(int(x) for x in args.input_tokens.split(":")),  # type: ignore[arg-type]
        output=tuple(int(x) for x in args.output_tokens.split(":")),  # type: ignore[arg-type]
    )
    ladder = [float(x) for x in args.ladder.split(",") if x]
    print(f"profile {json.dumps(profile)}; scope {args.scope}, {args.draft_tokens} draft tokens")
    if args.known:
        reference: dict[str, Any] = {"crossover": args.known, "given": True}
    elif args.grid:
        low, high, count = args.grid.split(":")
        reference = grid_crossover(setup, float(low), float(high), int(count), seconds=args.seconds, seeds=args.seeds)
    else:
        assert args.start or ladder, "--from or --ladder: where the crossover scan starts"
        reference = reference_crossover(setup, args.start or ladder[0], seconds=args.seconds, seeds=args.seeds)
    cross = reference["crossover"]
    print(f"{'load':>6} | {'spec - ordinary tpct ms (mean of seeds)':>40}")
    for load, diff in reference.get("grid", []):
        print(f"{load:>6.3f} | {diff * 1e3:>+40.2f}")
    spread = [c for c in reference.get("each_seed", []) if c is not None]
    if cross is None:
        print("crossover: the arms do not cross above --from")
    elif args.known:
        print(f"crossover: {cross:.3f} requests/s per replica (given)")
    else:
        print(
            f"crossover: {cross:.3f} requests/s per replica (seeds {', '.join(f'{c:.3f}' for c in spread)}; "
            f"{args.seeds} x {args.seconds:g} model s per load)"
        )
    capacity: dict[str, dict[str, float] | None] = {}
    for arm in ARMS if args.climbs and ladder else ():
        climbs = [climb(setup, arm, ladder, args, seed) for seed in range(args.climbs)]
        met = [x for x in climbs if x is not None]
        if len(met) * 2 <= len(climbs):
            capacity[arm] = None
            print(f"{arm} capacity: below the ladder in most climbs")
            continue
        top = {"load": statistics.median_low([x[0] for x in met]), "completed": statistics.median([x[1] for x in met])}
        capacity[arm] = top
        print(
            f"{arm} capacity: the ladder's {top['load']:g} (median of {len(climbs)} climbs; each "
            f"{', '.join(f'{x[0]:g}' if x else 'none' for x in climbs)}), completing "
            f"{top['completed']:.3f} requests/s there"
        )
    result: dict[str, Any] = {"reference": reference, "crossover": cross, "capacity": capacity}
    if args.rehearsals and cross is not None:
        # the ladder up to its first step past twice the crossover: the steps above add only bands where
        # the arms crossed long before, and an arm far past its capacity costs the most to simulate
        low_ladder = ladder[: next((i + 1 for i, x in enumerate(ladder) if x > 2 * cross), len(ladder))]
        names = ["ladder", *(f"{n} crossover step{'s' if n > 1 else ''}" for n in range(1, args.crossover_steps + 1))]
        side: dict[str, list[tuple[float, float, float] | None]] = {name: [] for name in names}
        for seed in range(args.rehearsals):
            # each crossover step at the crossover as the windows so far place it, as the operator plans them
            extra: list[tuple[float, float]] = []
            found = rehearsed_crossover(setup, phases(low_ladder, args, extra), args, seed)
            side["ladder"].append(found)
            for name in names[1:]:
                if found is not None:
                    extra.append((found[0], 2 * args.step_seconds))
                    found = rehearsed_crossover(setup, phases(low_ladder, args, extra), args, seed)
                side[name].append(found)
        result["rehearsals"] = {name: accuracy(found, cross, args.tolerance) for name, found in side.items()}
        print(f"decision's crossover over {args.rehearsals} simulated rehearsals, reference {cross:.3f}:")
        for name, figures in result["rehearsals"].items():
            print(
                f"  {name:>20}: within {args.tolerance:.0%} in {figures['within']} of {figures['runs']} "
                f"({figures['share_within']:.0%}); p10 {figures['p10']:.3f}, median {figures['median']:.3f}, "
                f"p90 {figures['p90']:.3f}; the 95% interval holds the reference in {figures['interval_covers']}"
            )
    return result


def parser() -> argparse.ArgumentParser:
    out = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    out.add_argument("--profile", required=True, help="mock profile as JSON (a pilot's SPECPILOT_MOCK_PROFILE_JSON)")
    out.add_argument("--scope", default="default", help="scope whose acceptance the profile gives")
    out.add_argument("--draft-tokens", type=int, default=3)
    out.add_argument("--input-tokens", default="80:120", help="uniform range of prompt lengths, MIN:MAX")
    out.add_argument("--output-tokens", default="40:60", help="uniform range of output lengths, MIN:MAX")
    out.add_argument("--ladder", default="", help="comma-separated loads per replica (capacities)")
    out.add_argument("--from", dest="start", type=float, help="where the crossover scan starts (the ladder's first)")
    out.add_argument("--seconds", type=float, default=4000.0, help="model seconds per load of the reference")
    out.add_argument("--seeds", type=int, default=3, help="runs per load of the reference")
    out.add_argument("--known", type=float, help="a reference crossover measured before: not measured again")
    out.add_argument("--grid", help="LOW:HIGH:N: the crossover on N loads from LOW to HIGH instead of the scan")
    out.add_argument("--step-seconds", type=float, default=60.0)
    out.add_argument("--read", type=float, default=45.0, help="seconds each ladder step is read over, at its end")
    out.add_argument("--deadline", type=float, default=20.0)
    out.add_argument("--on-time-target", type=float, default=0.99)
    out.add_argument(
        "--climbs", type=int, default=9, help="seeded climbs whose median capacity is the reference (0: none)"
    )
    out.add_argument("--rehearsals", type=int, default=0, help="simulated rehearsals to decide (0: none)")
    out.add_argument("--crossover-steps", type=int, default=2, help="crossover steps, one after another")
    out.add_argument("--live", type=float, default=0.5, help="the live stages' load per replica")
    out.add_argument("--live-seconds", type=float, default=120.0)
    out.add_argument("--window", type=float, default=15.0)
    out.add_argument("--interval", type=float, default=5.0)
    out.add_argument("--tolerance", type=float, default=0.15)
    out.add_argument("--json", help="also write the figures here")
    return out


if __name__ == "__main__":
    options = parser().parse_args()
    figures = main(options)
    if options.json:
        with open(options.json, "w") as sink:
            json.dump(figures, sink)
