"""Each arm at its own load: binned at the load it drew, and the compared arm read at the speculative
band's own load by interpolation between its neighbouring bins, never beyond the loads it ran at."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from specpilot.analysis.bands import MIN_RELATIVE_SE, bands, compare
from specpilot.analysis.decision import facts
from specpilot.analysis.evidence import (
    STORE_VERSION,
    ArmLoad,
    BinArm,
    Evidence,
    Moments,
    WindowLoad,
    dump,
    load,
    load_bin,
    matched_load,
    record_window,
)
from specpilot.analysis.window import ScopeWindow
from specpilot.api.reasons import FallbackReason, MetricName
from specpilot.api.status import FallbackRecord, ScopeState, Verdict, Window
from specpilot.wire.names import Arm
from tests.unit.analysis.conftest import END, arm, engine
from tests.unit.analysis.crossover import ordinary, pilot

PER_LOAD = 4


def per_token(load: float) -> float:
    """Time per token rising with load, as it does near the crossover: both arms decode alike."""
    return 0.01 * load


def climb(pairs: tuple[tuple[float, float], ...]) -> Evidence:
    """`PER_LOAD` windows at each (speculative, control) offered load per replica, both arms decoding
    as `per_token` says at their own load."""
    evidence = Evidence(compared=Arm.CONTROL)
    step = 0
    for spec_load, control_load in pairs:
        for _ in range(PER_LOAD):
            step += 1
            end = END + timedelta(seconds=15 * step)
            window = ScopeWindow(
                scope="chat",
                start=end - timedelta(seconds=15),
                end=end,
                compared=arm(200, seed=2 * step, per_token=per_token(control_load)),
                speculative=arm(200, seed=2 * step + 1, per_token=per_token(spec_load)),
                compared_engine=engine(),
                speculative_engine=engine(),
            )
            loads = {
                Arm.SPECULATIVE: ArmLoad(offered_per_replica=spec_load),
                Arm.CONTROL: ArmLoad(offered_per_replica=control_load),
            }
            evidence = record_window(
                evidence,
                window,
                WindowLoad(arms=loads, arrival_rate=spec_load),
                verdict=Verdict.PASS,
                quality_failed=False,
            )
    return evidence


def test_an_arm_that_drew_more_load_is_binned_at_its_own_and_read_at_the_speculative_bands_load() -> None:
    evidence = climb(((3.5, 3.5), (4.0, 4.67)))
    bins = evidence.scopes["chat"].bins
    index = load_bin(4.0)
    assert load_bin(4.67) == index  # the same quarter-octave bin, each arm at its own load within it
    assert bins[Arm.SPECULATIVE][index].load.mean == pytest.approx(4.0)
    assert bins[Arm.CONTROL][index].load.mean == pytest.approx(4.67)
    low, high = bins[Arm.CONTROL][load_bin(3.5)], bins[Arm.CONTROL][index]
    assert low.tpct.mean is not None and high.tpct.mean is not None
    at_four = low.tpct.mean + (high.tpct.mean - low.tpct.mean) * (4.0 - 3.5) / (4.67 - 3.5)

    comparisons = compare(bands(bins[Arm.SPECULATIVE]), bins[Arm.CONTROL])
    assert [c.band.load for c in comparisons] == pytest.approx([3.5, 4.0])
    top = comparisons[1]
    assert top.compared is not None
    assert top.compared.load == pytest.approx(4.0)
    assert top.compared.tpct == pytest.approx(at_four)
    # its counts are its own windows' in the band's bins, untouched by the move
    assert (top.compared.windows, top.compared.routed, top.compared.on_time) == (PER_LOAD, high.routed, high.on_time)
    # Identical arms: read at the control's own 4.67, speculation would seem 14% faster; at 4.00 it is not.
    assert top.band.tpct / high.tpct.mean < 0.9
    assert top.ratio == pytest.approx(1.0, abs=0.04)
    assert not top.wins and not top.thin_win


def test_a_flip_is_placed_at_the_speculative_arms_own_load() -> None:
    assert matched_load({Arm.SPECULATIVE: 4.0, Arm.CONTROL: 4.67}) == {Arm.SPECULATIVE: 4.0, Arm.CONTROL: 4.67}
    flip = FallbackRecord(
        scope="chat",
        at=END,
        reason=FallbackReason.THRESHOLD_EXCEEDED,
        metric=MetricName.TIME_PER_COMMITTED_TOKEN_RATIO,
        observed=1.2,
        threshold=1.1,
        window=Window(start=END - timedelta(seconds=15), end=END),
        loads={Arm.SPECULATIVE: 4.0, Arm.CONTROL: 4.67},
    )
    found = facts(
        "chat",
        Evidence(compared=Arm.CONTROL),
        comparisons=(),
        fallbacks=(flip,),
        confidence=0.9,
        state=ScopeState.ROLLED_BACK,
    )
    assert found.flip_load == 4.0


@pytest.mark.parametrize("alternative", [False, True], ids=["control", "alternative-against-control"])
def test_with_equal_loads_every_comparison_reads_the_compared_arms_own_band_unmoved(alternative: bool) -> None:
    evidence = pilot({"chat": 0.6}, alternative=ordinary if alternative else None)
    bins = evidence.scopes["chat"].bins
    arm_ = Arm.ALTERNATIVE if alternative else Arm.SPECULATIVE
    comparisons = compare(bands(bins[arm_], overlap=evidence.overlap), bins[Arm.CONTROL], overlap=evidence.overlap)
    assert len(comparisons) >= 3
    for c in comparisons:
        inside = {i: cell for i, cell in bins[Arm.CONTROL].items() if c.band.first <= i <= c.band.last}
        (own,) = bands(inside, overlap=evidence.overlap, min_windows=float("inf"))
        assert c.compared == own
        assert c.compared.load == c.band.load


def cell(load: float, tpct: float, windows: int = 3) -> BinArm:
    spread = 0.05 * tpct  # each window's figure 5% about the bin's
    return BinArm(
        load=Moments(n=windows, sum=windows * load, sum_sq=windows * load * load),
        tpct=Moments(n=windows, sum=windows * tpct, sum_sq=windows * tpct * tpct + (windows - 1) * spread * spread),
        routed=40 * windows,
        on_time=39 * windows,
    )


CONTROL = {load_bin(3.9): cell(3.9, 0.039), load_bin(4.6): cell(4.6, 0.046)}


@pytest.mark.parametrize(
    ("spec_load", "expected_load", "expected_tpct"),
    [
        pytest.param(3.5, 3.9, 0.039, id="below-the-lowest-control-load-no-shift"),
        pytest.param(4.7, 4.6, 0.046, id="above-the-highest-control-load-no-shift"),
        pytest.param(4.2, 4.2, 0.042, id="between-two-control-loads-interpolated"),
        pytest.param(4.6, 4.6, 0.046, id="at-a-control-load"),
    ],
)
def test_the_compared_arm_is_never_read_beyond_the_loads_it_ran_at(
    spec_load: float, expected_load: float, expected_tpct: float
) -> None:
    (band,) = bands({load_bin(spec_load): cell(spec_load, 0.03)})
    (comparison,) = compare([band], CONTROL)
    inside = {i: c for i, c in CONTROL.items() if band.first <= i <= band.last}
    (own,) = bands(inside, min_windows=float("inf"))
    found = comparison.compared
    assert found is not None
    assert found.load == pytest.approx(expected_load)
    assert found.tpct == pytest.approx(expected_tpct)
    assert found.tpct_se == pytest.approx(own.tpct_se * expected_tpct / own.tpct)  # here each bin's spread is 5%
    assert found.tpct_se >= MIN_RELATIVE_SE * found.tpct
    assert (found.windows, found.routed, found.on_time, found.ttft) == (own.windows, own.routed, own.on_time, own.ttft)


def test_a_band_alone_in_its_bins_with_no_neighbour_is_read_as_measured() -> None:
    lone = {load_bin(4.6): cell(4.6, 0.046)}
    (band,) = bands({load_bin(4.2): cell(4.2, 0.03)})
    (comparison,) = compare([band], lone)
    (own,) = bands(lone, min_windows=float("inf"))
    assert comparison.compared == own


def _version_one(evidence: Evidence) -> str:
    raw = json.loads(dump(evidence))
    return json.dumps({**raw, "version": 1})


def test_a_version_one_store_compared_with_control_drops_its_pair_binned_bins_and_keeps_the_rest() -> None:
    current = pilot({"chat": 0.8}, loads=(1, 2), rehearsed_at=(2,))
    assert current.version == STORE_VERSION == 2 and current.scopes["chat"].rehearsed
    upgraded = load(_version_one(current))
    scope, before = upgraded.scopes["chat"], current.scopes["chat"]
    assert upgraded.version == STORE_VERSION
    assert scope.bins == {} and scope.rehearsed == {}
    assert scope.model_copy(update={"bins": before.bins, "rehearsed": before.rehearsed}) == before
    assert upgraded.model_copy(update={"scopes": current.scopes}) == current
    assert load(dump(current)) == current


def test_a_version_one_store_compared_with_production_keeps_its_bins() -> None:
    current = climb(((2.0, 2.0),)).model_copy(update={"compared": Arm.BASELINE})
    assert load(_version_one(current)) == current


def test_an_unknown_store_version_is_refused() -> None:
    with pytest.raises(ValueError, match="version"):
        load(json.dumps({"version": STORE_VERSION + 1}))
