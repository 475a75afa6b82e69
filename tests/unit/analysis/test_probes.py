"""Probe answers judged, tallied and tested: the pure side of the probe kinds."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

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
from specpilot.analysis.checks import Check
from specpilot.analysis.evidence import ProbeRecord
from specpilot.analysis.probes import (
    ArmAnswers,
    CaseTally,
    Readings,
    accumulate,
    answer_round,
    cancel_round,
    greedy_round,
    strata,
)
from specpilot.analysis.proportions import HORIZON, ODDS, Sequential, log_ratios
from specpilot.analysis.quality import (
    CHANGE_SHARE,
    ProbeResult,
    accumulated,
    behaviour_check,
    case_key,
    kind_counts,
    kind_groups,
    probe_alpha,
    probe_checks,
    round_cases,
    scope_cases,
)
from specpilot.api.reasons import MetricName
from specpilot.api.spec import ProbeCase, ProbeKind, Probes, Quality, SpeculationPilotSpec
from specpilot.api.status import Verdict

NOW = datetime(2025, 1, 1, tzinfo=UTC)
INTERVAL = timedelta(minutes=10)
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
    check = behaviour_check(tally, Sequential().step(strata(tally)), min_agreement=0.95, alpha=0.01)
    assert check.verdict is Verdict.INCONCLUSIVE and check.metric is MetricName.PROBE_STRUCTURED


def checks_by_round(probe: ProbeCase, tallies: Iterable[CaseTally]) -> Iterator[Check]:
    """The probe's check after each of these rounds, accumulated as the operator does."""
    result = None
    for tally in tallies:
        result = accumulated(result, ProbeResult({case_key(probe): tally}), groups=kind_groups([probe]).values())
        (check,) = probe_checks(result, [probe], quality=Quality(), confidence=0.95)
        yield check


def first_failing(probe: ProbeCase, tallies: Iterable[CaseTally]) -> int | None:
    return next(
        (i for i, check in enumerate(checks_by_round(probe, tallies), 1) if check.verdict is Verdict.FAIL), None
    )


LEAK = cancel_round(case("cancel"), baseline=Readings(0, 0), speculative=Readings(0, 1))
CLEAN = cancel_round(case("cancel"), baseline=Readings(0, 0), speculative=Readings(0, 0))


def test_a_leak_on_the_speculative_arm_only_fails_once_shown_above_the_baselines_rate() -> None:
    # one kept slot is what load on the pod can look like: a leak on the one ask of every round is shown by the 11th
    *passing, failing = list(checks_by_round(case("cancel"), [LEAK] * 11))
    assert all(check.verdict is Verdict.PASS for check in passing)
    assert failing.verdict is Verdict.FAIL and failing.fires and failing.metric is MetricName.PROBE_CANCEL
    assert "cancel probe keeps dropped streams' slots" in failing.reason and "mixture SPRT p=" in failing.evidence


def test_a_leak_after_500_clean_rounds_is_caught_as_soon_as_one_from_the_first() -> None:
    assert first_failing(case("cancel"), [*[CLEAN] * 500, *[LEAK] * 20]) == 500 + 11


def test_a_tool_call_that_breaks_after_500_clean_rounds_flips_long_before_the_share_falls() -> None:
    probe = case("toolCall", tools=[WEATHER], toolChoice="required")
    good = both(Answer("", "tool_calls", None, GOOD_CALL))
    bad = both(Answer("", "tool_calls", None, (ToolCall("get_weather", '{"city":'),)))
    clean = answer_round(probe, baseline=good, speculative=good)
    broken = answer_round(probe, baseline=good, speculative=bad)
    assert first_failing(probe, [broken]) == 1  # below quality.minAgreement at once
    # the share of 500 clean rounds falls below 95% after 27 broken ones; the tests see it by the 11th
    *_, check = checks_by_round(probe, [*[clean] * 500, *[broken] * 11])
    assert check.verdict is Verdict.FAIL and check.reason.startswith(
        "toolCall probe fails more often than the baseline"
    )


def shown(test: Sequential) -> bool:
    """Whether either test shows the speculative arm failing more, at the levels the operator reads them."""
    alpha = probe_alpha(0.95)
    return test.mixture_p() <= alpha * (1 - CHANGE_SHARE) or test.change_p() <= alpha * CHANGE_SHARE


def asked(tally: CaseTally, times: int) -> CaseTally:
    """One round of `times` asks, each answered as `tally`'s, in one tally as the operator adds them up."""
    total = tally
    for _ in range(times - 1):
        total = replace(accumulate(total, tally), rounds=1)
    return total


@pytest.mark.parametrize(("per_round", "delay"), [(1, 11), (2, 4), (4, 2)])
def test_a_tool_call_broken_on_every_ask_after_500_clean_rounds_flips_at_the_tests_delay(
    per_round: int, delay: int
) -> None:
    """The tests take as many rounds for the breakage after 500 clean rounds as from the first round
    (where quality.minAgreement flips it at once): at the default 2 asks, 4, the fewest a test of the
    rounds' strata can take, a round of 2 asks failing on one arm alone being 1 in C(4, 2) = 6 with
    equal arms and the mixture's level a quarter of 1% (6^3 < 400)."""
    probe = case("toolCall", tools=[WEATHER], toolChoice="required")
    good = both(Answer("", "tool_calls", None, GOOD_CALL))
    bad = both(Answer("", "tool_calls", None, (ToolCall("get_weather", '{"city":'),)))
    clean = asked(answer_round(probe, baseline=good, speculative=good), per_round)
    broken = asked(answer_round(probe, baseline=good, speculative=bad), per_round)
    *_, late = checks_by_round(probe, [*[clean] * 500, *[broken] * delay])
    assert late.verdict is Verdict.FAIL and "mixture SPRT p=" in late.evidence
    assert first_failing(probe, [*[clean] * 500, *[broken] * 20]) == 500 + delay
    test = Sequential()
    for _ in range(delay - 1):
        test = test.step(strata(broken))
        assert not shown(test)
    assert shown(test.step(strata(broken)))
    assert 3 * math.log(math.comb(4, 2)) < -math.log(probe_alpha(0.95) * (1 - CHANGE_SHARE))


def test_equal_arms_at_a_fifth_of_asks_failing_flip_no_scope_over_the_horizon() -> None:
    """Two asks a round failing at 20% on both arms (a cancel bound that load outlasts), over the
    2,000 rounds the change detector's false flips are bounded for, read at the operator's levels:
    the odds past any bound that catch a fault on every ask flip no pilot of 100 (at most 1%)."""
    rng = random.Random(11)
    flips = 0
    for _ in range(100):
        test = Sequential()
        for _ in range(HORIZON):
            failed, other = (sum(rng.random() < 0.2 for _ in range(2)) for _ in range(2))
            test = test.step([(failed, 2, other, 2)])
            if shown(test):
                flips += 1
                break
    assert flips <= 1


def loaded(rng: random.Random, *, spec_hidden: float, base_hidden: float = 0.2) -> CaseTally:
    """A cancel round on loaded pods: the gauge stays up for the whole bound that often on each arm."""
    base = Readings(3, 4 if rng.random() < base_hidden else 3)
    spec = Readings(3, 4 if rng.random() < spec_hidden else 3)
    return cancel_round(case("cancel"), baseline=base, speculative=spec)


def test_slots_that_load_hides_as_often_on_both_arms_flip_nothing() -> None:
    rng = random.Random(5)
    flips = sum(
        first_failing(case("cancel"), (loaded(rng, spec_hidden=0.2) for _ in range(60))) is not None for _ in range(100)
    )
    assert flips <= 1


@pytest.mark.parametrize("clean", [0, 500], ids=["from-the-first-round", "after-500-clean-rounds"])
def test_a_leak_where_load_hides_slots_on_both_arms_is_caught_soon_whenever_it_starts(clean: int) -> None:
    rng = random.Random(9)
    delays = []
    for _ in range(10):
        rounds = [
            *(loaded(rng, spec_hidden=0.2) for _ in range(clean)),
            *(loaded(rng, spec_hidden=1.0) for _ in range(60)),
        ]
        first = first_failing(case("cancel"), rounds)
        assert first is not None and first > clean
        delays.append(first - clean)
    # from the first round, the mixture test: about 14 rounds; later, the change detector's threshold,
    # log(STARTS / (alpha / 2 * 0.1)) = 10.6, at log(2 * 50 / 51) a round where only the speculative arm fails
    assert max(delays) <= (20 if clean == 0 else 30)


def test_tallies_accumulate_over_rounds_and_drop_cases_no_longer_probed() -> None:
    one = CaseTally(ProbeKind.GREEDY, baseline_trials=2, speculative_trials=2, speculative_passed=2)
    assert accumulate(one, one) == CaseTally(ProbeKind.GREEDY, 2, 0, 4, 4, 4)
    group = frozenset({"a", "b"})
    first = accumulated(None, ProbeResult({"a": one, "b": one}), groups=[group])
    second = accumulated(first, ProbeResult({"a": one}), groups=[group])
    assert second.tallies == {"a": accumulate(one, one)}
    assert second.tests[group].rounds == 2  # a round that answered one case of the group steps it
    failed = accumulated(second, ProbeResult(error="probes failed: refused"), groups=[group])
    assert failed.tallies == second.tallies and failed.error == "probes failed: refused"
    assert failed.tests == second.tests
    assert accumulated(failed, ProbeResult({"a": one}), groups=[]).tests == {}  # a group no longer probed


# --- statistics ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stratum", "expected"),
    [
        ((1, 1, 0, 1), lambda odds: 2 * odds / (1 + odds)),
        ((0, 1, 1, 1), lambda odds: 2 / (1 + odds)),
        ((2, 2, 0, 2), lambda odds: 6 * odds**2 / (1 + 4 * odds + odds**2)),
        ((0, 2, 0, 2), lambda odds: 1.0),
        ((3, 3, 2, 2), lambda odds: 1.0),
    ],
    ids=["lost-pair", "won-pair", "both-diverged", "no-failure", "all-failed"],
)
def test_the_likelihood_ratio_is_the_noncentral_over_the_central_hypergeometric(
    stratum: tuple[int, int, int, int], expected: Callable[[float], float]
) -> None:
    assert log_ratios(*stratum) == pytest.approx([math.log(expected(odds)) for odds in ODDS])


@pytest.mark.parametrize(("trials", "other_trials"), [(1, 1), (2, 2), (4, 2), (3, 8)])
def test_the_likelihood_ratio_averages_to_one_when_the_arms_fail_alike(trials: int, other_trials: int) -> None:
    """Given a stratum's total failures, equal arms put them anywhere with the hypergeometric chance: the
    ratio's expectation is one whatever the total, so its product over rounds is a martingale."""
    for total in range(trials + other_trials + 1):
        support = range(max(0, total - other_trials), min(trials, total) + 1)
        chance = [math.comb(trials, k) * math.comb(other_trials, total - k) for k in support]
        ratios = [log_ratios(k, trials, total - k, other_trials) for k in support]
        for i in range(len(ODDS)):
            mean = sum(c * math.exp(r[i]) for c, r in zip(chance, ratios, strict=True)) / sum(chance)
            assert mean == pytest.approx(1.0)
    with pytest.raises(ValueError):
        log_ratios(3, 2, 0, 2)


def greedy_stratum(rng: random.Random, spec_rate: float, base_rate: float) -> tuple[int, int, int, int]:
    """A greedy round: two comparisons a side, each differing at its rate."""
    return sum(rng.random() < spec_rate for _ in range(2)), 2, sum(rng.random() < base_rate for _ in range(2)), 2


def first_flip(strata: Iterable[tuple[int, int, int, int]], *, alpha: float = 0.01) -> int | None:
    """The round at which either test first shows the speculative arm failing more, at half of alpha each."""
    test = Sequential()
    for index, stratum in enumerate(strata, 1):
        test = test.step([stratum])
        if min(test.mixture_p(), test.change_p()) <= alpha / 2:
            return index
    return None


@pytest.mark.parametrize("rate", [0.03, 0.1, 0.4], ids=["3%", "10%", "40%"])
def test_equal_arms_flip_at_most_alpha_of_pilots_over_every_round(rate: float) -> None:
    rng = random.Random(7)
    pilots = 100
    flips = sum(first_flip(greedy_stratum(rng, rate, rate) for _ in range(300)) is not None for _ in range(pilots))
    assert flips <= 0.01 * pilots


def test_a_greedy_divergence_at_twice_the_baselines_rate_is_caught_within_1500_rounds() -> None:
    """2x of 3%: the speculative texts differ from the baseline's in 8.8% of comparisons, the baseline's
    from themselves in 5.9% (a comparison differs when either answer does). At least 80% of pilots flip
    within 1,500 rounds (half of them within about 700)."""
    rng = random.Random(3)
    spec, base = 1 - 0.94 * 0.97, 1 - 0.97**2
    firsts = [first_flip(greedy_stratum(rng, spec, base) for _ in range(1500)) for _ in range(20)]
    assert sum(first is not None for first in firsts) >= 16


def test_a_restart_carries_both_tests_over() -> None:
    rng = random.Random(4)
    rounds = [greedy_stratum(rng, 0.1, 0.1) for _ in range(450)] + [(2, 2, 0, 2)] * 3
    whole = Sequential()
    for stratum in rounds:
        whole = whole.step([stratum])
    earlier, later = Sequential(), Sequential()
    for stratum in rounds[:449]:
        earlier = earlier.step([stratum])
    for stratum in rounds[449:]:
        later = later.step([stratum])
    resumed = earlier.then(later)
    assert resumed.ratios == pytest.approx(whole.ratios) and resumed.rounds == whole.rounds
    # the best start is the restart: the failing rounds' product starts there, where one run has no boundary
    assert resumed.change_p() == pytest.approx(later.change_p()) and resumed.change_p() < whole.change_p()
    assert Sequential().then(later) == later and earlier.then(Sequential()).change_p() == earlier.change_p()


def test_a_scope_resumes_its_probe_tests_after_a_restart_from_the_evidence() -> None:
    probe = case("cancel")
    groups = kind_groups([probe]).values()
    first = None
    for _ in range(8):  # not yet shown
        first = accumulated(first, ProbeResult({case_key(probe): LEAK}), groups=groups)
    kept = ProbeRecord(since=NOW, current=kind_counts(first, [probe]))
    assert kept.before(NOW) == {} and kept.before(None) == kept.counts()
    second = None
    verdicts = []
    for _ in range(3):  # the operator's next run
        second = accumulated(second, ProbeResult({case_key(probe): LEAK}, since=NOW), groups=groups)
        earlier = kept.before(second.since + INTERVAL)
        (check,) = probe_checks(second, [probe], quality=Quality(), confidence=0.95, earlier=earlier)
        verdicts.append(check.verdict)
    assert verdicts == [Verdict.PASS, Verdict.PASS, Verdict.FAIL]  # the 11th round, as in one run


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
