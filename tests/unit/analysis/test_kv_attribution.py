"""Sustained KV pressure is the speculative arm's: it is put on the scope that loads the arm most."""

from __future__ import annotations

from dataclasses import replace

from specpilot.analysis.judge import WindowVerdict, attribute_kv_pressure, judge_window
from specpilot.analysis.window import ScopeWindow
from specpilot.api.reasons import FallbackReason, MetricName
from specpilot.api.spec import Analysis, Quality
from specpilot.api.status import Verdict
from specpilot.wire.samples import RequestOutcome
from tests.unit.analysis.conftest import arm, engine, window

PRESSURE = engine(0.97)


def judged(w: ScopeWindow) -> WindowVerdict:
    return judge_window(w, analysis=Analysis(), quality=Quality(), draft_tokens=4, state={})


def kv(verdict: WindowVerdict) -> Verdict:
    return next(c.verdict for c in verdict.checks if c.metric is MetricName.KV_CACHE_USAGE)


def test_the_heaviest_loader_keeps_the_failure_and_the_others_hold_naming_it() -> None:
    verdicts = {name: judged(window(speculative_engine=PRESSURE)) for name in ("chat", "code", "summarize")}
    out = attribute_kv_pressure(verdicts, {"chat": 900.0, "code": 100.0, "summarize": 9000.0})
    # the heaviest loader need not be judged in the same reconcile to take the flip
    alone = attribute_kv_pressure({"chat": verdicts["chat"]}, {"chat": 900.0, "code": 100.0, "summarize": 9000.0})
    assert alone["chat"] == out["chat"]
    assert out["summarize"] == verdicts["summarize"]
    assert out["summarize"].fallback is FallbackReason.KV_CACHE_PRESSURE
    for name in ("chat", "code"):
        assert (out[name].verdict, out[name].fallback, kv(out[name])) == (
            Verdict.INCONCLUSIVE,
            None,
            Verdict.INCONCLUSIVE,
        )
        assert "put on scope 'summarize' (90% of the arm's KV load), which flips first" in out[name].reason
        held = next(c for c in out[name].checks if c.metric is MetricName.KV_CACHE_USAGE)
        assert held.observed is not None and held.threshold == 0.95  # the figures stay for status


def test_held_scopes_speed_failures_are_held_but_their_timeouts_still_flip() -> None:
    slow = window(speculative=arm(seed=3, per_token=0.02), speculative_engine=PRESSURE)
    timing_out = window(speculative=arm(seed=3, failures={RequestOutcome.TIMEOUT: 40}), speculative_engine=PRESSURE)
    verdicts = {
        "chat": judged(slow),
        "code": judged(timing_out),
        "longform": judged(window(speculative_engine=PRESSURE)),
    }
    out = attribute_kv_pressure(verdicts, {"chat": 1.0, "code": 1.0, "longform": 2.0})
    assert verdicts["chat"].verdict is Verdict.FAIL and out["chat"].verdict is Verdict.INCONCLUSIVE
    assert out["code"].fallback is FallbackReason.HARD_LIMIT
    assert out["code"].failing is not None and out["code"].failing.metric is MetricName.TIMEOUT_RATE


def test_a_window_overlapping_an_earlier_kv_flip_of_another_scope_is_held() -> None:
    slow = window(speculative=arm(seed=3, per_token=0.02), speculative_engine=PRESSURE)
    verdicts = {"chat": judged(slow), "code": judged(window())}
    why = "the window overlaps KV-cache pressure put on scope 'longform', flipped back at 12:00:00"
    out = attribute_kv_pressure(verdicts, {}, overlapping={"chat": why, "gone": why})
    assert out["chat"].verdict is Verdict.INCONCLUSIVE and why in out["chat"].reason
    assert out["code"] == verdicts["code"] and "gone" not in out


def test_the_heaviest_loader_flips_alone_and_scopes_without_pressure_are_left_alone() -> None:
    verdicts = {"chat": judged(window()), "summarize": judged(window(speculative_engine=PRESSURE))}
    assert attribute_kv_pressure(verdicts, {"chat": 1.0, "summarize": 5.0}) == verdicts


def test_without_load_figures_every_pressured_scope_flips() -> None:
    verdicts = {name: judged(window(speculative_engine=PRESSURE)) for name in ("b", "a")}
    assert attribute_kv_pressure(verdicts, {}) == verdicts
    assert all(v.fallback is FallbackReason.KV_CACHE_PRESSURE for v in verdicts.values())


def test_ties_go_to_the_first_name_whatever_the_order() -> None:
    verdicts = {name: judged(window(speculative_engine=PRESSURE)) for name in ("b", "a")}
    out = attribute_kv_pressure(verdicts, {"b": 1.0, "a": 1.0})
    assert [name for name, v in sorted(out.items()) if v.hard] == ["a"]
    assert "put on scope 'a' (50% of the arm's KV load), which flips first" in out["b"].reason
    assert attribute_kv_pressure(verdicts, {"a": 1.0, "b": 1.0}) == out


def test_unchanged_verdicts_keep_their_judge_state() -> None:
    verdicts = {name: replace(judged(window(speculative_engine=PRESSURE)), state={"x": 1.0}) for name in "ab"}
    out = attribute_kv_pressure(verdicts, {"a": 2.0, "b": 1.0})
    assert out["b"].state == {"x": 1.0}
