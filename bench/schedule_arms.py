"""A batch-size schedule against plain speculation and ordinary decoding, over a ladder of offered loads,
in virtual time: each arm's time per committed token, and its TTFT p99 against the control's, at the same
Poisson load of the demo's traffic mix.

Plain speculation drafts k tokens every step; the scheduled arm drafts k up to the switch batch and none
above it (vLLM 0.33's `num_speculative_tokens_per_batch_size`, `[[1, switch, k], [switch + 1, ...,
0]]`); the control decodes ordinarily. Profiles: the demo pilot's (`manifests/demo/pilot.yaml`) and the
calibrated H200 ones (`mockvllm/profiles/h200-*.yaml`, with the demo's acceptance). The crossover is the
load where plain speculation stops beating the control, interpolated between the ladder's loads and never
past them. Loads are model requests/s per replica (the GPU's own time, before any time scale).
`--pilot` and `--mix` run another demo pilot's engine alone (`make demo SCENARIO=schedule`'s).

    .venv/bin/python bench/schedule_arms.py
    .venv/bin/python bench/schedule_arms.py --switch 8 --rates 2,8,32 --seconds 60
    .venv/bin/python bench/schedule_arms.py --pilot manifests/demo/schedule.yaml \
        --mix manifests/demo/schedule-mix.yaml --switch 1 --rates 0.38,0.6,1.2,1.8,2.5 --seconds 1500
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from demo_arms import DEMO_MIX, DEMO_PILOT, WARMUP_S, arrivals_at, demo_pilot

from specpilot.loadgen.workload import ScopeMix
from specpilot.mockvllm import simulate
from specpilot.mockvllm.profile import calibrated_names
from specpilot.wire.batchschedule import below_and_off, switched_off_above

ARMS = ("plain", "scheduled", "control")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--switch", type=int, default=4, help="the largest batch that drafts (vLLM #49548's: 4)")
    parser.add_argument("--rates", default="1,2,4,8,16,32,64", help="offered model requests/s, comma-separated")
    parser.add_argument("--seconds", type=float, default=120.0, help="model seconds at each load")
    parser.add_argument("--pilot", type=Path, default=DEMO_PILOT, help="a pilot whose engine and draft to run")
    parser.add_argument("--mix", type=Path, default=DEMO_MIX, help="the traffic mix to offer it")
    parser.add_argument("--draft-tokens", type=int, default=None, help="k in place of the pilot's draft's")
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    pilot, demo, mix = demo_pilot(args.pilot, args.mix)
    draft = pilot["speculative"]["draft"]
    k = int(draft["numSpeculativeTokens"]) if args.draft_tokens is None else args.draft_tokens
    flags = ["--max-model-len", str(pilot["engine"]["maxModelLen"])]
    schedule = below_and_off(k, args.switch)
    profiles = {args.pilot.stem: (demo, draft.get("method", "draft_model"))}
    for name in calibrated_names() if args.pilot == DEMO_PILOT else ():
        profiles[name] = ({**demo, "calibrated": name}, "eagle" if "eagle" in name else "draft_model")
    print(
        f"schedule {[r.render() for r in schedule]}: drafts {k} up to batch {switched_off_above(schedule)}, none above"
    )
    for name, (profile, method) in profiles.items():
        plain = {"method": method, "model": "draft", "num_speculative_tokens": k}
        speculative = {
            "plain": plain,
            "scheduled": {**plain, "num_speculative_tokens_per_batch_size": [r.render() for r in schedule]},
        }
        table = {rate: _row(profile, speculative, flags, mix, rate=rate, seconds=args.seconds) for rate in rates}
        _print(name, method, table)


def _row(
    profile: Mapping[str, Any],
    speculative: Mapping[str, Mapping[str, Any]],
    flags: Sequence[str],
    mix: Sequence[ScopeMix],
    *,
    rate: float,
    seconds: float,
) -> dict[str, float]:
    """Each arm's time per committed token (ms) and TTFT p99 (s) at `rate`, on the same arrivals."""
    arrivals = arrivals_at(mix, rate, seconds)
    out = {}
    for arm in ARMS:
        engine = simulate.engine(profile, speculative.get(arm), flags=flags)
        served = simulate.serve(engine, arrivals, until=seconds + 60)
        out[arm] = simulate.time_per_committed_token(served, after=WARMUP_S) * 1000
        first = [s.first_token - s.arrival.at for s in served if s.arrival.at > WARMUP_S]
        out[f"{arm} ttft"] = float(np.percentile(first, 99))
    return out


def _print(name: str, method: str, table: Mapping[float, Mapping[str, float]]) -> None:
    print(f"\n{name} ({method})")
    print(
        f"  {'req/s':>6} {'plain ms':>9} {'sched ms':>9} {'control ms':>11} {'sched/plain':>12} {'sched/control':>14}"
        f" {'plain/control':>14}   TTFT p99 / control's: {'plain':>6} {'sched':>6}"
    )
    for rate, ms in table.items():
        print(
            f"  {rate:>6g} {ms['plain']:>9.3f} {ms['scheduled']:>9.3f} {ms['control']:>11.3f}"
            f" {ms['scheduled'] / ms['plain']:>12.3f} {ms['scheduled'] / ms['control']:>14.3f}"
            f" {ms['plain'] / ms['control']:>14.3f}   {'':>21} {ms['plain ttft'] / ms['control ttft']:>6.2f}"
            f" {ms['scheduled ttft'] / ms['control ttft']:>6.2f}"
        )
    print(f"  crossover (plain speculation stops winning): {_crossover(table)}")


def _crossover(table: Mapping[float, Mapping[str, float]]) -> str:
    """The load where plain speculation's time per committed token first reaches the control's."""
    previous: tuple[float, float] | None = None
    for rate, ms in table.items():
        gap = ms["plain"] - ms["control"]
        if gap >= 0:
            if previous is None:
                return f"at or below {rate:g} req/s (the lowest load measured)"
            low_rate, low_gap = previous
            return f"{low_rate + (rate - low_rate) * -low_gap / (gap - low_gap):.1f} req/s"
        previous = (rate, gap)
    return f"none up to {max(table):g} req/s (plain speculation wins at every load measured)"


if __name__ == "__main__":
    main()
