"""Hard limits on the speculative arm: they flip the scope as soon as a window fails them.

Rates count over every request routed to the speculative arm that the arm is answerable for, so that
speed computed from successes alone cannot hide timeouts. A client error (a bad request) and a client
cancellation say nothing about the arm: they leave both the numerator and the denominator, since
counting them in the denominator would let clients that give up on a slow arm dilute its timeout
rate. Each rate fails when the counts show it above its limit at `confidence` (an exact binomial
test on this window alone: a limit fires on the current window, however long the scope has been
judged); a rate just above its limit on a handful of failures is not shown above it.

A timeout is the far end of slowness, and the queue that another scope's KV-cache pressure builds on
the arm slows every scope on it. So once that scope has been flipped back for it (`PressureFlip`),
the requests a scope sent before that flip leave its timeout rate: they waited in the queue the
other scope built, and the flip was the remedy. Errors and rejections still count.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from specpilot.analysis.checks import Check, inconclusive
from specpilot.analysis.stats import binomial_sf
from specpilot.analysis.window import ArmEngine, ArmRequests
from specpilot.api.reasons import MetricName
from specpilot.api.status import Verdict
from specpilot.wire.samples import RequestOutcome

# What each rate counts; CLIENT_ERROR and CLIENT_CANCEL are in none of them, nor in the denominator.
ERRORS = (RequestOutcome.UPSTREAM_ERROR, RequestOutcome.NO_ENDPOINT)
TIMEOUTS = (RequestOutcome.TIMEOUT,)  # plus ok requests that missed the scope's deadline (`late`)
REJECTIONS = (RequestOutcome.REJECTED,)
ANSWERABLE = (RequestOutcome.OK, *ERRORS, *TIMEOUTS, *REJECTIONS)

_RATE_NAME = {
    MetricName.ERROR_RATE: "error rate",
    MetricName.TIMEOUT_RATE: "timeout rate",
    MetricName.REJECTION_RATE: "rejection rate",
}


@dataclass(frozen=True)
class PressureFlip:
    """Another scope, flipped back at `at` for KV-cache pressure on the speculative arm."""

    scope: str
    at: datetime


def rate_checks(
    arm: ArmRequests,
    *,
    max_error: float,
    max_timeout: float,
    max_rejection: float,
    confidence: float,
    min_samples: int,
    pressure_flip: PressureFlip | None = None,
) -> tuple[Check, ...]:
    """Error, timeout and rejection rates of the speculative arm; the timeout rate without the
    requests sent before `pressure_flip`."""
    total = arm.count(*ANSWERABLE)
    timeouts, timeout_total, note = arm.count(*TIMEOUTS) + arm.late, total, ""
    if pressure_flip is not None:
        since = pressure_flip.at.timestamp()
        left_out = bisect_left(arm.answerable_starts, since)
        if left_out:
            timeouts -= bisect_left(arm.timeout_starts, since)
            timeout_total -= left_out
            note = (
                f"{left_out} requests sent before scope {pressure_flip.scope!r} was flipped back for "
                f"KV-cache pressure at {pressure_flip.at:%H:%M:%S} are left out of the timeout rate"
            )

    def rate(metric: MetricName, count: int, of: int, limit: float, note: str = "") -> Check:
        return rate_check(metric, count, of, limit, confidence=confidence, min_samples=min_samples, note=note)

    return (
        rate(MetricName.ERROR_RATE, arm.count(*ERRORS), total, max_error),
        rate(MetricName.TIMEOUT_RATE, timeouts, timeout_total, max_timeout, note),
        rate(MetricName.REJECTION_RATE, arm.count(*REJECTIONS), total, max_rejection),
    )


def rate_check(
    metric: MetricName,
    count: int,
    total: int,
    limit: float,
    *,
    confidence: float,
    min_samples: int,
    note: str = "",
) -> Check:
    """`count` of `total` requests against a limit on their share; `note` says what was left out."""
    name = _RATE_NAME[metric]
    if total < min_samples:
        short = inconclusive(
            metric, f"{name}: {total} requests on the speculative arm, fewer than minSamples {min_samples}", hard=True
        )
        return replace(short, note=note)
    observed = count / total
    p_value = binomial_sf(count, total, limit)
    evidence = f"{count} of {total} requests; p={p_value:.2g} at a rate of {limit:g}"
    if observed > limit and p_value < 1 - confidence:
        verdict, reason = Verdict.FAIL, f"{name} {observed:.2%} is shown above {limit:.2%} ({count} of {total})"
    else:
        verdict, reason = Verdict.PASS, f"{name} {observed:.2%} is not shown above {limit:.2%}"
    return Check(
        metric=metric,
        verdict=verdict,
        observed=observed,
        threshold=limit,
        evidence=evidence + (f"; {note}" if note else ""),
        reason=reason,
        hard=True,
        note=note,
    )


def kv_cache_check(engine: ArmEngine, *, end: datetime, limit: float, sustained_for: timedelta, routed: int) -> Check:
    """KV-cache usage of the speculative arm above `limit` at every scrape of the last `sustained_for`.

    It flips the scopes that load the arm: a scope that sent it no request in the window is not
    flipped for another scope's pressure."""
    metric = MetricName.KV_CACHE_USAGE
    if engine.inconclusive:
        return inconclusive(metric, f"KV-cache usage: {engine.inconclusive}", hard=True)
    if routed == 0:
        return inconclusive(metric, "KV-cache usage: the scope sent no request to the speculative arm", hard=True)
    samples = sorted(engine.kv_usage)
    if not samples or not all(math.isfinite(usage) for _, usage in samples):
        return inconclusive(metric, "KV-cache usage: no usable scrape in the window", hard=True)
    since = end - sustained_for
    # The scrape at or just before the span's start says where usage stood when the span began.
    first = max((i for i, (at, _) in enumerate(samples) if at <= since), default=None)
    span = samples[first if first is not None else 0 :]
    lowest = min(usage for _, usage in span)
    seconds = sustained_for.total_seconds()
    evidence = f"{len(span)} scrapes since {since.isoformat()}, lowest {lowest:.3f}"
    if lowest <= limit:
        return Check(
            metric=metric,
            verdict=Verdict.PASS,
            observed=lowest,
            threshold=limit,
            evidence=evidence,
            reason=f"KV-cache usage was not above {limit:g} for the last {seconds:g}s",
            hard=True,
        )
    if first is None:
        covered = (end - samples[0][0]).total_seconds()
        return inconclusive(
            metric,
            f"KV-cache usage above {limit:g} at every scrape, but scrapes cover {covered:g}s of {seconds:g}s",
            hard=True,
            evidence=evidence,
        )
    return Check(
        metric=metric,
        verdict=Verdict.FAIL,
        observed=lowest,
        threshold=limit,
        evidence=evidence,
        reason=f"KV-cache usage stayed above {limit:g} for the last {seconds:g}s (lowest {lowest:.3f})",
        hard=True,
    )


def acceptance_check(engine: ArmEngine, *, minimum: float, draft_tokens: int) -> Check:
    """Mean committed tokens per speculative round (1 + accepted / drafts) against its minimum.

    An engine-wide counter ratio over every round of the window: thousands of rounds, so it is
    compared directly. A figure outside [1, 1 + draft_tokens] cannot come from this arm's engine."""
    metric = MetricName.ACCEPTANCE_LENGTH
    if engine.inconclusive:
        return inconclusive(metric, f"acceptance length: {engine.inconclusive}", hard=True)
    length = engine.acceptance_length
    if length is None or not math.isfinite(length):
        return inconclusive(metric, "acceptance length: the speculative engines reported none", hard=True)
    if not 1 <= length <= 1 + draft_tokens + 1e-9:
        return inconclusive(
            metric, f"acceptance length {length:.3f} is outside [1, {1 + draft_tokens}]: inconsistent", hard=True
        )
    evidence = f"1 + accepted / drafts over the window = {length:.3f}"
    if length < minimum:
        verdict, reason = Verdict.FAIL, f"acceptance length {length:.2f} is below {minimum:g}"
    else:
        verdict, reason = Verdict.PASS, f"acceptance length {length:.2f} is at least {minimum:g}"
    return Check(
        metric=metric, verdict=verdict, observed=length, threshold=minimum, evidence=evidence, reason=reason, hard=True
    )
