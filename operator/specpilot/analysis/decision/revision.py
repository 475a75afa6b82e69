"""What moved between a stated decision and a new one, worth stating again."""

from __future__ import annotations

import math
from collections.abc import Mapping

from specpilot.analysis.evidence import BINS_PER_OCTAVE
from specpilot.api.status import Decision, ScopeDecision


def revisions(
    previous: Decision,
    decision: Decision,
    *,
    before: Mapping[str, ScopeDecision | None],
    after: Mapping[str, ScopeDecision],
) -> list[str]:
    """What moved between a stated decision and a new one, worth stating again: an outcome or a defer
    reason, an envelope that moved by a load bin or more, a crossover measured or lost, or one outside
    the stated interval, or the alternative arm's verdict.
    Empty when the new one says the same within its noise (a scope not decided before is not a move)."""
    moved = _outcome_moved("the pilot", previous, decision)
    for name, new in after.items():
        old = before.get(name)
        if old is None:
            continue
        moved.extend(
            _outcome_moved(name, old, new) or _figures_moved(name, old, new) or _alternative_moved(name, old, new)
        )
    return moved


def _alternative_moved(name: str, old: ScopeDecision, new: ScopeDecision) -> list[str]:
    was, now = (d.alternative.verdict if d.alternative else None for d in (old, new))
    return [f"{name}: alternative arm {was} -> {now}"] if was is not None and now is not None and was != now else []


def _outcome_moved(who: str, old: Decision | ScopeDecision, new: Decision | ScopeDecision) -> list[str]:
    if old.outcome is not new.outcome:
        return [f"{who}: {old.outcome.value} -> {new.outcome.value}"]
    if old.defer_reason != new.defer_reason:
        return [f"{who}: Defer for {old.defer_reason} -> {new.defer_reason}"]
    return []


def _figures_moved(name: str, old: ScopeDecision, new: ScopeDecision) -> list[str]:
    out = []
    top, was = new.max_load, old.max_load
    if top is not None and was is not None and abs(math.log2(top / was)) >= 1 / BINS_PER_OCTAVE:
        out.append(f"{name}: envelope {was:.2f} -> {top:.2f} requests per second per replica")
    cross, low, high = new.crossover_load, old.crossover_low, old.crossover_high
    if (old.crossover_load is None) != (cross is None):
        stated = [f"{d.crossover_load:.2f}" if d.crossover_load is not None else "none" for d in (old, new)]
        out.append(f"{name}: crossover {stated[0]} -> {stated[1]}")
    elif cross is not None and low is not None and high is not None and not low <= cross <= high:
        out.append(f"{name}: crossover {old.crossover_load:.2f} -> {cross:.2f}, outside {low:.2f} to {high:.2f}")
    return out
