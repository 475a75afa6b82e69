"""Sampled probe cases: answers scored, paired, tallied and judged by a sequential sign test."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from specpilot.analysis.answers import SCORE_REPLY_LIMIT, Answer, Scored, builtin_score, reply_score
from specpilot.analysis.checks import Check
from specpilot.analysis.evidence import ProbeArm, ProbeCounts
from specpilot.analysis.probes import CaseTally, accumulate, sampled_round, strata
from specpilot.analysis.proportions import Sequential
from specpilot.analysis.quality import (
    ProbeResult,
    accumulated,
    case_key,
    kind_counts,
    kind_groups,
    probe_checks,
    sampled_check,
)
from specpilot.api.reasons import MetricName
from specpilot.api.spec import BuiltinScore, ProbeCase, ProbeKind, Probes, Quality
from specpilot.api.status import Verdict

WEBHOOK = {"webhook": {"url": "http://rater.quality.svc/score"}}


def sampled(prompt: str = "p", **score: object) -> ProbeCase:
    return ProbeCase.from_wire(
        {"kind": "sampled", "prompt": prompt, "temperature": 0.7, "repeats": 4, "score": score or WEBHOOK}
    )


def scored(*values: float | None, why: str = "score webhook answered HTTP 500") -> list[Scored]:
    return [Scored(Answer(f"answer {i} " * 40, "stop"), v, "" if v is not None else why) for i, v in enumerate(values)]


# --- scores ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "builtin", "score"),
    [
        (Answer("x", "stop", tokens=12), BuiltinScore.LENGTH, 12.0),
        (Answer("x", "length", tokens=64), BuiltinScore.FINISH_REASON, 0.0),
        (Answer("x", "stop"), BuiltinScore.FINISH_REASON, 1.0),
        (Answer("x", "tool_calls"), BuiltinScore.FINISH_REASON, 1.0),
        (Answer("x", "abort"), BuiltinScore.FINISH_REASON, 0.0),
        (Answer("x", "stop"), BuiltinScore.LENGTH, None),
        (Answer("x", None, tokens=3), BuiltinScore.FINISH_REASON, None),
        (Answer("", None, status=500), BuiltinScore.LENGTH, None),
    ],
    ids=["length", "cut", "ended", "tool-calls", "aborted", "no-usage", "no-finish-reason", "http-error"],
)
def test_builtin_scores(answer: Answer, builtin: BuiltinScore, score: float | None) -> None:
    found = builtin_score(answer, builtin)
    assert found.score == score
    assert bool(found.why) == (score is None)


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        (b'{"score": 0.75}', 0.75),
        (b'{"score": 3, "why": "polite"}', 3.0),
        (b'{"score": "0.75"}', None),
        (b'{"score": true}', None),
        (b'{"score": NaN}', None),
        (b'{"score": Infinity}', None),
        (b"[0.75]", None),
        (b"0.75", None),
        (b"<html>fine</html>", None),
        (b"[" * 5000, None),
        (b'{"score": 1, "pad": "' + b"x" * SCORE_REPLY_LIMIT + b'"}', None),
    ],
    ids=["number", "integer", "string", "boolean", "nan", "infinity", "list", "bare", "html", "deep", "too-long"],
)
def test_a_reply_scores_only_with_a_finite_number(reply: bytes, score: float | None) -> None:
    assert reply_score(reply) == score


# --- rounds ----------------------------------------------------------------------------------------


def test_a_scored_round_pairs_the_answers_in_order() -> None:
    tally = sampled_round(sampled(), baseline=scored(3, 4, 5, 6), speculative=scored(1, 4, 5, 7))
    assert (tally.lost, tally.won) == (1, 1)  # (3, 1) lost, (6, 7) won, two ties
    assert (tally.baseline_trials, tally.baseline_passed, tally.speculative_trials, tally.speculative_passed) == (
        4,
        4,
        4,
        4,
    )
    assert (tally.baseline_scores.mean, tally.speculative_scores.mean) == (4.5, 4.25)
    assert tally.unscored is None and tally.finding is not None
    assert tally.finding.field == "worst score"
    assert tally.finding.baseline.startswith("3: ") and tally.finding.speculative.startswith("1: ")
    assert len(tally.finding.speculative) <= 90  # the score and an 80-character excerpt, never the answer


def test_a_round_with_an_unscored_answer_adds_no_scores_and_says_why() -> None:
    tally = sampled_round(sampled(), baseline=scored(3, 4, 5, 6), speculative=scored(1, None, 5, 7))
    assert tally.lost == tally.won == 0 and tally.speculative_passed == tally.baseline_passed == 0
    assert tally.baseline_trials == tally.speculative_trials == 4
    assert tally.unscored == "1 of 8 answers of the latest round unscored (score webhook answered HTTP 500)"


def test_the_worst_answer_follows_the_direction_the_score_improves() -> None:
    shorter = sampled(builtin="length", better="Lower")
    tally = sampled_round(shorter, baseline=scored(30, 40), speculative=scored(35, 90))
    assert tally.finding is not None and tally.finding.speculative.startswith("90: ")
    assert (tally.lost, tally.won) == (2, 0)
    assert sampled_round(shorter, baseline=scored(30, 90), speculative=scored(35, 40)).finding is None


def test_the_latest_round_says_whether_it_was_scored() -> None:
    case = sampled()
    good = sampled_round(case, baseline=scored(*range(16)), speculative=scored(*range(16)))
    total = good
    for _ in range(40):
        total = accumulate(total, good)
    assert total.rounds == 41 and total.speculative_scores.n == 41 * 16  # the moments keep every score
    failed = sampled_round(case, baseline=scored(1, 2), speculative=scored(None, 2))
    assert accumulate(total, failed).unscored is not None
    assert accumulate(accumulate(total, failed), good).unscored is None


# --- the check -------------------------------------------------------------------------------------


def rounds(case: ProbeCase, pairs: Sequence[Sequence[tuple[float, float]]]) -> tuple[CaseTally, Sequential]:
    """The tally of rounds of (baseline, speculative) score pairs, and the tests stepped by each."""
    tallies = [
        sampled_round(case, baseline=scored(*(b for b, _ in r)), speculative=scored(*(s for _, s in r))) for r in pairs
    ]
    total, test = tallies[0], Sequential().step(strata(tallies[0]))
    for tally in tallies[1:]:
        total, test = accumulate(total, tally), test.step(strata(tally))
    return total, test


def judged(case: ProbeCase, pairs: Sequence[Sequence[tuple[float, float]]]) -> Check:
    tally, test = rounds(case, pairs)
    return sampled_check([(case, tally)], test, alpha=0.01)


def test_identical_scores_pass() -> None:
    check = judged(sampled(), [[(1.0, 1.0)] * 8] * 3)
    assert check.verdict is Verdict.PASS and check.metric is MetricName.PROBE_SAMPLED and check.hard
    assert "0 of 0 untied pairs" in check.evidence


def test_clearly_worse_speculative_scores_fail_naming_the_worst_answers() -> None:
    check = judged(sampled(), [[(5.0, 1.0)] * 8] * 2)
    assert check.verdict is Verdict.FAIL and check.fires
    assert check.observed == 1.0 and check.threshold == 0.5
    assert "sampled probe scores worse than the baseline's" in check.reason and "worst score" in check.reason
    assert "16 of 16 untied pairs" in check.evidence


def test_better_lower_turns_the_comparison() -> None:
    longer_answers = [[(20.0, 60.0)] * 8] * 2
    assert judged(sampled(builtin="length", better="Lower"), longer_answers).verdict is Verdict.FAIL
    assert judged(sampled(builtin="length"), longer_answers).verdict is Verdict.PASS


@pytest.mark.parametrize(
    ("tally", "saying"),
    [
        (CaseTally(ProbeKind.SAMPLED, baseline_trials=4, speculative_trials=4, unscored="2 of 8 answers"), "2 of 8"),
        (CaseTally(ProbeKind.SAMPLED), "no round scored yet"),
    ],
    ids=["unscored", "nothing-scored"],
)
def test_missing_scores_are_inconclusive_never_a_pass(tally: CaseTally, saying: str) -> None:
    earlier, test = rounds(sampled(), [[(1.0, 1.0)] * 8] * 5)
    check = sampled_check([(sampled(), accumulate(earlier, tally) if tally.unscored else tally)], test, alpha=0.01)
    assert check.verdict is Verdict.INCONCLUSIVE and check.hard and saying in check.reason


def a_a_pilot(rng: random.Random, *, looks: int, repeats: int, grades: Sequence[float], worse: float = 0.0) -> bool:
    """Whether a pilot of identical arms (or, with `worse`, a speculative arm that scores lower that often)
    fails the check at any of its rounds; scores are a rubric's grades, so ties are the rule."""
    case = sampled()
    group = kind_groups([case]).values()
    result = None
    for _ in range(looks):
        pairs = [
            (rng.choice(grades), grades[0] if rng.random() < worse else rng.choice(grades)) for _ in range(repeats)
        ]
        result = accumulated(result, ProbeResult({case_key(case): rounds(case, [pairs])[0]}), groups=group)
        (check,) = probe_checks(result, [case], quality=Quality(), confidence=0.95)
        if check.verdict is Verdict.FAIL:
            return True
    return False


@pytest.mark.parametrize(
    "grades",
    [
        (0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0),
        (1.0, 2.0, 3.0, 4.0, 5.0),
        tuple(float(i) for i in range(100)),
    ],
    ids=["rare-zeros", "rubric", "fine"],
)
def test_identical_arms_flip_at_most_alpha_of_pilots_over_every_round(grades: Sequence[float]) -> None:
    rng = random.Random(5)
    flips = sum(a_a_pilot(rng, looks=20, repeats=8, grades=grades) for _ in range(300))
    assert flips <= 3  # 1% of 300 pilots, every round of each judged


def test_a_speculative_arm_whose_answers_drop_to_the_lowest_grade_is_caught() -> None:
    rng = random.Random(6)
    grades = (1.0, 2.0, 3.0, 4.0, 5.0)
    always = sum(a_a_pilot(rng, looks=3, repeats=8, grades=grades, worse=1.0) for _ in range(50))
    half = sum(a_a_pilot(rng, looks=15, repeats=8, grades=grades, worse=0.5) for _ in range(50))
    assert always == 50 and half >= 40  # within 3 rounds every time; half the time, within 15 nearly always


# --- with the other kinds --------------------------------------------------------------------------


def test_a_scope_with_sampled_cases_gets_one_sampled_check_and_counts_per_arm() -> None:
    cases = [sampled("a"), sampled("b", builtin="finishReason")]
    quality = Quality(probes=Probes(cases=cases))
    a, _ = rounds(cases[0], [[(1.0, 1.0), (2.0, 2.0)]])
    b, _ = rounds(cases[1], [[(1.0, 0.0), (1.0, 1.0)]])
    groups = kind_groups(cases).values()
    result = accumulated(None, ProbeResult({case_key(cases[0]): a, case_key(cases[1]): b}), groups=groups)
    (check,) = probe_checks(result, cases, quality=quality, confidence=0.95)
    assert check.metric is MetricName.PROBE_SAMPLED and check.verdict is Verdict.PASS
    assert "1 of 1 untied pairs (4 pairs over 1 round(s))" in check.evidence
    counts = kind_counts(result, cases)
    assert counts == {
        ProbeKind.SAMPLED: ProbeCounts(
            rounds=1,
            baseline=ProbeArm(checks=4, passed=4, scores=a.baseline_scores.merge(b.baseline_scores)),
            speculative=ProbeArm(checks=4, passed=4, scores=a.speculative_scores.merge(b.speculative_scores)),
            test=Sequential().step(strata(b)),
        )
    }
