"""Production's watch: the loads its baseline ran at, their quantiles, and the peak a rehearsal climbs to."""

from __future__ import annotations

from collections.abc import Mapping

from specpilot.analysis.evidence.recording import WindowLoad
from specpilot.analysis.evidence.store import Evidence, bin_bounds, load_bin
from specpilot.wire.names import Arm


def watch_production(evidence: Evidence, load: WindowLoad) -> Evidence:
    """The evidence with the load production's baseline ran at over one more window (every scope)."""
    production = load.arms.get(Arm.BASELINE)
    value = production.offered_per_replica if production is not None else None
    if value is None or value <= 0:
        return evidence
    index = load_bin(value)
    return evidence.model_copy(
        update={"production": {**evidence.production, index: evidence.production.get(index, 0) + 1}}
    )


def production_quantile(production: Mapping[int, int], q: float) -> float | None:
    """Production's offered load per replica at quantile `q` of its windows: the upper edge of the bin
    that holds it (conservative for an envelope)."""
    total = sum(production.values())
    if not total:
        return None
    seen = 0
    for index in sorted(production):
        seen += production[index]
        if seen >= q * total:
            return bin_bounds(index)[1]
    return bin_bounds(max(production))[1]


def rehearsal_peak(
    per_replica: float | None, production_factor: float | None, production: Mapping[int, int]
) -> float | None:
    """The peak a rehearsal climbs to (requests per second per replica): as given, or production's
    highest measured load times the factor; None when it rests on a production never measured."""
    if per_replica is not None:
        return per_replica
    highest = production_quantile(production, 1.0)
    return highest * (production_factor or 1.0) if highest is not None else None
