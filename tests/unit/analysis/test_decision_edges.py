"""Decisions at the edge of the evidence: a win in a band too thin to decide on, a flip with nothing measured
below it, a flip for a latency limit, and an adoption its TTFT limit bounds. Each first sentence states the
fact that decides, with its figure, and what would settle what is left."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from specpilot.analysis.decision import decide_pilot, decide_scope
from specpilot.analysis.evidence import Evidence
from specpilot.api.reasons import FallbackReason, MetricName
from specpilot.api.status import (
    AdoptionBound,
    DecisionOutcome,
    DecisionTrigger,
    DeferReason,
    FallbackRecord,
    LoadSpan,
    ScopeDecision,
    ScopeState,
    Window,
)
from specpilot.wire.names import Arm
from tests.unit.analysis.crossover import pilot
from tests.unit.analysis.windows import END

NOW = datetime(2026, 12, 1, tzinfo=UTC)
TPCT, ITL = MetricName.TIME_PER_COMMITTED_TOKEN_RATIO, MetricName.INTER_TOKEN_LATENCY_RATIO


def _flip(metric: MetricName, load: float, *, observed: float = 2.5, threshold: float = 2.0) -> FallbackRecord:
    return FallbackRecord(
        scope="s",
        at=END,
        reason=FallbackReason.THRESHOLD_EXCEEDED,
        metric=metric,
        observed=observed,
        threshold=threshold,
        window=Window(start=END - timedelta(seconds=15), end=END),
        loads={Arm.SPECULATIVE: load, Arm.CONTROL: load},
    )


def _rolled_back(evidence: Evidence, flip: FallbackRecord, *, rehearsal: bool = False) -> ScopeDecision:
    return decide_scope(
        "s", evidence, fallbacks=[flip], confidence=0.9, state=ScopeState.ROLLED_BACK, rehearsal=rehearsal
    ).decision


def test_a_thin_win_then_a_flip_is_insufficient_evidence_naming_the_win_and_what_settles_it() -> None:
    # the first stage: 3 windows at 2 (1.0 windows' worth at overlap 3), faster; the next flips on its ITL limit
    evidence = pilot({"s": 0.95}, loads=(2,), per_load=3)
    [thin] = decide_scope("s", evidence, fallbacks=[], confidence=0.9).comparisons
    assert thin.thin_win and not thin.wins and thin.ratio is not None and thin.ratio < 0.9
    found = _rolled_back(evidence, _flip(ITL, 4.0, observed=5.99, threshold=4.0))
    assert found.outcome is DecisionOutcome.DEFER and found.defer_reason is DeferReason.INSUFFICIENT_EVIDENCE
    first = found.reasons[0]
    assert first.startswith(
        f"s: speculation ran {thin.ratio:.2f}x the control arm's time per committed token at 2.00 requests per "
        "second per replica over 3 window(s), 1.0 windows' worth of distinct requests: a win in a band too thin to "
        "decide on (a full band needs 9 windows, 3 windows' worth)"
    ), first
    assert "at 4.00 requests per second per replica (ThresholdExceeded on interTokenLatencyRatio, 5.99 against 4)" in (
        first
    )
    assert "a first stage of 9 windows or more at that load would settle it" in first
    assert "with spec.rehearsal set, a rehearsal would climb it from 2.00 to 4.00" in first
    assert not any("wins at no load measured" in reason for reason in found.reasons)
    assert found.rehearse is not None and (found.rehearse.low, found.rehearse.high) == (pytest.approx(2.0), 4.0)
    # with spec.rehearsal set, the rehearsal is what runs
    planned = _rolled_back(evidence, _flip(ITL, 4.0, observed=5.99, threshold=4.0), rehearsal=True)
    assert (
        "is unsettled; the rehearsal climbs it from 2.00 to 4.00 on its own router, production untouched, to settle "
        "it (a first stage of 9 windows or more at that load would settle it too)." in planned.reasons[0]
    ), planned.reasons[0]
    assert planned.rehearse == found.rehearse
    # still piloting: a longer stage at that load settles it
    piloting = decide_scope("s", evidence, fallbacks=[], confidence=0.9).decision
    assert piloting.defer_reason is DeferReason.INSUFFICIENT_EVIDENCE and piloting.rehearse is None
    assert piloting.reasons[0].endswith("a stage of 9 windows or more at that load would settle it.")
    # flipped for speed at the thin band's own load, the flip's windows are the evidence: no win, said so
    slower = _rolled_back(evidence, _flip(TPCT, 2.0))
    assert slower.defer_reason is DeferReason.NO_NET_GAIN
    assert (
        f"its only faster band is thin and lies at or above that load ({thin.ratio:.2f}x at 2.00)"
        in (slower.reasons[0])
    )


def test_a_first_stage_flip_without_a_win_is_rehearsed_below_its_load() -> None:
    evidence = pilot({"s": 0.1}, loads=(4,), per_load=9)
    found = _rolled_back(evidence, _flip(TPCT, 4.0), rehearsal=True)
    assert found.defer_reason is DeferReason.NO_NET_GAIN
    assert found.rehearse == LoadSpan(low=1.0, high=4.0)
    assert found.reasons[0].endswith(
        "it wins at no load measured; below 4.00 it was never measured: the rehearsal climbs it from 1.00 to 4.00 on "
        "its own router, production untouched, so that a low-load window is found or ruled out."
    ), found.reasons[0]
    # the live stages measured down to a quarter of the flip's load already: nothing left to rehearse
    measured = _rolled_back(pilot({"s": 0.1}, loads=(1, 2, 4), per_load=9), _flip(TPCT, 4.0), rehearsal=True)
    assert measured.rehearse is None and "from 1.00 up: no low-load window was found" in measured.reasons[0]


def test_below_a_flip_the_rehearsal_finds_or_rules_out_a_low_load_window() -> None:
    rehearsed = (1.5, 2, 3)  # the rehearsal's router, below the flip at 5
    ruled_out = _rolled_back(
        pilot({"s": 0.1}, loads=(1.5, 2, 3, 5), per_load=9, rehearsed_at=rehearsed), _flip(TPCT, 5)
    )
    assert ruled_out.outcome is DecisionOutcome.DEFER and ruled_out.defer_reason is DeferReason.NO_NET_GAIN
    assert ruled_out.rehearse is None
    assert (
        "the rehearsal's router measured it from 1.41 to 3.36, below that load, and it wins at none of them: "
        "no low-load window was found" in ruled_out.reasons[0]
    ), ruled_out.reasons[0]
    found = _rolled_back(pilot({"s": 0.4}, loads=(1.5, 2, 3, 5), per_load=9, rehearsed_at=rehearsed), _flip(TPCT, 5))
    assert found.outcome is DecisionOutcome.ADOPT_IN_LOW_LOAD_WINDOWS, found.reasons
    assert found.max_load is not None and found.max_load < 5
    assert "speculation wins (found by the rehearsal's router, below the flip)" in found.reasons[0]


def test_a_win_then_a_latency_limit_flip_brackets_where_the_limit_fails_and_states_no_crossover() -> None:
    evidence = pilot({"s": 0.95}, loads=(2, 2.75), per_load=9)
    found = _rolled_back(evidence, _flip(ITL, 3.93, observed=5.99, threshold=4.0))
    assert found.outcome is DecisionOutcome.ADOPT_IN_LOW_LOAD_WINDOWS
    assert (found.crossover_load, found.crossover_low, found.crossover_high) == (None, None, None)
    failed = found.limit_failure
    assert failed is not None and failed.metric is ITL
    assert (failed.low, failed.high) == (pytest.approx(2.75), 3.93)
    assert found.bound is not None and found.bound.kind is AdoptionBound.LIMIT
    first = found.reasons[0]
    assert (
        "(ThresholdExceeded on interTokenLatencyRatio, 5.99 against 4): its interTokenLatencyRatio limit fails "
        "between 2.75 and 3.93, where speculation may still decode faster (no crossover is measured); adopt "
        "speculation below 2.75." in first
    ), first
    assert "the crossover lies" not in first
    stated = decide_pilot(
        [
            decide_scope(
                "s",
                evidence,
                fallbacks=[_flip(ITL, 3.93, observed=5.99, threshold=4.0)],
                confidence=0.9,
                state=ScopeState.ROLLED_BACK,
            )
        ],
        trigger=DecisionTrigger.SETTLED,
        now=NOW,
    )
    assert stated.crossover_high is None and stated.limit_failure == failed
    assert (
        "below 2.75 requests per second per replica (the highest load s won at: bounded by its interTokenLatencyRatio "
        "limit (5.99 against 4), which fails between 2.75 and 3.93)" in stated.reasons[0]
    ), stated.reasons[0]
    # the same climb flipped for speed brackets the crossover
    slower = _rolled_back(evidence, _flip(TPCT, 3.93))
    assert (slower.crossover_low, slower.crossover_high) == (pytest.approx(2.75), 3.93) and slower.limit_failure is None
    assert "the crossover lies between 2.75 and 3.93" in slower.reasons[0]


def test_an_adoption_its_ttft_limit_bounds_names_that_limit_first_with_one_figure_per_load_set() -> None:
    # wins everywhere, its TTFT tail over the limit from 6 up: adopted below, bounded by the TTFT limit
    evidence = pilot({"s": 0.95}, ttft_factor=lambda load: 3.0 if load >= 6 else 1.0)
    findings = decide_scope("s", evidence, fallbacks=[], confidence=0.9)
    found = findings.decision
    assert found.outcome is DecisionOutcome.ADOPT_IN_LOW_LOAD_WINDOWS and found.max_load is not None
    assert found.bound is not None and found.bound.kind is AdoptionBound.TTFT_LIMIT
    assert found.bound.observed is not None and found.ttft_ratio is not None
    top = max(c.band.load for c in findings.comparisons if c.wins)
    first, seen = found.reasons[0], found.reasons[1]
    # the winning loads' tail, named as such; the adopted loads' tail, named as such; each once
    assert first.startswith(
        f"s: its time to first token p99 runs {found.bound.observed:.2f}x the control arm's over every load it wins "
        f"at (up to {top:.2f}), above the 1.20x limit"
    ), first
    assert f"Over the loads up to {found.max_load:.2f} requests per second per replica it holds" in first
    assert seen.startswith(f"At the loads adopted (measured up to {found.max_load:.2f}), ") and (
        f"ran {found.ttft_ratio:.2f}x the control arm's (limit 1.20x)" in seen
    )
    assert f"{found.ttft_ratio:.2f}x" not in first and f"{found.bound.observed:.2f}x" not in seen
    stated = decide_pilot([findings], trigger=DecisionTrigger.SETTLED, now=NOW)
    assert stated.bound == found.bound
    assert stated.reasons[0].startswith(
        f"Adopt speculation for s in low-load windows: below {found.max_load:.2f} requests per second per replica "
        f"(the highest load at which s's TTFT tail holds: bounded by its TTFT limit, {found.bound.observed:.2f}x over "
        "every load it wins at against 1.20x)"
    ), stated.reasons[0]
    assert "the highest load s won at" not in stated.reasons[0]
