"""A window's load read over the last minute of its stage (`Measurements.load`): the span a window is
binned at, clipped where the load last changed (`load_since`) and left out where the samples of that
span are not all read."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from specpilot.analysis.evidence import ScopeEvidence
from specpilot.analysis.window import ArmEngine
from specpilot.api.common import Duration
from specpilot.api.spec import Analysis
from specpilot.api.status import ScopeState, ScopeStatus
from specpilot.controller.core.decide import load_since
from specpilot.controller.core.measurements import RECENT_LOAD, Measurements, horizon
from specpilot.metrics.ledger import SampleLedger
from specpilot.metrics.scope_window import scope_window
from specpilot.wire.names import Arm
from specpilot.wire.samples import RequestSample, SamplesPage
from tests.unit.metrics.builders import ok_sample

T0 = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
END = T0 + timedelta(seconds=120)
ANALYSIS = Analysis(window=Duration("15s"), interval=Duration("5s"))


def arrivals(start: float, stop: float, every: float, *, seq: int) -> list[RequestSample]:
    """Speculative-arm requests of 1 s arriving every `every` seconds over [start, stop) after T0."""
    count = round((stop - start) / every)
    return [
        replace(ok_sample(), seq=seq + i, at=(T0 + timedelta(seconds=start + i * every)).timestamp(), e2e=1.0)
        for i in range(count)
    ]


def measured(*pages: tuple[float, list[RequestSample]], dropped: int = 0) -> Measurements:
    """The ledger after reading each page of samples at its time (seconds after T0); the pages after the
    first say `dropped` samples were pushed out before them."""
    ledger = SampleLedger(horizon=horizon(ANALYSIS))
    seq = 0
    for index, (at, samples) in enumerate(pages):
        seq = samples[-1].seq if samples else seq
        page = SamplesPage(epoch="e1", samples=tuple(samples), next_cursor=seq, dropped=dropped if index else 0)
        ledger.record("router-0", page, at=T0 + timedelta(seconds=at), limit=10_000)
    return Measurements(collected_at=END, samples=ledger.view())


def load_of(measurements: Measurements, *, since: datetime | None) -> tuple[float | None, float | None]:
    start = END - ANALYSIS.window
    window = scope_window(
        measurements.samples,
        scope="code",
        start=start,
        end=END,
        compared=Arm.BASELINE,
        compared_engine=ArmEngine(),
        speculative_engine=ArmEngine(),
    )
    load = measurements.load(window, replicas={Arm.SPECULATIVE: 1}, analysis=ANALYSIS, since=since)
    arm = load.arms[Arm.SPECULATIVE]
    binned = arm.offered_per_replica if arm.recent_per_replica is None else arm.recent_per_replica
    assert load.recent[Arm.SPECULATIVE] == binned
    return arm.offered_per_replica, arm.recent_per_replica


def test_a_burst_reads_the_minute_of_its_stage_it_falls_in() -> None:
    # one request every 2 s for the minute, then a 15 s burst of one a second at its end
    quiet = arrivals(60, 105, 2.0, seq=1)
    burst = arrivals(105, 120, 1.0, seq=100)
    found = measured((121, quiet + burst))
    offered, recent = load_of(found, since=T0)
    assert offered == pytest.approx(1.0)  # the window alone: the burst
    assert recent == pytest.approx((len(quiet) + len(burst)) / RECENT_LOAD.total_seconds())
    assert recent is not None and recent < 0.7


def test_the_span_starts_where_the_load_last_changed() -> None:
    quiet = arrivals(60, 90, 2.0, seq=1)
    busy = arrivals(90, 120, 1.0, seq=100)
    found = measured((121, quiet + busy))
    # the stage began 30 s before the window's end: its span is those 30 s, at the stage's own rate
    _, recent = load_of(found, since=END - timedelta(seconds=30))
    assert recent == pytest.approx(1.0)
    # a change within the window leaves the window's own load: nothing longer is of one load
    offered, recent = load_of(found, since=END - timedelta(seconds=10))
    assert recent is None and offered == pytest.approx(1.0)


def test_a_span_with_samples_lost_reads_the_window_alone() -> None:
    early = arrivals(60, 100, 2.0, seq=1)
    late = arrivals(100, 120, 1.0, seq=100)
    # the router pushed samples out unread between the two reads: the minute is not all read
    found = measured((100, early), (121, late), dropped=3)
    offered, recent = load_of(found, since=T0)
    assert recent is None and offered == pytest.approx(1.0)


def test_the_load_last_changed_at_the_latest_change_up_to_the_windows_end() -> None:
    stage = END - timedelta(seconds=50)
    status = ScopeStatus(name="code", state=ScopeState.PILOTING, stage_started_at=stage)
    assert load_since(status, ScopeEvidence(), None, end=END) == stage
    # the arm's mix changed after the stage began: the span starts there
    mixed = ScopeEvidence(mix_changed_at=END - timedelta(seconds=20))
    assert load_since(status, mixed, None, end=END) == END - timedelta(seconds=20)
    # a rehearsal step beginning after the window's end is not the window's
    assert load_since(status, ScopeEvidence(), END + timedelta(seconds=1), end=END) == stage
    assert load_since(ScopeStatus(name="code"), ScopeEvidence(), None, end=END) is None
