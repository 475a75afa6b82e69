"""Evidence built to order from the mock's cost model: windows across loads for scopes of known
acceptance, and where speculation stops paying, worked out by hand. The speculative and control arms
take the same share at the same size, so each window puts both at the same offered load."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta

from specpilot.analysis.evidence import ArmLoad, Evidence, WindowLoad, record_window, watch_production, with_arms
from specpilot.analysis.window import ScopeWindow
from specpilot.api.status import Verdict
from specpilot.wire.names import Arm
from tests.unit.analysis.windows import END, arm, engine

T, K, C = 0.02, 3, 0.1
ROOF = 16  # ordinary decoding reaches the compute roof at 16 sequences


def expected_tokens(alpha: float) -> float:
    return (1 - alpha ** (K + 1)) / (1 - alpha)


def ordinary(load: float) -> float:
    return T * max(1.0, load / ROOF)


def speculative(load: float, alpha: float) -> float:
    """The mock's cost model: a round verifies k + 1 tokens per sequence and drafts k."""
    verify = T * max(1.0, load * (K + 1) / ROOF)
    return (verify + K * C * ordinary(load)) / expected_tokens(alpha)


def analytic_crossover(alpha: float) -> float:
    return (expected_tokens(alpha) - K * C) * ROOF / (K + 1)


LOADS = (1, 1.5, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)


def pilot(
    alphas: dict[str, float],
    *,
    loads: tuple[float, ...] = LOADS,
    per_load: int = 4,
    fixed: float = 0.1,
    quality_failed: frozenset[str] = frozenset(),
    production: float | None = None,
    identical: bool = False,
    alternative: Callable[[float], float] | None = None,
    seed: int = 0,
    rehearsed_from: float | None = None,
    rehearsed_at: tuple[float, ...] = (),
    ttft_factor: Callable[[float], float] | None = None,
) -> Evidence:
    """Windows at each load in turn, every scope on both compared arms at the same load; production's
    baseline at `production` requests per second per replica throughout (unwatched when None). With
    `identical`, the speculative arm decodes exactly as the control does (an A/A pilot). With
    `alternative` (its time per token at a load), an alternative arm takes the same share in half as many
    replicas (twice the offered load per replica of its own). Windows at `rehearsed_from` and above, or at a
    load in `rehearsed_at`, are the peak rehearsal's. `ttft_factor` scales the speculative arm's time to first
    token at a load."""
    gpus = {Arm.BASELINE: 1, Arm.SPECULATIVE: 1, Arm.CONTROL: 1, **({Arm.ALTERNATIVE: 1} if alternative else {})}
    evidence = with_arms(
        Evidence(compared=Arm.CONTROL),
        overlap=3.0,
        kv_blocks={Arm.BASELINE: 1000, Arm.SPECULATIVE: 800},
        gpus=gpus,
    )
    for step, value in enumerate(x for x in loads for _ in range(per_load)):
        end = END + timedelta(seconds=5 * step)
        for scope, alpha in alphas.items():
            seed += 2
            per_token = ordinary(value) if identical else speculative(value, alpha)
            factor = ttft_factor(value) if ttft_factor else 1.0
            spec = arm(40, seed=seed, per_token=per_token, ttft=fixed, ttft_factor=factor)
            base = arm(40, seed=seed + 1, per_token=ordinary(value), ttft=fixed)
            w = ScopeWindow(
                scope=scope,
                start=end - timedelta(seconds=15),
                end=end,
                compared=base,
                speculative=spec,
                compared_engine=engine(),
                speculative_engine=replace(engine(), per_position_acceptance=(alpha, alpha**2, alpha**3)),
                alternative=arm(40, seed=seed + 10_001, per_token=alternative(value), ttft=fixed)
                if alternative
                else None,
            )
            loads_ = {
                a: ArmLoad(offered_per_replica=value, in_flight_per_replica=value, running_per_replica=value)
                for a in (Arm.SPECULATIVE, Arm.CONTROL)
            }
            loads_[Arm.BASELINE] = ArmLoad(offered_per_replica=production)
            if alternative:
                loads_[Arm.ALTERNATIVE] = ArmLoad(offered_per_replica=2 * value)
            window_load = WindowLoad(arms=loads_, arrival_rate=value, prompt_tokens=(100, 200), output_tokens=(50, 150))
            evidence = record_window(
                evidence,
                w,
                window_load,
                verdict=Verdict.PASS,
                quality_failed=scope in quality_failed,
                rehearsed=(rehearsed_from is not None and value >= rehearsed_from) or value in rehearsed_at,
            )
        evidence = watch_production(evidence, window_load)
    return evidence
