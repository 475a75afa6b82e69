"""Counter increases across resets, summed over series, and bucket increases summed by `le`."""

from __future__ import annotations

import math

import pytest

from specpilot.metrics.counters import Increase, bucket_increases, increase, total


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ((), Increase(0.0, 0)),
        ((5.0,), Increase(0.0, 0)),
        ((1.0, 3.0, 6.0), Increase(5.0, 0)),
        ((10.0, 10.0), Increase(0.0, 0)),
        ((0.5, 1.25), Increase(0.75, 0)),
        ((10.0, 4.0), Increase(4.0, 1)),  # restarted: what it counted since is the increase
        ((10.0, 12.0, 3.0, 5.0), Increase(7.0, 1)),  # 2 before the restart, 3 + 2 after
        ((5.0, 0.0, 0.0, 2.0), Increase(2.0, 1)),
        ((3.0, 1.0, 0.5), Increase(1.5, 2)),
    ],
    ids=["none", "one", "growing", "flat", "fractional", "reset", "reset-mid-way", "reset-to-zero", "two-resets"],
)
def test_increase_counts_a_drop_as_a_reset_as_promql_does(values: tuple[float, ...], expected: Increase) -> None:
    assert increase(values) == expected


def test_a_nan_snapshot_makes_the_increase_nan() -> None:
    assert math.isnan(increase((1.0, math.nan, 3.0)).value)


def test_totals_add_values_and_resets() -> None:
    assert total([Increase(1.0, 0), Increase(2.5, 1), Increase(0.5, 2)]) == Increase(4.0, 3)
    assert total([]) == Increase()


def test_bucket_increases_sum_by_le_over_series_and_skip_non_numeric_bounds() -> None:
    series = [
        ((("engine", "0"), ("le", "0.1")), Increase(2.0)),
        ((("engine", "0"), ("le", "+Inf")), Increase(5.0)),
        ((("engine", "1"), ("le", "0.1")), Increase(1.0)),
        ((("engine", "1"), ("le", "+Inf")), Increase(1.0)),
        ((("engine", "1"), ("le", "1.0")), Increase(1.0)),
        ((("engine", "1"), ("le", "wide")), Increase(9.0)),
        ((("engine", "1"),), Increase(9.0)),
    ]
    assert bucket_increases(series) == [(0.1, 3.0), (1.0, 1.0), (math.inf, 6.0)]
