"""The compared pair window by window: with a control arm both arms serve the same requests at the same
load, so each window's difference between them is recorded, and a band's difference is tested against
the spread of those differences, not against both arms' spreads as if they were independent."""

from __future__ import annotations

import math
from datetime import timedelta

from specpilot.analysis.bands import bands, compare, crossover
from specpilot.analysis.evidence import ArmLoad, Evidence, WindowLoad, record_window
from specpilot.analysis.scheduled import no_worse, noninferior_level, worse
from specpilot.analysis.window import ScopeWindow
from specpilot.api.status import Verdict
from specpilot.wire.names import Arm
from tests.unit.analysis.windows import END, arm, engine

WINDOWS = 18


def mirrored(ratio: float, *, compared: Arm = Arm.CONTROL, loads: tuple[float, float] = (2.0, 2.0)) -> Evidence:
    """`WINDOWS` windows whose requests both arms serve (the same seed: the same lengths), the speculative
    arm at `ratio` of the compared arm's time per token; the window's time per token drifts by a quarter
    up and down across them, as a band's does with its load."""
    evidence = Evidence(compared=compared, overlap=3.0)
    for step in range(WINDOWS):
        end = END + timedelta(seconds=5 * step)
        per_token = 0.02 * (1 + 0.25 * math.sin(step))
        window = ScopeWindow(
            scope="s",
            start=end - timedelta(seconds=15),
            end=end,
            compared=arm(40, seed=step, per_token=per_token),
            speculative=arm(40, seed=step, per_token=per_token * ratio),
            compared_engine=engine(),
            speculative_engine=engine(),
        )
        offered = {Arm.SPECULATIVE: loads[0], compared: loads[1]}
        load = WindowLoad(arms={a: ArmLoad(offered_per_replica=v) for a, v in offered.items()}, arrival_rate=4.0)
        evidence = record_window(evidence, window, load, verdict=Verdict.PASS, quality_failed=False)
    return evidence


def test_each_window_records_the_pairs_difference_on_both_arms() -> None:
    bins = mirrored(1.01).scopes["s"].bins
    [spec], [control] = bins[Arm.SPECULATIVE].values(), bins[Arm.CONTROL].values()
    difference = spec.paired[Arm.CONTROL]
    assert difference.n == WINDOWS and control.paired[Arm.SPECULATIVE].n == WINDOWS
    assert difference.mean == -control.paired[Arm.SPECULATIVE].mean
    assert difference.mean is not None and spec.tpct.mean is not None and control.tpct.mean is not None
    assert math.isclose(difference.mean, spec.tpct.mean - control.tpct.mean)


def test_arms_binned_at_different_loads_are_not_paired() -> None:
    bins = mirrored(1.01, compared=Arm.BASELINE, loads=(2.0, 6.0)).scopes["s"].bins
    assert all(not cell.paired for cells in bins.values() for cell in cells.values())


def test_a_band_even_with_the_control_arm_is_shown_no_worse_from_its_pairs_where_independence_could_not() -> None:
    evidence = mirrored(1.0)
    scope = evidence.scopes["s"]
    spec = bands(scope.bins[Arm.SPECULATIVE], overlap=evidence.overlap)
    [paired] = compare(spec, scope.bins[Arm.CONTROL], overlap=evidence.overlap, against=Arm.CONTROL)
    [independent] = compare(spec, scope.bins[Arm.CONTROL], overlap=evidence.overlap)
    paired_excess, independent_excess = paired.excess(), independent.excess()
    assert paired_excess is not None and independent_excess is not None
    assert paired_excess[0] == independent_excess[0], "the same difference, the same windows"
    assert paired_excess[1] < independent_excess[1] / 3, (paired_excess, independent_excess)
    assert no_worse(paired, confidence=0.95) and not worse(paired, confidence=0.95)
    assert not no_worse(independent, confidence=0.95), "the drift across the band hides it when unpaired"
    # the floor on a pair's error leaves a revised decision's later looks able to show it
    assert no_worse(paired, confidence=noninferior_level(0.95, look=6))


def test_a_band_slower_by_more_than_the_margin_is_shown_worse_from_its_pairs() -> None:
    evidence = mirrored(1.08)
    scope = evidence.scopes["s"]
    spec = bands(scope.bins[Arm.SPECULATIVE], overlap=evidence.overlap)
    [found] = compare(spec, scope.bins[Arm.CONTROL], overlap=evidence.overlap, against=Arm.CONTROL)
    assert worse(found, confidence=0.95) and not no_worse(found, confidence=0.95)
    assert not found.wins


def test_the_crossover_is_drawn_from_each_bands_paired_difference() -> None:
    low, high = mirrored(0.8), mirrored(1.2, loads=(4.0, 4.0))
    bins = {a: {**low.scopes["s"].bins[a], **high.scopes["s"].bins[a]} for a in (Arm.SPECULATIVE, Arm.CONTROL)}
    spec = bands(bins[Arm.SPECULATIVE], overlap=3.0)
    paired = crossover(compare(spec, bins[Arm.CONTROL], overlap=3.0, against=Arm.CONTROL), confidence=0.9)
    independent = crossover(compare(spec, bins[Arm.CONTROL], overlap=3.0), confidence=0.9)
    assert paired is not None and independent is not None and paired.load == independent.load
    assert paired.high - paired.low < independent.high - independent.low
