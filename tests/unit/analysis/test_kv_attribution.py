"""Sustained KV pressure is the speculative arm's: it is put on the scope that loads the arm most."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from specpilot.analysis.checks import Check
from specpilot.analysis.judge import WindowVerdict, attribute_kv_pressure, judge_window
from specpilot.analysis.limits import PressureFlip
from specpilot.analysis.window import ArmRequests, ScopeWindow
from specpilot.api.reasons import FallbackReason, MetricName
from specpilot.api.spec import Analysis, Quality
from specpilot.api.status import Verdict
from specpilot.wire.samples import RequestOutcome
from tests.unit.analysis.windows import START, arm, engine, window

PRESSURE = engine(0.97)


def judged(w: ScopeWindow, pressure_flip: PressureFlip | None = None) -> WindowVerdict:
    return judge_window(
        w, analysis=Analysis(), quality=Quality(), draft_tokens=4, state={}, pressure_flip=pressure_flip
    )


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


def test_held_scopes_speed_failures_and_timeouts_are_held_but_their_errors_still_flip() -> None:
    slow = window(speculative=arm(seed=3, per_token=0.02), speculative_engine=PRESSURE)
    timing_out = window(speculative=arm(seed=3, failures={RequestOutcome.TIMEOUT: 40}), speculative_engine=PRESSURE)
    failing = window(speculative=arm(seed=3, failures={RequestOutcome.UPSTREAM_ERROR: 40}), speculative_engine=PRESSURE)
    verdicts = {
        "chat": judged(slow),
        "code": judged(timing_out),
        "search": judged(failing),
        "longform": judged(window(speculative_engine=PRESSURE)),
    }
    out = attribute_kv_pressure(verdicts, {"chat": 1.0, "code": 1.0, "search": 1.0, "longform": 2.0})
    for name in ("chat", "code"):
        assert verdicts[name].verdict is Verdict.FAIL and out[name].verdict is Verdict.INCONCLUSIVE
        assert "put on scope 'longform'" in out[name].reason
    timeouts = (rate(verdicts["code"], MetricName.TIMEOUT_RATE), rate(out["code"], MetricName.TIMEOUT_RATE))
    assert [check.verdict for check in timeouts] == [Verdict.FAIL, Verdict.INCONCLUSIVE]
    assert out["search"].fallback is FallbackReason.HARD_LIMIT
    assert out["search"].failing is not None and out["search"].failing.metric is MetricName.ERROR_RATE


FLIP = PressureFlip("longform", START + timedelta(minutes=2))


def sent_around_the_flip(outcome: RequestOutcome, *, before: int, failed_after: int = 0) -> ArmRequests:
    """200 ok requests, 60 of them sent before `FLIP`, and 40 `outcome`s: `before` of them sent before it."""
    at, early, late = FLIP.at.timestamp(), FLIP.at.timestamp() - 30, FLIP.at.timestamp() + 30
    failed = (early,) * before + (late,) * (40 - before)
    starts = tuple(sorted((early,) * 60 + (late,) * 140 + failed))
    requests = replace(arm(seed=3, failures={outcome: 40}), answerable_starts=starts)
    assert at not in starts
    return replace(requests, timeout_starts=failed) if outcome is RequestOutcome.TIMEOUT else requests


def rate(verdict: WindowVerdict, metric: MetricName) -> Check:
    return next(c for c in verdict.checks if c.metric is metric)


def test_requests_sent_before_another_scopes_kv_flip_leave_the_timeout_rate() -> None:
    before = window(speculative=sent_around_the_flip(RequestOutcome.TIMEOUT, before=40))
    assert rate(judged(before), MetricName.TIMEOUT_RATE).verdict is Verdict.FAIL, "without the flip: 40 of 240"
    check = rate(judged(before, FLIP), MetricName.TIMEOUT_RATE)
    assert (check.verdict, check.observed) == (Verdict.PASS, 0.0)
    assert "0 of 140 requests" in check.evidence
    note = "100 requests sent before scope 'longform' was flipped back for KV-cache pressure at 11:57:00"
    assert note in check.evidence and f"{note} are left out of the timeout rate." in judged(before, FLIP).reason
    after = window(speculative=sent_around_the_flip(RequestOutcome.TIMEOUT, before=0))
    check = rate(judged(after, FLIP), MetricName.TIMEOUT_RATE)
    assert check.verdict is Verdict.FAIL and "40 of 180 requests" in check.evidence, "later timeouts still count"


def test_errors_sent_before_another_scopes_kv_flip_still_count() -> None:
    failing = window(speculative=sent_around_the_flip(RequestOutcome.UPSTREAM_ERROR, before=40))
    assert rate(judged(failing, FLIP), MetricName.ERROR_RATE).verdict is Verdict.FAIL
    assert "left out" not in rate(judged(failing, FLIP), MetricName.ERROR_RATE).evidence


def test_a_window_without_start_times_leaves_nothing_out() -> None:
    timing_out = window(speculative=arm(seed=3, failures={RequestOutcome.TIMEOUT: 40}))
    assert judged(timing_out, FLIP) == judged(timing_out)


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


def test_scopes_that_held_no_cache_take_no_pressure() -> None:
    verdicts = {name: judged(window(speculative_engine=PRESSURE)) for name in ("b", "a")}
    assert attribute_kv_pressure(verdicts, {"a": 0.0, "b": 0.0, "never-started": 0.0}) == verdicts


def test_a_flipped_scope_whose_requests_still_hold_the_cache_holds_the_others_while_it_drains() -> None:
    verdicts = {name: judged(window(speculative_engine=PRESSURE)) for name in ("chat", "code")}
    draining = attribute_kv_pressure(verdicts, {"chat": 1.0, "code": 2.0, "longform": 7.0}, flipped={"longform"})
    for name in ("chat", "code"):
        assert (draining[name].verdict, draining[name].fallback) == (Verdict.INCONCLUSIVE, None)
        assert (
            "put on scope 'longform' (70% of the arm's KV load), which is on ordinary decoding already; "
            "its requests still hold the cache as they drain" in draining[name].reason
        )
    drained = attribute_kv_pressure(verdicts, {"chat": 1.0, "code": 2.0, "longform": 0.0}, flipped={"longform"})
    assert [name for name, v in drained.items() if v.hard] == ["code"], "once it has drained, the heaviest flips"


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
