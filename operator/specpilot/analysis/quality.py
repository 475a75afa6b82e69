"""Quality gates, separate from speed: greedy-probe agreement and business webhooks.

The operator runs the probes and calls the webhooks; these functions turn what came back into checks
that `judge_window` takes as `extra`. Verification is probability computation, not fact checking, so
agreement is judged against its own minimum and never traded against a speedup.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specpilot.analysis.checks import Check, inconclusive
from specpilot.api.reasons import MetricName
from specpilot.api.spec import Quality
from specpilot.api.status import Verdict


@dataclass(frozen=True)
class ProbeResult:
    """Agreement of the speculative arm's greedy output with the baseline's, from one probe round."""

    agreement: float | None  # None: the probes could not be compared
    pairs: int
    mismatches: tuple[str, ...] = ()  # "prompt #i (streamed)": where the arms disagreed
    error: str | None = None


@dataclass(frozen=True)
class WebhookResult:
    """One webhook's answer about one window."""

    name: str
    ok: bool
    critical: bool
    detail: str


def probe_check(agreement: float | None, *, quality: Quality, probes: int | None = None) -> Check:
    """The share of greedy probes whose speculative output equals the baseline's; a hard limit.

    `agreement` is None when no probe round has finished yet (or none could reach both arms)."""
    metric = MetricName.PROBE_AGREEMENT
    if agreement is None or not math.isfinite(agreement):
        return inconclusive(metric, "probe agreement: no completed probe round", hard=True)
    evidence = f"{agreement:.1%} of {probes} probes agree" if probes is not None else f"{agreement:.1%} agree"
    if agreement < quality.min_agreement:
        verdict, reason = Verdict.FAIL, f"probe agreement {agreement:.1%} is below {quality.min_agreement:.1%}"
    else:
        verdict, reason = Verdict.PASS, f"probe agreement {agreement:.1%} is at least {quality.min_agreement:.1%}"
    return Check(
        metric=metric,
        verdict=verdict,
        observed=agreement,
        threshold=quality.min_agreement,
        evidence=evidence,
        reason=reason,
        hard=True,
    )


def webhook_check(name: str, ok: bool, *, critical: bool, detail: str = "") -> Check:
    """One webhook's answer for the window: a 2xx passes; a non-2xx, a timeout or no answer fails.

    A critical webhook that fails flips the scope at once; another counts as an ordinary failed
    check towards failureLimit."""
    kind = "critical webhook" if critical else "webhook"
    return Check(
        metric=MetricName.WEBHOOK,
        verdict=Verdict.PASS if ok else Verdict.FAIL,
        evidence=detail,
        reason=f"{kind} {name} {'passed' if ok else 'failed'}" + (f": {detail}" if detail and not ok else ""),
        hard=critical,
    )
