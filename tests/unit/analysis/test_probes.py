"""Probe answers judged, tallied and tested: the pure side of the probe kinds."""

from __future__ import annotations

import random

import pytest

from specpilot.analysis.answers import (
    Answer,
    ToolCall,
    cancel_fault,
    divergence,
    excerpt,
    expected_finish,
    stop_fault,
    structured_fault,
    tool_call_fault,
)
from specpilot.analysis.probes import (
    ArmAnswers,
    CaseTally,
    Readings,
    accumulate,
    answer_round,
    cancel_round,
    greedy_round,
)
from specpilot.analysis.proportions import rate_above_pvalue
from specpilot.analysis.quality import (
    ProbeResult,
    accumulated,
    behaviour_check,
    case_key,
    probe_checks,
    rate_check,
    round_cases,
    scope_cases,
)
from specpilot.api.reasons import MetricName
from specpilot.api.spec import ProbeCase, ProbeKind, Probes, Quality, SpeculationPilotSpec
from specpilot.api.status import Verdict

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER = {"name": "get_weather", "parameters": SCHEMA}


def case(kind: str, **extra: object) -> ProbeCase:
    return ProbeCase.from_wire({"kind": kind, "prompt": "p", **extra})


def both(answer: Answer) -> ArmAnswers:
    return ArmAnswers(answer, answer)


# --- answers ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("one", "other", "position", "common"),
    [("abc", "abc", None, 3), ("abcd", "abxd", 2, 2), ("ab", "abc", 2, 2), ("", "x", 0, 0)],
    ids=["equal", "differ", "prefix", "empty"],
)
def test_divergence(one: str, other: str, position: int | None, common: int) -> None:
    assert divergence(one, other) == (d := divergence(other, one)) and (d.position, d.common) == (position, common)


def test_an_excerpt_is_short_and_marked_where_cut() -> None:
    text = "x" * 500
    assert len(excerpt(text, 250)) <= 80 and excerpt(text, 250).startswith("…") and excerpt(text).endswith("…")
    assert excerpt("short") == "short"


BASE_STOP = Answer("one two", "stop", "three")


@pytest.mark.parametrize(
    ("answer", "field"),
    [
        (BASE_STOP, None),
        (Answer("one two three four", "length", None), "text"),
        (Answer("one two", "length", None), "finish_reason"),
        (Answer("one two", "stop", None), "stop_reason"),
        (Answer("one TWO", "stop", None), None),  # diverged before the stop: reasons are not compared
        (Answer("", None, status=500), "status"),
    ],
    ids=["same", "runs-past-stop", "other-finish", "other-stop-reason", "diverged", "http-error"],
)
def test_stop_fault(answer: Answer, field: str | None) -> None:
    fault = stop_fault(answer, BASE_STOP, stop=["three"])
    assert (fault.field if fault else None) == field


@pytest.mark.parametrize(
    ("answer", "field"),
    [
        (Answer('{"city": "Oslo"}', "stop"), None),
        (Answer('{"city": "Os', "length"), "finish_reason"),
        (Answer('{"city": "Os', "stop"), "text"),
        (Answer('{"town": "Oslo"}', "stop"), "text ('city' is a required property)"),
    ],
    ids=["valid", "cut", "not-json", "schema"],
)
def test_structured_fault(answer: Answer, field: str | None) -> None:
    fault = structured_fault(answer, schema=SCHEMA)
    assert (fault.field if fault else None) == field


GOOD_CALL = (ToolCall("get_weather", '{"city": "Oslo"}'),)


@pytest.mark.parametrize(
    ("choice", "whole", "streamed", "field"),
    [
        ("get_weather", Answer("", "stop", None, GOOD_CALL), None, None),
        ("required", Answer("", "tool_calls", None, GOOD_CALL), None, None),
        ("auto", Answer("", "tool_calls", None, GOOD_CALL), None, None),
        ("auto", Answer("sunny", "length"), None, None),
        ("auto", Answer("sunny", "tool_calls"), None, "finish_reason"),
        ("get_weather", Answer("", "tool_calls", None, GOOD_CALL), None, "finish_reason"),
        ("required", Answer("", "stop"), None, "tool_calls"),
        ("required", Answer("", "tool_calls", None, (ToolCall("nope", "{}"),)), None, "tool_calls.name"),
        (
            "required",
            Answer("", "tool_calls", None, (ToolCall("get_weather", '{"city":'),)),
            None,
            "tool_calls.arguments",
        ),
        (
            "required",
            Answer("", "tool_calls", None, (ToolCall("get_weather", "{}"),)),
            None,
            "tool_calls.arguments ('city' is a required property)",
        ),
        (
            "required",
            Answer("", "tool_calls", None, GOOD_CALL),
            Answer("", "tool_calls", None, (ToolCall("get_weather", '{"city": "Osl"}'),)),
            "streamed tool_calls",
        ),
    ],
    ids=[
        "named",
        "required",
        "auto-call",
        "auto-text",
        "auto-text-says-tool-calls",
        "named-says-tool-calls",
        "required-without-call",
        "unknown-function",
        "arguments-not-json",
        "arguments-off-schema",
        "stream-reassembles-otherwise",
    ],
)
def test_tool_call_fault(choice: str, whole: Answer, streamed: Answer | None, field: str | None) -> None:
    probe = case("toolCall", tools=[WEATHER], toolChoice=choice)
    fault = tool_call_fault(whole, streamed or whole, case=probe)
    assert (fault.field if fault else None) == field


def test_expected_finish_follows_vllm() -> None:
    assert expected_finish("required", called=True) == expected_finish("auto", called=True) == "tool_calls"
    assert expected_finish("get_weather", called=True) == "stop" and expected_finish("auto", called=False) is None


@pytest.mark.parametrize(("before", "after", "failed"), [(0, 0, False), (2, 1, False), (0, 1, True), (None, 0, True)])
def test_cancel_fault(before: float | None, after: float | None, failed: bool) -> None:
    assert (cancel_fault(before, after) is not None) == failed


# --- rounds ----------------------------------------------------------------------------------------


def test_a_greedy_round_counts_differences_and_keeps_a_short_finding() -> None:
    long = "a" * 300
    base, other = both(Answer(long, "length")), both(Answer(long[:200] + "b" * 100, "length"))
    tally = greedy_round(case("greedy"), baseline=base, again=base, speculative=other)
    assert (tally.speculative_diverged, tally.speculative_trials, tally.baseline_diverged) == (2, 2, 0)
    assert tally.diverged_at == 400 and tally.finding is not None
    assert tally.finding.field == "text at 200"
    assert len(tally.finding.baseline) <= 80 and len(tally.finding.speculative) <= 80


def test_a_failure_on_both_arms_is_not_pinned_on_speculation() -> None:
    broken = both(Answer("x", "stop"))
    tally = answer_round(case("structured", jsonSchema=SCHEMA), baseline=broken, speculative=broken)
    assert (tally.paired, tally.regressions) == (0, 0)
    check = behaviour_check(tally, min_agreement=0.95)
    assert check.verdict is Verdict.INCONCLUSIVE and check.metric is MetricName.PROBE_STRUCTURED


def test_a_leak_on_the_speculative_arm_only_fails_once_shown_above_the_baselines_rate() -> None:
    leak = cancel_round(case("cancel"), baseline=Readings(0, 0), speculative=Readings(0, 1))
    # one kept slot is what load on the pod can look like: not yet shown
    assert rate_check(leak, confidence=0.95).verdict is Verdict.PASS
    tally = leak
    for _ in range(8):
        tally = accumulate(tally, leak)
    check = rate_check(tally, confidence=0.95)
    assert check.verdict is Verdict.FAIL and check.fires and check.metric is MetricName.PROBE_CANCEL
    assert "cancel probe keeps dropped streams' slots" in check.reason


def test_slots_that_load_hides_as_often_on_both_arms_flip_nothing() -> None:
    rng = random.Random(5)
    flips = 0
    for _ in range(200):  # 3% of rounds on each loaded pod see the gauge stay up for the whole bound
        tally = None
        for _ in range(40):
            base = Readings(3, 4 if rng.random() < 0.03 else 3)
            spec = Readings(3, 4 if rng.random() < 0.03 else 3)
            latest = cancel_round(case("cancel"), baseline=base, speculative=spec)
            tally = latest if tally is None else accumulate(tally, latest)
            flips += rate_check(tally, confidence=0.95).verdict is Verdict.FAIL
    assert flips <= 2


def test_tallies_accumulate_over_rounds_and_drop_cases_no_longer_probed() -> None:
    one = CaseTally(ProbeKind.GREEDY, baseline_trials=2, speculative_trials=2, speculative_passed=2)
    assert accumulate(one, one) == CaseTally(ProbeKind.GREEDY, 2, 0, 4, 4, 4)
    first = accumulated(None, ProbeResult({"a": one, "b": one}))
    second = accumulated(first, ProbeResult({"a": one}))
    assert second.tallies == {"a": accumulate(one, one)}
    failed = accumulated(second, ProbeResult(error="probes failed: refused"))
    assert failed.tallies == second.tallies and failed.error == "probes failed: refused"


# --- statistics ------------------------------------------------------------------------------------


def test_the_exact_test_matches_known_values() -> None:
    assert rate_above_pvalue(8, 8, 0, 8) == pytest.approx(1 / 12870)
    assert rate_above_pvalue(10, 100, 2, 100) == pytest.approx(0.01652, abs=1e-4)  # Fisher, one-sided
    assert rate_above_pvalue(0, 5, 3, 5) == 1.0 and rate_above_pvalue(0, 0, 0, 0) == 1.0
    with pytest.raises(ValueError):
        rate_above_pvalue(3, 2, 0, 2)


def greedy_tally(rng: random.Random, *, rounds: int, per_round: int, spec_rate: float, base_rate: float) -> CaseTally:
    n = rounds * per_round
    x_s = sum(rng.random() < spec_rate for _ in range(n))
    x_b = sum(rng.random() < base_rate for _ in range(n))
    return CaseTally(ProbeKind.GREEDY, rounds, n - x_b, n, n - x_s, n)


def test_equal_natural_variation_on_both_arms_flips_nothing() -> None:
    rng = random.Random(7)
    flips = 0
    for _ in range(200):  # every look of 200 pilots, 1 to 30 rounds each
        flips += any(
            rate_check(greedy_tally(rng, rounds=r, per_round=8, spec_rate=0.1, base_rate=0.1), confidence=0.95).verdict
            is Verdict.FAIL
            for r in (1, 3, 10, 30)
        )
    assert flips <= 10  # at most alpha of the pilots ever flip; the spending keeps it below


def test_clearly_higher_speculative_divergence_fails() -> None:
    rng = random.Random(11)
    tally = greedy_tally(rng, rounds=5, per_round=8, spec_rate=0.6, base_rate=0.05)
    check = rate_check(tally, confidence=0.95)
    assert check.verdict is Verdict.FAIL and check.metric is MetricName.PROBE_GREEDY and check.fires


def test_a_single_text_difference_is_not_a_failure() -> None:
    tally = CaseTally(ProbeKind.GREEDY, 1, 2, 2, 1, 2)
    assert rate_check(tally, confidence=0.95).verdict is Verdict.PASS


# --- cases of a pilot ------------------------------------------------------------------------------


def test_scopes_run_their_own_cases_or_the_pilot_wide_ones() -> None:
    own = {"kind": "stop", "prompt": "code", "stop": ["```"]}
    spec = SpeculationPilotSpec.from_wire(
        {
            "engine": {"image": "vllm/vllm-openai:v0.33.0", "model": "Qwen/Qwen3-8B"},
            "speculative": {"draft": {"model": "Qwen/Qwen3-0.6B"}},
            "scopes": [{"name": "chat"}, {"name": "code", "probes": {"cases": [own]}}],
            "quality": {"probes": {"prompts": ["hello"], "cases": [own]}},
        }
    )
    cases = scope_cases(spec)
    assert [c.kind for c in cases["chat"]] == [ProbeKind.GREEDY, ProbeKind.STOP] and not cases["chat"][0].chat
    assert cases["code"] == (ProbeCase.from_wire(own),)
    assert len(round_cases(spec)) == 2  # the shared case is sent once


def test_probe_checks_are_one_per_kind_and_inconclusive_before_a_round() -> None:
    cases = [case("greedy"), case("stop", stop=["x"]), case("stop", prompt="q", stop=["y"])]
    quality = Quality(probes=Probes(cases=cases))
    (waiting,) = probe_checks(None, cases, quality=quality, confidence=0.95)
    assert waiting.verdict is Verdict.INCONCLUSIVE and waiting.metric is MetricName.PROBE_AGREEMENT
    stop = CaseTally(
        ProbeKind.STOP, baseline_passed=2, baseline_trials=2, speculative_passed=2, speculative_trials=2, paired=2
    )
    greedy = CaseTally(ProbeKind.GREEDY, 1, 2, 2, 2, 2)
    result = ProbeResult({case_key(cases[0]): greedy, case_key(cases[1]): stop, case_key(cases[2]): stop})
    checks = probe_checks(result, cases, quality=quality, confidence=0.95)
    assert [c.metric for c in checks] == [MetricName.PROBE_GREEDY, MetricName.PROBE_STOP]
    assert all(c.verdict is Verdict.PASS for c in checks)
