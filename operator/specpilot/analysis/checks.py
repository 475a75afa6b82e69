"""One judged check of a window: the metric, the verdict, the number against its limit, and why.

Every check the judge and the quality gates produce has this one shape, so status, fallback records,
Events and the report read them alike (Argo Rollouts' measurement, Kayenta's metric result).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specpilot.api.reasons import FallbackReason, MetricName
from specpilot.api.status import Verdict

# The probes' checks: one per probe kind, or probeAgreement while no round has answered.
PROBE_METRICS = frozenset(
    {
        MetricName.PROBE_AGREEMENT,
        MetricName.PROBE_GREEDY,
        MetricName.PROBE_STOP,
        MetricName.PROBE_TOOL_CALL,
        MetricName.PROBE_STRUCTURED,
        MetricName.PROBE_CANCEL,
        MetricName.PROBE_SAMPLED,
    }
)
# Why a hard check that fails flips its scope: the record's reason, by the metric that tripped.
FALLBACK_FOR = {
    MetricName.KV_CACHE_USAGE: FallbackReason.KV_CACHE_PRESSURE,
    **dict.fromkeys(PROBE_METRICS, FallbackReason.QUALITY_REGRESSION),
    MetricName.WEBHOOK: FallbackReason.CRITICAL_WEBHOOK_FAILED,
}


@dataclass(frozen=True, kw_only=True)
class Check:
    """The judgement of one metric in one window.

    `hard` marks a limit that flips the scope as soon as it fails (error, timeout and rejection
    rates, sustained KV-cache usage, acceptance length, probe agreement, a critical webhook); the
    other checks flip it only after failureLimit failing windows in a row."""

    metric: MetricName
    verdict: Verdict
    observed: float | None = None
    threshold: float | None = None
    evidence: str = ""  # the interval, the test or the counts behind the verdict
    reason: str = ""  # one clause, for the window's reason sentence
    hard: bool = False
    note: str = ""  # what the check left out, for the window's reason whatever the verdict

    def __post_init__(self) -> None:
        # Status and records are JSON: a NaN or an infinity cannot travel, and means no figure anyway.
        for name in ("observed", "threshold"):
            value = getattr(self, name)
            if value is not None and not math.isfinite(value):
                raise ValueError(f"{name} must be finite, not {value}")

    @property
    def fires(self) -> bool:
        """A hard limit that failed: the scope flips now."""
        return self.hard and self.verdict is Verdict.FAIL

    @property
    def fallback(self) -> FallbackReason:
        """The record's reason when this check flips a scope."""
        if not self.hard:
            return FallbackReason.THRESHOLD_EXCEEDED
        return FALLBACK_FOR.get(self.metric, FallbackReason.HARD_LIMIT)


def inconclusive(metric: MetricName, reason: str, *, hard: bool = False, evidence: str = "") -> Check:
    """A check that could not be judged, and why: never a pass."""
    return Check(metric=metric, verdict=Verdict.INCONCLUSIVE, reason=reason, hard=hard, evidence=evidence)


def finite(value: float | None) -> float | None:
    """`value` when it is a finite number, else None (a figure that cannot be trusted)."""
    return value if value is not None and math.isfinite(value) else None
