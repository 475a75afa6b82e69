"""Evidence built to order for the report: a speculative arm against a control arm at the same offered
load (or, without a control, against production's baseline at its own), for scopes of known acceptance,
and production's baseline watched at half the pilot's load."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from specpilot.analysis.evidence import (
    ArmLoad,
    Evidence,
    WindowLoad,
    record_window,
    watch_production,
    with_arms,
)
from specpilot.analysis.window import ArmRequests, ScopeWindow
from specpilot.api.status import Verdict
from specpilot.wire.names import Arm
from tests.unit.analysis.crossover import ordinary, speculative
from tests.unit.analysis.windows import END, arm, engine

LOADS = (0.5, 0.75, 1, 1.5, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)
INTERVAL = timedelta(seconds=5)  # the demo pilot's analysis.interval


def _load(requests: ArmRequests, offered: float) -> ArmLoad:
    """The arm's load: offered, and in flight by Little's law."""
    e2e = sum(requests.e2e_seconds) / len(requests.e2e_seconds)
    return ArmLoad(offered_per_replica=offered, in_flight_per_replica=offered * e2e, running_per_replica=offered * e2e)


def pilot(alphas: dict[str, float], *, per_load: int = 4, control: bool = True, alternative: bool = False) -> Evidence:
    """Windows at each load in turn for every scope; production's baseline runs at half of it. With
    `alternative`, an alternative arm on the same GPU takes the same share and decodes 10% faster than
    the control arm."""
    compared = Arm.CONTROL if control else Arm.BASELINE
    evidence = with_arms(
        Evidence(compared=compared),
        overlap=3.0,
        kv_blocks={Arm.BASELINE: 1000, Arm.SPECULATIVE: 800, Arm.CONTROL: 1000},
        gpus={
            Arm.BASELINE: 4,
            Arm.SPECULATIVE: 1,
            **({Arm.CONTROL: 1} if control else {}),
            **({Arm.ALTERNATIVE: 1} if alternative else {}),
        },
    )
    seed = 0
    for step, value in enumerate(x for x in LOADS for _ in range(per_load)):
        end = END + step * INTERVAL
        production = value / 2
        for scope, alpha in alphas.items():
            seed += 2
            spec = arm(40, seed=seed, per_token=speculative(value, alpha))
            base = arm(40, seed=seed + 1, per_token=ordinary(value if control else production))
            window = ScopeWindow(
                scope=scope,
                start=end - 3 * INTERVAL,
                end=end,
                compared=base,
                speculative=spec,
                compared_engine=engine(),
                # a speculative step streams 1 + 3 x alpha tokens per chunk: its gaps are longer
                speculative_engine=replace(
                    engine(itl=0.03 * (1 + 3 * alpha) / 2), per_position_acceptance=(alpha, alpha**2, alpha**3)
                ),
                alternative=arm(40, seed=seed + 10_001, per_token=0.9 * ordinary(value)) if alternative else None,
            )
            arms = {Arm.SPECULATIVE: _load(spec, value), compared: _load(base, value if control else production)}
            if window.alternative is not None:
                arms[Arm.ALTERNATIVE] = _load(window.alternative, value)
            load = WindowLoad(arms=arms, arrival_rate=value, prompt_tokens=(100, 200), output_tokens=(50, 150))
            # the demo pilot's analysis.minSamples (manifests/demo/pilot.yaml), as the operator records it
            evidence = record_window(evidence, window, load, verdict=Verdict.PASS, quality_failed=False, min_samples=10)
        watched = WindowLoad(arms={Arm.BASELINE: ArmLoad(offered_per_replica=production)}, arrival_rate=value)
        evidence = watch_production(evidence, watched)
    return evidence
