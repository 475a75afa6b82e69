"""The observed workload as a load generator mix: each scope's arrival rate and request lengths from
the evidence, lognormal within the observed bounds. The report's replay/ and the peak rehearsal both
replay it, so a rehearsal sends the scopes' own traffic. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any

from specpilot.analysis.evidence import Evidence, Lengths
from specpilot.api.spec import SpeculationPilotSpec

Json = dict[str, Any]


def rounded(value: float | None, digits: int = 6) -> float | None:
    """`value` rounded for a report or a manifest; None for none, or for what is not a finite number."""
    return None if value is None or not math.isfinite(value) else round(value, digits)


def length_summary(lengths: Lengths) -> Json | None:
    """A length distribution's count, geometric and arithmetic means, log-spread and bounds."""
    mean, sd = lengths.log.mean, lengths.log.sd
    if mean is None or lengths.min is None or lengths.max is None:
        return None
    sigma = sd or 0.0
    return {
        "n": lengths.log.n,
        "geometricMean": rounded(math.exp(mean), 1),
        "mean": rounded(math.exp(mean + sigma * sigma / 2), 1),
        "sigmaOfLog": rounded(sigma, 4),
        "min": lengths.min,
        "max": lengths.max,
    }


def _mix_length(lengths: Lengths) -> Any:
    """A loadgen length: lognormal with the observed mean and log-spread, within the observed bounds."""
    summary = length_summary(lengths)
    if summary is None:
        return 128
    if summary["sigmaOfLog"] == 0 or summary["min"] == summary["max"]:
        return int(summary["min"])
    return {
        "dist": "lognormal",
        "mean": summary["mean"],
        "sigma": summary["sigmaOfLog"],
        "min": summary["min"],
        "max": summary["max"],
    }


def replay_workload(
    spec: SpeculationPilotSpec, evidence: Evidence, only: Collection[str] | None = None
) -> tuple[Json, float]:
    """The observed workload (of the scopes in `only`, else all) as a loadgen mix (weights are the
    scopes' arrival rates) and its total rate."""
    scopes = []
    total = 0.0
    for scope in spec.scopes:
        if only is not None and scope.name not in only:
            continue
        found = evidence.scopes.get(scope.name)
        rate = found.arrival_rate.mean if found is not None else None
        if found is None or not rate:
            continue
        total += rate
        entry: Json = {
            "name": scope.name,
            "weight": rounded(rate, 4),
            "input_tokens": _mix_length(found.prompt_tokens),
            "output_tokens": _mix_length(found.output_tokens),
        }
        deadline = scope.deadline or spec.router.request_timeout
        entry["deadline_s"] = deadline.total_seconds()
        scopes.append(entry)
    return {"scopes": scopes}, total
