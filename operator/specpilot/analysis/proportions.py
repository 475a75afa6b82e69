"""A one-sided test on two proportions: is the first arm's rate of an event above the second's?

Fisher's exact test, conditioned on the total count of events: exact at any sample size, so a probe
check that has seen a handful of rounds is neither flipped by chance nor held back by a normal
approximation that does not hold yet. Pure, stdlib only.
"""

from __future__ import annotations

import math


def _log_choose(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def rate_above_pvalue(events: int, trials: int, other_events: int, other_trials: int) -> float:
    """P(X >= events) for X, the first sample's events, hypergeometric given both samples' sizes and
    the total count of events: the p-value of "the first rate is above the second's"."""
    if not (0 <= events <= trials and 0 <= other_events <= other_trials):
        raise ValueError("events must lie between 0 and their trials")
    total, size = events + other_events, trials + other_trials
    if total == 0 or trials == 0 or other_trials == 0:
        return 1.0
    denominator = _log_choose(size, trials)
    top = min(trials, total)
    tail = math.fsum(
        math.exp(_log_choose(total, k) + _log_choose(size - total, trials - k) - denominator)
        for k in range(events, top + 1)
        if trials - k <= size - total
    )
    return min(1.0, tail)
