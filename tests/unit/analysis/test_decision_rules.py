"""The scope decision's rules, each alone: on the facts of one case, the rules before it pass, it decides,
with its outcome and reason."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta

import pytest

from specpilot.analysis.decision import (
    RULES,
    Facts,
    Rule,
    decide_pilot,
    decide_scope,
    facts,
    too_little_evidence,
)
from specpilot.analysis.decision.scope_facts import _compared
from specpilot.analysis.scheduled import ScheduledArm
from specpilot.api.reasons import FallbackReason, MetricName
from specpilot.api.status import DecisionOutcome, DecisionTrigger, DeferReason, FallbackRecord, ScopeState, Window
from specpilot.wire.names import Arm
from tests.unit.analysis.crossover import pilot
from tests.unit.analysis.windows import END

A = DecisionOutcome.ADOPT_IN_LOW_LOAD_WINDOWS
W = DecisionOutcome.ADOPT_WITHIN_ENVELOPE
S = DecisionOutcome.ADOPT_WITH_SCHEDULE
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


def _scheduled(f: Facts, *, switch: int) -> Facts:
    """The speculative arm drafts 3 tokens up to a batch of `switch`, none above (the bands' requests in
    flight per replica equal their loads here)."""
    schedule = f'"num_speculative_tokens_per_batch_size": [[1, {switch}, 3], [{switch + 1}, {switch + 1}, 0]]'
    return replace(f, scheduled=ScheduledArm(switch=switch, schedule=schedule))


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
    ("scheduled_config", lambda: _scheduled(_facts(), switch=3), S, None),
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


def test_a_scheduled_config_is_deployed_as_configured_up_to_the_highest_load_measured() -> None:
    decided = RULES[2](_scheduled(_facts(), switch=3))
    assert decided is not None and decided.outcome is S
    assert decided.schedule == '"num_speculative_tokens_per_batch_size": [[1, 3, 3], [4, 4, 0]]'
    assert decided.max_load == pytest.approx(7.5)
    first = decided.reasons[0]
    assert "wins below its switch (0.36x" in first and "no worse than it above, within 3%" in first
    assert first.endswith('deploy it as configured, "num_speculative_tokens_per_batch_size": [[1, 3, 3], [4, 4, 0]].')


def test_a_scheduled_config_slower_above_its_switch_is_deferred_naming_the_load() -> None:
    decided = RULES[2](_scheduled(_facts(0.5), switch=5))
    assert decided is not None and decided.outcome is D and decided.defer_reason is DeferReason.NO_NET_GAIN
    assert "is slower than the control arm by more than 3% above its switch: 1.17x at 7.50" in decided.reasons[0]


def test_a_scheduled_config_even_above_its_switch_on_too_few_windows_waits_for_evidence_stating_its_win() -> None:
    """Above the switch it reads the control arm's time, but its windows there cannot yet show it within
    the margin: that is short evidence, not a loss, and its win below the switch is stated."""
    f = _scheduled(_facts(), switch=5)
    even = tuple(
        replace(c, band=replace(c.band, tpct=c.compared.tpct, tpct_se=0.05 * c.compared.tpct))
        if c.compared is not None and c.band.load > 5
        else c
        for c in f.measured
    )
    decided = RULES[2](replace(f, measured=even, comparisons=even))
    assert decided is not None and decided.defer_reason is DeferReason.INSUFFICIENT_EVIDENCE, decided
    first = decided.reasons[0]
    assert "wins below its switch (" in first and "1.00x at 7.50" in first, first
    assert "do not yet show it within 3%: a longer stage at that load would settle it" in first, first


def test_a_switch_never_crossed_leaves_the_scheduled_config_undecided() -> None:
    decided = RULES[2](_scheduled(_facts(), switch=20))
    assert decided is not None and decided.defer_reason is DeferReason.INSUFFICIENT_EVIDENCE
    assert "no full band was measured above it" in decided.reasons[0]


def test_a_scheduled_config_flipped_back_names_the_batch_it_ran_at_there() -> None:
    f = _scheduled(_facts(flip=_flip(MetricName.INTER_TOKEN_LATENCY_RATIO, 7.5)), switch=3)
    decided = RULES[2](f)
    assert decided is not None and decided.outcome is D
    assert re.search(
        r"flipped back, holding 7\.\d requests in flight per replica, above its switch", decided.reasons[0]
    )


def test_a_scheduled_config_flipped_at_its_first_windows_names_the_batch_its_flip_recorded() -> None:
    """A flip at the first windows of a load leaves no window of it in the bins: the flip's record carries
    the batch its own window ran at."""
    flip = _flip(MetricName.TTFT_RATIO, 40.0).model_copy(update={"in_flight": {Arm.SPECULATIVE: 2.34}})
    decided = RULES[2](_scheduled(_facts(flip=flip), switch=1))
    assert decided is not None and decided.outcome is D
    assert "flipped back, holding 2.3 requests in flight per replica, above its switch:" in decided.reasons[0]


def test_a_scheduled_config_flipped_above_every_bin_names_the_batch_at_the_highest_load_below() -> None:
    # the flip's own window is never binned: where no other window shares its bin, the batch is read at the
    # highest load measured below it, and that load is named
    f = _scheduled(_facts(flip=_flip(MetricName.TIME_PER_COMMITTED_TOKEN_RATIO, 12.0)), switch=3)
    decided = RULES[2](f)
    assert decided is not None and decided.outcome is D
    assert re.search(
        r"flipped back, holding 10\.5 requests in flight per replica at 10\.50 requests per second per replica, "
        r"above its switch: its windows flipped it back to ordinary decoding at 12\.00",
        decided.reasons[0],
    ), decided.reasons[0]


def test_a_scheduled_config_flipped_below_every_bin_names_no_batch() -> None:
    f = _scheduled(_facts(flip=_flip(MetricName.TIME_PER_COMMITTED_TOKEN_RATIO, 0.5)), switch=3)
    decided = RULES[2](f)
    assert decided is not None and "holding" not in decided.reasons[0], decided.reasons[0]
    assert "was flipped back: its windows flipped it back to ordinary decoding at 0.50" in decided.reasons[0]


def test_the_pilot_adopts_the_scheduled_config_within_its_scopes_envelope() -> None:
    evidence = pilot({"s": 0.95})
    arm = ScheduledArm(switch=3, schedule='"num_speculative_tokens_per_batch_size": [[1, 3, 3], [4, 4, 0]]')
    found = decide_scope("s", evidence, fallbacks=[], confidence=0.9, scheduled=arm)
    decision = decide_pilot([found], trigger=DecisionTrigger.SETTLED, now=END, look=2)
    assert decision.outcome is S and decision.schedule == arm.schedule and decision.looks == 2
    assert decision.envelope is not None and decision.envelope.scopes == ["s"]
    assert decision.reasons[0].startswith("Adopt the scheduled config for s, up to 7.50")
