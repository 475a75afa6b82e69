"""The verdict on a scheduled speculative arm: a win below its switch, no worse than the control above."""

from __future__ import annotations

import pytest

from specpilot.analysis.bands import MIN_INDEPENDENT, Band, Comparison
from specpilot.analysis.scheduled import MARGIN, ScheduleVerdict, judge_schedule, no_worse, noninferior_level, worse

SE = 0.01  # each band's standard error, relative to its mean


def band(load: float, in_flight: float, tpct: float, *, windows: float = MIN_INDEPENDENT) -> Band:
    return Band(
        first=0,
        last=0,
        low=load * 0.9,
        high=load * 1.1,
        load=load,
        in_flight=in_flight,
        windows=int(windows),
        independent=windows,
        tpct=tpct,
        tpct_se=SE * tpct,
        ttft={},
        ttft_width=1,
        ttft_p99=None,
        e2e=None,
        routed=100,
        on_time=100,
    )


def pair(load: float, in_flight: float, ratio: float, *, windows: float = MIN_INDEPENDENT) -> Comparison:
    """The scheduled arm at `ratio` of the control arm's 10 ms per committed token, at one load."""
    return Comparison(
        band=band(load, in_flight, 0.010 * ratio, windows=windows),
        compared=band(load, in_flight, 0.010, windows=windows),
        confidence=0.99,
    )


def judge(comparisons: list[Comparison], switch: int) -> ScheduleVerdict:
    return judge_schedule(comparisons, switch, confidence=0.95)


def test_a_schedule_that_wins_below_its_switch_and_holds_even_above_is_adopted_up_to_the_highest_load() -> None:
    verdict = judge([pair(1, 2, 0.5), pair(2, 4, 0.6), pair(4, 9, 1.0), pair(6, 14, 0.99)], switch=6)
    assert [c.band.load for c in verdict.wins_below] == [1, 2]
    assert [c.band.load for c in verdict.measured_above] == [4, 6]
    assert verdict.adopted and verdict.worse_above == ()
    assert verdict.envelope_high == pytest.approx(6.6)


def test_a_band_above_the_switch_slower_by_more_than_the_margin_is_not_adopted_and_named() -> None:
    verdict = judge([pair(1, 2, 0.5), pair(4, 9, 1.0), pair(6, 14, 1.08)], switch=6)
    assert not verdict.adopted
    assert [c.band.load for c in verdict.worse_above] == [6]


def test_within_the_margin_but_too_noisy_to_show_it_is_not_no_worse() -> None:
    """1.02x is inside the 3% margin, but with a 1% error on each arm it is not beyond their spread."""
    close = pair(4, 9, 1.02)
    assert not no_worse(close, confidence=0.95)
    assert no_worse(pair(4, 9, 1.0), confidence=0.95)
    assert not judge([pair(1, 2, 0.5), close], switch=6).adopted


def test_a_switch_never_crossed_is_no_evidence_for_the_other_side() -> None:
    verdict = judge([pair(1, 2, 0.5), pair(2, 4, 0.6)], switch=6)
    assert verdict.measured_above == () and not verdict.adopted


def test_thin_bands_above_the_switch_neither_count_nor_block() -> None:
    thin = pair(6, 14, 1.3, windows=MIN_INDEPENDENT / 3)
    verdict = judge([pair(1, 2, 0.5), pair(4, 9, 1.0), thin], switch=6)
    assert verdict.adopted and verdict.worse_above == ()
    assert thin not in verdict.measured_above


def test_no_win_below_the_switch_is_not_adopted_however_even_above() -> None:
    assert not judge([pair(1, 2, 0.99), pair(4, 9, 1.0)], switch=6).adopted


def test_each_band_above_is_tested_at_the_pilots_confidence_not_a_share_of_it() -> None:
    """Shown no worse only if shown no worse at every band: no band's test needs a share of the level."""
    even = [pair(load, 6 + load, 1.0) for load in range(1, 9)]
    assert judge([pair(0.5, 2, 0.5), *even], switch=6).adopted


def test_the_margin_is_stated_and_used() -> None:
    slower = pair(4, 9, 1.05)
    assert not no_worse(slower, confidence=0.95)
    assert no_worse(slower, confidence=0.95, margin=0.10)
    assert judge([pair(1, 2, 0.5)], switch=6).margin == MARGIN


def test_revised_looks_spend_what_is_left_of_the_level() -> None:
    levels = [noninferior_level(0.95, look) for look in range(1, 200)]
    assert levels == sorted(levels)  # each later look asks for more confidence
    assert sum(1 - level for level in levels) <= 0.05 + 1e-12


def test_a_band_above_the_switch_is_shown_worse_no_worse_or_unsettled() -> None:
    """Within the margin on too few windows is unsettled, not a loss: only a band shown beyond the margin
    (1.08x with a 1% error on each arm) is shown worse."""
    slower, close, even = pair(6, 14, 1.08), pair(4, 9, 1.02), pair(5, 11, 1.0)
    verdict = judge([pair(1, 2, 0.5), close, even, slower], switch=3)
    assert verdict.worse_above == (close, slower)
    assert verdict.shown_worse == (slower,) and verdict.unsettled_above == (close,)
    assert worse(slower, confidence=0.95) and not worse(close, confidence=0.95) and not worse(even, confidence=0.95)
