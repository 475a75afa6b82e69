"""The demo pilot's two compared arms alone, in virtual time: per scope, the speculative arm's TTFT p99
and decode time per output token against the control arm's at the same Poisson load, and each arm's
KV-cache usage.

It reads `manifests/demo/pilot.yaml` (the engine's profile, max-model-len and time scale, the draft)
and `manifests/demo/mix.yaml` (the scopes' shares and lengths), and offers each arm the load the
speculative arm gets at each stage's weight of the demo's 10 requests/s (`--rate`), in model time:
so what the pilot measures on the cluster, without the wall clock and the router. `--draft-tokens`
and `--calibrated` (a calibrated profile's name in place of the pilot's) try other pilots.

    .venv/bin/python bench/demo_arms.py
    .venv/bin/python bench/demo_arms.py --draft-tokens 4
    .venv/bin/python bench/demo_arms.py --calibrated h200-llama-3.1-8b-draft-1b --method draft_model
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from specpilot.loadgen.workload import ScopeMix, load_mix
from specpilot.mockvllm import simulate
from specpilot.mockvllm.engine import Engine

ROOT = Path(__file__).resolve().parents[1]
WARMUP_S = 20.0  # model seconds left out at the start of each run


DEMO_PILOT, DEMO_MIX = ROOT / "manifests/demo/pilot.yaml", ROOT / "manifests/demo/mix.yaml"


def demo_pilot(
    pilot_path: Path = DEMO_PILOT, mix_path: Path = DEMO_MIX
) -> tuple[dict[str, Any], dict[str, Any], Sequence[ScopeMix]]:
    """A demo pilot's spec (`make demo`'s by default), its engine's mock profile, and its traffic mix."""
    pilot: dict[str, Any] = yaml.safe_load(pilot_path.read_text())["spec"]
    env = pilot["engine"]["env"]
    profile: dict[str, Any] = json.loads(next(e["value"] for e in env if e["name"] == "SPECPILOT_MOCK_PROFILE_JSON"))
    return pilot, profile, load_mix(str(mix_path))


def arrivals_at(mix: Sequence[ScopeMix], rate: float, seconds: float) -> list[simulate.Arrival]:
    """Poisson arrivals at `rate` model requests/s for `seconds`, split over the mix's scopes by weight."""
    rng = random.Random(1)
    total = sum(scope.weight for scope in mix)
    arrivals: list[simulate.Arrival] = []
    for scope in mix:
        share = [rate * scope.weight / total]
        arrivals += simulate.poisson(share, seconds, scope=scope.name, lengths=_lengths(scope, rng), rng=rng)
    return sorted(arrivals, key=lambda a: a.at)


def main() -> None:
    pilot, profile, mix = demo_pilot()
    draft = pilot["speculative"]["draft"]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=10.0, help="the demo's offered requests/s (wall)")
    parser.add_argument("--draft-tokens", type=int, default=draft["numSpeculativeTokens"])
    parser.add_argument("--method", default=draft.get("method", "draft_model"))
    parser.add_argument("--calibrated", default=None, help="a calibrated profile in place of the pilot's")
    parser.add_argument("--seconds", type=float, default=200.0, help="model seconds at each load")
    args = parser.parse_args()

    engine = pilot["engine"]
    if args.calibrated:
        profile["calibrated"] = args.calibrated
    scale = next(float(a.split("=", 1)[1]) for a in engine.get("extraArgs", []) if a.startswith("--time-scale="))
    flags = ["--max-model-len", str(engine["maxModelLen"])]
    speculative = {"method": args.method, "model": "draft", "num_speculative_tokens": args.draft_tokens}
    weights = sorted({stage["weight"] for scope in pilot["scopes"] for stage in scope["stages"]})
    print(f"profile {profile.get('calibrated')}, {args.method}, {args.draft_tokens} draft tokens, time scale {scale:g}")
    for weight in weights:
        rate = args.rate * weight / 100 * scale  # model requests/s the speculative arm (and the control arm) gets
        arrivals = arrivals_at(mix, rate, args.seconds)
        served, usage = {}, {}
        for arm, spec in (("speculative", speculative), ("control", None)):
            built = simulate.engine(profile, spec, flags=flags)
            usage[arm] = _sampled_usage(built)
            served[arm] = simulate.serve(built, arrivals, until=args.seconds + 60)
        print(f"\nweight {weight}%: {rate:.1f} requests/s of model time on each arm")
        for arm in served:
            print(f"  {arm:<11} KV-cache usage mean {np.mean(usage[arm]):.3f}, max {np.max(usage[arm]):.3f}")
        print(f"  {'scope':<9} {'requests':>9} {'TTFT p99 ms':>17} {'ratio':>6} {'decode ms/token':>17} {'ratio':>6}")
        for scope in mix:
            spec_ttft, spec_tpot, n = _figures(served["speculative"], scope.name)
            ctrl_ttft, ctrl_tpot, _ = _figures(served["control"], scope.name)
            print(
                f"  {scope.name:<9} {n:>9} {spec_ttft:>8.1f} /{ctrl_ttft:>7.1f} {spec_ttft / ctrl_ttft:>6.2f}"
                f" {spec_tpot:>8.2f} /{ctrl_tpot:>7.2f} {spec_tpot / ctrl_tpot:>6.2f}"
            )


def _lengths(scope: ScopeMix, rng: random.Random) -> Iterator[tuple[int, int]]:
    """A scope's prompt and output lengths, drawn as the load generator draws them, for ever."""
    while True:
        yield scope.input_tokens.sample(rng), scope.output_tokens.sample(rng)


def _sampled_usage(engine: Engine) -> list[float]:
    """The engine's KV-cache usage after every step it ends (the list fills as it is served)."""
    usage: list[float] = []
    end_step = engine.end_step

    def sampled(step: object, end: float) -> None:
        end_step(step, end)  # type: ignore[arg-type]
        usage.append(engine.scheduler.kv.usage(end))

    engine.end_step = sampled  # type: ignore[method-assign]
    return usage


def _figures(served: list[simulate.Served], scope: str) -> tuple[float, float, int]:
    """TTFT p99 and mean decode time per output token (ms) of a scope's requests after the warm-up."""
    done = [s for s in served if s.arrival.scope == scope and s.arrival.at > WARMUP_S]
    ttft = np.percentile([s.first_token - s.arrival.at for s in done], 99) * 1000
    tpot = np.mean([(s.end - s.first_token) / max(1, s.output_tokens - 1) for s in done]) * 1000
    return float(ttft), float(tpot), len(done)


if __name__ == "__main__":
    main()
