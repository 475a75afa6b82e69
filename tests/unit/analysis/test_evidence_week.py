"""A pilot left running for a week, in virtual time: sixteen scopes, their load swinging each day over
two decades, each window recorded into the evidence store and fitted to its ConfigMap's budget as the
operator does it. The store stays under the API server's limit at every window, it was compacted on
the way (coarser TTFT counts), and the decisions read from it are those of the store kept whole: the
same bands, the same crossover, the same outcome."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest

from specpilot.analysis.decision import ScopeFindings, decide_scope
from specpilot.analysis.evidence import (
    STORE_BUDGET,
    ArmLoad,
    Evidence,
    WindowLoad,
    dump,
    fit,
    record_window,
    with_arms,
)
from specpilot.analysis.window import ScopeWindow
from specpilot.api.status import Verdict
from specpilot.wire.names import Arm
from tests.unit.analysis.crossover import ordinary, speculative
from tests.unit.analysis.windows import END, arm, engine

OBJECT_LIMIT = 900 * 1024  # bytes: under the API server's 1 MiB for an object, with room for metadata
DAYS, INTERVAL = 7, timedelta(minutes=30)
SCOPES = {f"scope-{i:02d}": 0.3 + 0.043 * i for i in range(16)}  # acceptance: crossovers from 4.5 to 14 (loads to 10)


def load_at(tick: int) -> float:
    """Offered requests per second per replica: a daily swing from 0.03 to 10, a little off each day."""
    day = (tick * INTERVAL) / timedelta(days=1)
    return float(0.03 * 333 ** (0.5 - 0.5 * math.cos(2 * math.pi * day + 0.3 * (day // 1))))


def week(*, fitted: bool) -> tuple[Evidence, int]:
    """The store after a week, and its largest size (bytes of JSON) after any window."""
    evidence = with_arms(Evidence(compared=Arm.CONTROL), overlap=1.0, kv_blocks={}, gpus={Arm.SPECULATIVE: 1})
    largest = 0
    for tick in range(int(timedelta(days=DAYS) / INTERVAL)):
        end, value = END + tick * INTERVAL, load_at(tick)
        loads = WindowLoad(arms={a: ArmLoad(offered_per_replica=value) for a in Arm}, arrival_rate=value)
        for index, (scope, alpha) in enumerate(SCOPES.items()):
            seed = 2 * (tick * len(SCOPES) + index)
            # TTFT grows with the load and drifts up over the week: many fine buckets per bin.
            ttft = 0.05 * (1 + value / 3) * 1.25 ** ((tick * INTERVAL) / timedelta(days=1))
            window = ScopeWindow(
                scope=scope,
                start=end - INTERVAL,
                end=end,
                compared=arm(12, seed=seed, per_token=ordinary(value), ttft=ttft),
                speculative=arm(12, seed=seed + 1, per_token=speculative(value, alpha), ttft=ttft),
                compared_engine=engine(),
                speculative_engine=engine(),
            )
            evidence = record_window(evidence, window, loads, verdict=Verdict.PASS, quality_failed=False)
        if fitted:
            evidence = fit(evidence)
            if tick % 12 == 0 or tick == int(timedelta(days=DAYS) / INTERVAL) - 1:
                largest = max(largest, len(dump(evidence)))
    return evidence, largest


def read(findings: ScopeFindings) -> tuple[object, ...]:
    """What a decision rests on besides TTFT resolution: the bands' loads and times per token, the
    crossover, the outcome and the loads it names."""
    bands = tuple((b.first, b.last, b.windows, round(b.tpct, 12)) for arm_ in findings.bands.values() for b in arm_)
    crossover = findings.crossover
    point = (round(crossover.load, 9), round(crossover.low, 9), round(crossover.high, 9)) if crossover else None
    d = findings.decision
    return bands, point, d.outcome, d.crossover_load, d.max_load


@pytest.fixture(scope="module")
def stores() -> tuple[Evidence, int, Evidence]:
    compacted, largest = week(fitted=True)
    whole, _ = week(fitted=False)
    return compacted, largest, whole


def test_a_week_of_windows_stays_under_the_object_limit_and_was_compacted_on_the_way(
    stores: tuple[Evidence, int, Evidence],
) -> None:
    compacted, largest, whole = stores
    assert largest <= STORE_BUDGET < OBJECT_LIMIT, largest
    assert len(dump(whole)) > STORE_BUDGET, "kept whole, the week would not have fitted: compaction ran"
    assert compacted.ttft_width > 1
    assert all(s.windows == int(timedelta(days=DAYS) / INTERVAL) for s in compacted.scopes.values())


def test_decisions_from_the_compacted_store_are_those_of_the_whole_one(
    stores: tuple[Evidence, int, Evidence],
) -> None:
    compacted, _, whole = stores
    outcomes = set()
    for scope in SCOPES:
        kept = decide_scope(scope, compacted, fallbacks=(), confidence=0.9)
        full = decide_scope(scope, whole, fallbacks=(), confidence=0.9)
        assert read(kept) == read(full), scope
        outcomes.add(kept.decision.outcome)
    assert len(outcomes) > 1, "the scopes reach more than one decision, so the comparison means something"
