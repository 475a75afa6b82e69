"""The cost view the report shows: per arm, its GPUs, KV blocks and best on-time completions per GPU-hour."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from specpilot.analysis.bands import Band
from specpilot.analysis.evidence import Evidence
from specpilot.wire.names import Arm


@dataclass(frozen=True, kw_only=True)
class ArmCost:
    """What one arm costs and delivers for a scope."""

    arm: Arm
    gpus: int | None
    kv_blocks: int | None  # per replica
    on_time_per_gpu_hour: float | None  # best measured band: Little's law throughput x on-time share
    at_load: float | None  # the band's load


@dataclass(frozen=True, kw_only=True)
class CostView:
    arms: tuple[ArmCost, ...]
    kv_cost: float | None  # share of the baseline's KV blocks the draft takes: 1 - spec / base


def _on_time_per_gpu_hour(band: Band, gpus_per_replica: float) -> float | None:
    if not band.e2e or not band.routed or gpus_per_replica <= 0:
        return None
    return band.load / band.e2e * (band.on_time / band.routed) * 3600 / gpus_per_replica


def cost_view(evidence: Evidence, arm_bands: Mapping[Arm, Sequence[Band]], replicas: Mapping[Arm, int]) -> CostView:
    """GPUs, KV blocks and the best on-time completions per GPU-hour, per arm, for one scope."""
    out = []
    for arm in (Arm.BASELINE, Arm.SPECULATIVE, Arm.CONTROL, Arm.ALTERNATIVE):
        gpus = evidence.gpus.get(arm)
        if gpus is None and arm in (Arm.CONTROL, Arm.ALTERNATIVE):
            continue
        # The alternative's bins hold the pair's load per speculative replica (the same share, its own replicas).
        count = replicas.get(Arm.SPECULATIVE if arm is Arm.ALTERNATIVE else arm)
        per_replica = gpus / count if gpus and count else 1.0
        best: tuple[float, float] | None = None
        for band in arm_bands.get(arm, ()):
            value = _on_time_per_gpu_hour(band, per_replica)
            if value is not None and (best is None or value > best[0]):
                best = (value, band.load)
        out.append(
            ArmCost(
                arm=arm,
                gpus=gpus,
                kv_blocks=evidence.kv_blocks.get(arm),
                on_time_per_gpu_hour=best[0] if best else None,
                at_load=best[1] if best else None,
            )
        )
    base, spec = evidence.kv_blocks.get(Arm.BASELINE), evidence.kv_blocks.get(Arm.SPECULATIVE)
    return CostView(arms=tuple(out), kv_cost=1 - spec / base if base and spec is not None else None)
