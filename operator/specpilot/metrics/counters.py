"""Counter increases over a window, across resets, as PromQL's ``increase`` counts them.

Every vLLM count lives in the API-server process and restarts at 0 with it, so a series that went
down was reset: the increase then adds the value after the drop (what was counted since the
reset), a lower bound, and says that a reset happened so the window can be judged inconclusive.
Unlike PromQL nothing is extrapolated to the window's edges: the increase runs from the first
snapshot to the last, which the caller picks as the scrapes nearest those edges.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from specpilot.metrics.exposition import Labels, label


@dataclass(frozen=True, slots=True)
class Increase:
    """How much a counter grew, and how many times it was reset on the way (a value lower bound then)."""

    value: float = 0.0
    resets: int = 0

    def __add__(self, other: Increase) -> Increase:
        return Increase(self.value + other.value, self.resets + other.resets)


def increase(values: Sequence[float]) -> Increase:
    """The increase over consecutive snapshots of one series: each drop is a reset to 0."""
    total, resets = 0.0, 0
    for before, after in itertools.pairwise(values):
        if after < before:
            total += after
            resets += 1
        else:
            total += after - before
    return Increase(total, resets)


def total(increases: Iterable[Increase]) -> Increase:
    """The sum over series (an arm's pods, a pod's engines); a reset anywhere is counted."""
    return sum(increases, Increase())


def bucket_increases(increases: Iterable[tuple[Labels, Increase]]) -> list[tuple[float, float]]:
    """Cumulative bucket increases of any series summed by ``le`` (``sum by (le)``), as (upper bound, count).

    Series without a numeric ``le`` are left out, as PromQL leaves out samples without one.
    """
    by_bound: dict[float, float] = {}
    for labels, grown in increases:
        le = label(labels, "le")
        try:
            bound = float(le) if le is not None else math.nan
        except ValueError:
            continue
        if not math.isnan(bound):
            by_bound[bound] = by_bound.get(bound, 0.0) + grown.value
    return sorted(by_bound.items())
