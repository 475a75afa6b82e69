"""The verdict on a scheduled speculative arm: one whose draft proposes k tokens up to a batch size and
none above it (vLLM's dynamic speculative decoding, `wire.batchschedule`).

Such a config is deployable only if it pays on both sides of its switch: below it, speculation must win
as a plain speculative arm wins (`Comparison.wins`); above it the engine decodes ordinarily, so there it
must be no worse than the control arm, up to the highest load measured. "No worse" is a non-inferiority
test: the hypothesis that time per committed token is `MARGIN` worse or more is rejected beyond its
standard error (window by window against the control arm, which serves the same requests:
`Comparison.excess`). It must be rejected at every full band above the switch, an
intersection-union test, so each band is tested at the pilot's own confidence, not a share of it (the
config is called no worse only if it is shown no worse everywhere); `noninferior_level` spreads that
level over the looks a revised decision takes.

Which side of the switch a band lies on is read from the requests the speculative arm held in flight
per replica there (the router's count, at least the engine's batch): a band whose mean lies at or below
the switch batch drafted for most of its steps. A band that straddles it (its load ranges over both
sides) counts above, the stricter side. Pure.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from statistics import NormalDist

from specpilot.analysis.bands import Comparison
from specpilot.analysis.stats import spent_alpha
from specpilot.api.spec import SpeculationPilotSpec
from specpilot.wire.batchschedule import switched_off_above

MARGIN = 0.03  # above the switch, time per committed token at most 3% worse than the control arm's


@dataclass(frozen=True)
class ScheduledArm:
    """A speculative arm whose draft stops drafting above a batch: its switch, and the schedule as the
    engine's vLLM reads it (`--speculative-config` key and value)."""

    switch: int
    schedule: str


def scheduled_arm(spec: SpeculationPilotSpec) -> ScheduledArm | None:
    """The pilot's speculative arm as a scheduled one; None where its draft drafts at every batch."""
    draft = spec.speculative.draft
    if not draft.schedule:
        return None
    ranges = [r.batch_range for r in draft.schedule]
    switch = switched_off_above(ranges)
    if switch is None:
        return None
    value = json.dumps([replace(r, k=min(r.k, draft.num_speculative_tokens)).render() for r in sorted(ranges)])
    return ScheduledArm(switch=switch, schedule=f'"{spec.vllm_release.schedule_key}": {value}')


def noninferior_level(confidence: float, look: int) -> float:
    """The confidence of look `look` (1-based) of a decision stated and then revised: the level's alpha
    spent over the looks (`stats.spent_alpha`: three quarters at the first, the rest over the later ones),
    so that however often the decision is revised, a worse config is called no worse no more often than
    1 - `confidence` in all."""
    return 1 - spent_alpha(look, alpha=1 - confidence, failure_limit=1)


def _past_margin(comparison: Comparison, margin: float) -> tuple[float, float] | None:
    """How far the speculative band's time per committed token lies past `margin` slower than the
    compared one (negative: inside it), and its standard error (`Comparison.excess`); None where
    unmeasured or thin."""
    return comparison.excess(margin) if comparison.powered else None


def no_worse(comparison: Comparison, *, confidence: float, margin: float = MARGIN) -> bool:
    """The speculative band is no more than `margin` slower than the compared one, beyond its standard
    error at `confidence`: the hypothesis that it is `margin` slower or worse is rejected.
    False where unmeasured or thin."""
    found = _past_margin(comparison, margin)
    return found is not None and -found[0] > NormalDist().inv_cdf(confidence) * found[1]


def worse(comparison: Comparison, *, confidence: float, margin: float = MARGIN) -> bool:
    """The speculative band is more than `margin` slower than the compared one, beyond its standard error
    at `confidence`. A band neither `no_worse` nor `worse` is unsettled: its windows cannot
    tell yet. False where unmeasured or thin."""
    found = _past_margin(comparison, margin)
    return found is not None and found[0] > NormalDist().inv_cdf(confidence) * found[1]


def below_switch(comparison: Comparison, switch: int) -> bool:
    """The band drafted for most of its steps: its requests in flight per replica at most `switch`."""
    in_flight = comparison.band.in_flight
    return in_flight is not None and in_flight <= switch


@dataclass(frozen=True)
class ScheduleVerdict:
    """Both sides of the switch, each band's finding, and what they add up to."""

    switch: int  # the last batch that drafts
    below: tuple[Comparison, ...]
    above: tuple[Comparison, ...]
    worse_above: tuple[Comparison, ...]  # full bands above the switch not shown to be no worse
    margin: float
    shown_worse: tuple[Comparison, ...] = ()  # of those, the ones shown more than `margin` slower

    @property
    def unsettled_above(self) -> tuple[Comparison, ...]:
        """Full bands above the switch shown neither no worse nor worse: more windows would tell."""
        return tuple(c for c in self.worse_above if c not in self.shown_worse)

    @property
    def wins_below(self) -> tuple[Comparison, ...]:
        return tuple(c for c in self.below if c.wins)

    @property
    def measured_above(self) -> tuple[Comparison, ...]:
        return tuple(c for c in self.above if c.measured and c.powered)

    @property
    def adopted(self) -> bool:
        """It wins below its switch and is no worse at every full band measured above it, and at least
        one such band was measured (the switch was crossed)."""
        return bool(self.wins_below) and bool(self.measured_above) and not self.worse_above

    @property
    def envelope_high(self) -> float | None:
        """The highest load it was shown to pay or hold even at: the upper edge of the envelope."""
        held = [c.band.high for c in (*self.wins_below, *self.measured_above)]
        return max(held) if held else None


def judge_schedule(
    comparisons: Sequence[Comparison], switch: int, *, confidence: float, margin: float = MARGIN, look: int = 1
) -> ScheduleVerdict:
    """The scheduled arm's bands split at `switch`, with the non-inferiority test of each full band above
    it at `confidence` (the pilot's) spent over `look` looks."""
    level = noninferior_level(confidence, look)
    below = tuple(c for c in comparisons if below_switch(c, switch))
    above = tuple(c for c in comparisons if not below_switch(c, switch))
    worse_above = tuple(
        c for c in above if c.measured and c.powered and not no_worse(c, confidence=level, margin=margin)
    )
    shown = tuple(c for c in worse_above if worse(c, confidence=level, margin=margin))
    return ScheduleVerdict(
        switch=switch, below=below, above=above, worse_above=worse_above, margin=margin, shown_worse=shown
    )
