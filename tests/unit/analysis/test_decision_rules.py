"""The scope decision's rules, each alone: on the facts of one case, the rules before it pass, it decides,
with its outcome and reason."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta

import pytest

from specpilot.analysis.decision import RULES, Facts, Rule, _compared, facts, too_little_evidence
from specpilot.api.reasons import FallbackReason, MetricName
from specpilot.api.status import DecisionOutcome, DeferReason, FallbackRecord, ScopeState, Window
from specpilot.wire.names import Arm
from tests.unit.analysis.conftest import END
from tests.unit.analysis.crossover import pilot

A = DecisionOutcome.ADOPT_IN_LOW_LOAD_WINDOWS
W = DecisionOutcome.ADOPT_WITHIN_ENVELOPE
D = DecisionOutcome.DEFER


def _flip(
    metric: MetricName, load: float | None, reason: FallbackReason = FallbackReason.THRESHOLD_EXCEEDED
) -> FallbackRecord:
    return FallbackRecord(
        scope="s",
        at=END,
        reason=reason,
        metric=metric,
        observed=2.5,
        threshold=2.0,
        window=Window(start=END - timedelta(seconds=15), end=END),
        loads={Arm.SPECULATIVE: load, Arm.CONTROL: load} if load is not None else {},
    )


def _facts(
    alpha: float = 0.95, *, flip: FallbackRecord | None = None, peak: float | None = None, **shape: object
) -> Facts:
    evidence = pilot({"s": alpha}, **shape)  # type: ignore[arg-type]
    comparisons = _compared(evidence, "s", 0.9)[1]
    return facts(
        "s",
        evidence,
        comparisons=comparisons,
        fallbacks=[flip] if flip else [],
        confidence=0.9,
        state=ScopeState.ROLLED_BACK if flip else ScopeState.SPECULATIVE,
        peak=peak,
    )


def _slowed_share(f: Facts, decode_ratio: float, share: float = 0.99) -> Facts:
    assert f.share is not None
    return replace(f, share=replace(f.share, decode_ratio=decode_ratio, share=share))


def _slower_end_to_end(f: Facts) -> Facts:
    """Every band's speculative requests take four times as long end to end."""
    slowed = tuple(replace(c, band=replace(c.band, e2e=(c.band.e2e or 0) * 4)) for c in f.measured)
    return replace(f, measured=slowed, wins=slowed, comparisons=slowed)


CASES: list[tuple[str, Callable[[], Facts], DecisionOutcome, DeferReason | None]] = [
    ("quality_regressed", lambda: _facts(quality_failed=frozenset({"s"})), D, DeferReason.QUALITY_REGRESSION),
    (
        "out_of_kv_cache",
        lambda: _facts(flip=_flip(MetricName.KV_CACHE_USAGE, 5.0, FallbackReason.KV_CACHE_PRESSURE)),
        D,
        DeferReason.MEMORY_PRESSURE,
    ),
    (
        "only_thin_wins",
        lambda: _facts(flip=_flip(MetricName.INTER_TOKEN_LATENCY_RATIO, 4.0), loads=(2,), per_load=3),
        D,
        DeferReason.INSUFFICIENT_EVIDENCE,
    ),
    (
        "flipped_without_a_win",
        lambda: _facts(0.1, flip=_flip(MetricName.TIME_PER_COMMITTED_TOKEN_RATIO, 5.0)),
        D,
        DeferReason.NO_NET_GAIN,
    ),
    (
        "flipped_at_an_unknown_load",
        lambda: _facts(flip=_flip(MetricName.TTFT_RATIO, None)),
        D,
        DeferReason.INSUFFICIENT_EVIDENCE,
    ),
    (
        "flipped_at_a_winning_load",
        lambda: _facts(flip=_flip(MetricName.INTER_TOKEN_LATENCY_RATIO, 5.6), loads=(5.6,), per_load=9),
        D,
        DeferReason.LIMIT_FAILED,
    ),
    ("too_little_evidence", lambda: _facts(0.1, loads=(2,), per_load=2), D, DeferReason.INSUFFICIENT_EVIDENCE),
    ("decode_gain_too_small", lambda: _slowed_share(_facts(), 0.99), D, DeferReason.NO_NET_GAIN),
    ("bottleneck_elsewhere", lambda: _slowed_share(_facts(), 0.5, share=0.02), D, DeferReason.BOTTLENECK_ELSEWHERE),
    ("contradicted", lambda: _slower_end_to_end(_facts()), D, DeferReason.NO_NET_GAIN),
    (
        "wins_below_the_flip",
        lambda: _facts(flip=_flip(MetricName.TIME_PER_COMMITTED_TOKEN_RATIO, 12.0), loads=(5.6, 7.4), per_load=9),
        A,
        None,
    ),
    ("short_of_the_envelope", lambda: _facts(peak=30.0), A, None),
    ("wins_everywhere", _facts, W, None),
    ("wins_below_a_load", lambda: _facts(0.5), A, None),
    ("no_gain", lambda: _facts(0.1), D, DeferReason.NO_NET_GAIN),
]


def test_every_rule_has_a_case_in_the_order_it_is_applied() -> None:
    assert [name for name, *_ in CASES] == [rule.__name__ for rule in RULES]


@pytest.mark.parametrize(("name", "build", "outcome", "reason"), CASES, ids=[case[0] for case in CASES])
def test_each_rule_alone(
    name: str, build: Callable[[], Facts], outcome: DecisionOutcome, reason: DeferReason | None
) -> None:
    f = build()
    index = [rule.__name__ for rule in RULES].index(name)
    rule: Rule = RULES[index]
    passed = {earlier.__name__: earlier(f) for earlier in RULES[:index]}
    assert all(d is None for d in passed.values()), {k: v.reasons[0] for k, v in passed.items() if v is not None}
    decided = rule(f)
    assert decided is not None, name
    assert decided.outcome is outcome and decided.defer_reason is reason, decided.reasons
    assert decided.reasons[0].startswith("s: "), decided.reasons


def test_too_little_evidence_counts_what_a_thin_band_measured() -> None:
    # 6 windows at one load, overlap 3: one band of 2 windows' worth, too thin to decide on, and said so
    f = _facts(loads=(2,), per_load=6)
    assert f.measured == () and [c.powered for c in f.comparisons] == [False]
    decided = too_little_evidence(f)
    assert decided is not None and decided.defer_reason is DeferReason.INSUFFICIENT_EVIDENCE
    assert decided.reasons[0].startswith(
        "s: 6 window(s) measured speculation against the control arm at the same load, 2.0 windows' worth"
    ), decided.reasons
