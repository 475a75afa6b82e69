"""Sustained KV pressure is the speculative arm's: it is put on the scope that loads the arm most."""

from __future__ import annotations

from dataclasses import replace

from specpilot.analysis.judge import WindowVerdict, attribute_kv_pressure, judge_window
from specpilot.analysis.window import ScopeWindow
from specpilot.api.reasons import FallbackReason, MetricName
from specpilot.api.spec import Analysis, Quality
from specpilot.api.status import Verdict
from tests.unit.analysis.conftest import arm, engine, window

PRESSURE = engine(0.97)


def judged(w: ScopeWindow) -> WindowVerdict:
    return judge_window(w, analysis=Analysis(), quality=Quality(), draft_tokens=4, state={})


def kv(verdict: WindowVerdict) -> Verdict:
    return next(c.verdict for c in verdict.checks if c.metric is MetricName.KV_CACHE_USAGE)


def test_the_heaviest_loader_keeps_the_failure_and_the_others_hold_naming_it() -> None:
    verdicts = {name: judged(window(speculative_engine=PRESSURE)) for name in ("chat", "code", "summarize")}
    out = attribute_kv_pressure(verdicts, {"chat": 900.0, "code": 100.0, "summarize": 9000.0})
    assert out["summarize"] == verdicts["summarize"]
    assert out["summarize"].fallback is FallbackReason.KV_CACHE_PRESSURE
    for name in ("chat", "code"):
        assert (out[name].verdict, out[name].fallback, kv(out[name])) == (
            Verdict.INCONCLUSIVE,
            None,
            Verdict.INCONCLUSIVE,
        )
        assert (
            "put on scope 'summarize' (90% of the KV load of the scopes under it), which flips first"
            in out[name].reason
        )
        held = next(c for c in out[name].checks if c.metric is MetricName.KV_CACHE_USAGE)
        assert held.observed is not None and held.threshold == 0.95  # the figures stay for status


def test_a_held_scope_that_fails_on_its_own_still_fails() -> None:
    slow = window(speculative=arm(seed=3, per_token=0.02), speculative_engine=PRESSURE)
    verdicts = {"chat": judged(slow), "summarize": judged(window(speculative_engine=PRESSURE))}
    out = attribute_kv_pressure(verdicts, {"chat": 1.0, "summarize": 2.0})
    assert out["chat"].verdict is Verdict.FAIL and out["chat"].fallback is None
    assert out["chat"].failing is not None and out["chat"].failing.metric is MetricName.TIME_PER_COMMITTED_TOKEN_RATIO


def test_a_single_pressured_scope_and_scopes_without_pressure_are_left_alone() -> None:
    verdicts = {"chat": judged(window()), "summarize": judged(window(speculative_engine=PRESSURE))}
    assert attribute_kv_pressure(verdicts, {"chat": 5.0, "summarize": 1.0}) == verdicts


def test_without_load_figures_one_scope_still_flips_and_the_choice_is_stable() -> None:
    verdicts = {name: judged(window(speculative_engine=PRESSURE)) for name in ("b", "a")}
    out = attribute_kv_pressure(verdicts, {})
    assert [name for name, v in sorted(out.items()) if v.hard] == ["a"]
    assert "put on scope 'a', which flips first" in out["b"].reason
    assert attribute_kv_pressure(dict(reversed(list(verdicts.items()))), {}) == out


def test_unchanged_verdicts_keep_their_judge_state() -> None:
    verdicts = {name: replace(judged(window(speculative_engine=PRESSURE)), state={"x": 1.0}) for name in "ab"}
    out = attribute_kv_pressure(verdicts, {"a": 2.0, "b": 1.0})
    assert out["b"].state == {"x": 1.0}
