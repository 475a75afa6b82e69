"""Quantiles and run summaries: failures stay in view next to the latencies."""

from __future__ import annotations

import pytest

from specpilot.loadgen.sender import ClientOutcome, Status
from specpilot.loadgen.summary import by_scope, describe, quantile, summarize


@pytest.mark.parametrize(("q", "value"), [(0.0, 1.0), (0.5, 2.5), (0.9, 3.7), (1.0, 4.0)])
def test_quantiles_interpolate_linearly(q: float, value: float) -> None:
    assert quantile([1.0, 2.0, 3.0, 4.0], q) == pytest.approx(value)


def test_describe_skips_missing_values() -> None:
    assert describe([None, None]) is None
    stats = describe([None, 2.0, 4.0])
    assert stats is not None and (stats["mean"], stats["p50"], stats["max"]) == (3.0, 3.0, 4.0)


def outcome(
    status: Status,
    *,
    scope: str = "a",
    e2e: float | None = 2.0,
    ttft: float | None = 0.5,
    tokens: int = 11,
    deadline: float | None = None,
) -> ClientOutcome:
    return ClientOutcome(scope, status, 200, ttft, e2e, tokens, deadline)


def test_summaries_count_every_kind_of_ending_and_deadlines() -> None:
    outcomes = [
        outcome(Status.OK, deadline=3.0),
        outcome(Status.OK, e2e=4.0, deadline=3.0),
        outcome(Status.TIMEOUT, e2e=None, ttft=None, tokens=0),
        outcome(Status.REJECTED, e2e=None, ttft=None, tokens=0),
        outcome(Status.ERROR, e2e=None, ttft=None, tokens=0, scope="b"),
    ]
    summary = summarize(outcomes, elapsed_s=10.0)
    assert (summary["requests"], summary["ok"], summary["timeouts"], summary["rejections"], summary["errors"]) == (
        5,
        2,
        1,
        1,
        1,
    )
    assert summary["on_time"] == 1 and summary["on_time_ratio"] == pytest.approx(0.2)
    assert summary["output_tokens"] == 22 and summary["output_tokens_per_s"] == pytest.approx(2.2)
    assert summary["tpot_s"]["p50"] == pytest.approx(((2.0 - 0.5) / 10 + (4.0 - 0.5) / 10) / 2)
    scopes = by_scope(outcomes, 10.0)
    assert list(scopes) == ["a", "b"] and scopes["b"]["errors"] == 1 and scopes["b"]["ttft_s"] is None


def test_time_per_output_token_needs_two_tokens() -> None:
    assert outcome(Status.OK, tokens=1).tpot_s is None
    assert outcome(Status.OK, tokens=3, e2e=1.5, ttft=0.5).tpot_s == pytest.approx(0.5)
