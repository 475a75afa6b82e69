"""One probe round of one case, judged: both arms' answers in, a tally of passes out. Pure.

A tally counts answers per arm and, for the checks, what pins a failure to speculation: for greedy
text, the speculative arm's divergences from the baseline beside the baseline's divergences from
itself (the same prompt asked twice); for sampled answers, both arms' scores and the pairs each arm
won; for the other kinds, answers the speculative arm failed where the baseline's passed. Tallies add
up over rounds (`accumulate`), and the latest failure is kept as a finding with short excerpts, never
a whole answer. A round's tally is also a stratum of the sequential tests (`strata`,
`proportions.Sequential`), which follow the rounds in order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from specpilot.analysis.answers import (
    Answer,
    Fault,
    Scored,
    cancel_fault,
    divergence,
    excerpt,
    stop_fault,
    structured_fault,
    tool_call_fault,
)
from specpilot.analysis.evidence import Moments
from specpilot.analysis.proportions import Stratum
from specpilot.api.spec import Better, ProbeCase, ProbeKind


@dataclass(frozen=True)
class Finding:
    """The latest speculative failure of a case: which field, and short excerpts of both answers."""

    kind: ProbeKind
    prompt: str
    field: str
    baseline: str
    speculative: str

    def sentence(self) -> str:
        return (
            f"{self.kind.value} probe {self.prompt!r}: {self.field} differs "
            f"(baseline {self.baseline!r}, speculative {self.speculative!r})"
        )


@dataclass(frozen=True)
class CaseTally:
    """A case's answers so far. Greedy: trials are text comparisons (speculative against baseline, and
    the baseline against its own repeat), passes the equal ones. Sampled: trials are answers asked,
    passes those whose score counts (a round counts only when every answer got one), and the pairs (one
    answer of each arm) that either arm's answer won. Other kinds: trials are answers, and `paired` /
    `regressions` count those whose baseline answer passed / that failed on speculative only."""

    kind: ProbeKind
    rounds: int = 1
    baseline_passed: int = 0
    baseline_trials: int = 0
    speculative_passed: int = 0
    speculative_trials: int = 0
    paired: int = 0
    regressions: int = 0
    diverged_at: int = 0  # greedy: sum of the first divergence positions of speculative texts
    lost: int = 0  # sampled: pairs whose speculative answer scored worse
    won: int = 0  # sampled: pairs whose speculative answer scored better
    baseline_scores: Moments = field(default_factory=Moments)  # sampled: every score that counted
    speculative_scores: Moments = field(default_factory=Moments)
    unscored: str | None = None  # sampled: why the latest round's answers were not all scored
    finding: Finding | None = None

    @property
    def speculative_diverged(self) -> int:
        return self.speculative_trials - self.speculative_passed

    @property
    def baseline_diverged(self) -> int:
        return self.baseline_trials - self.baseline_passed


@dataclass(frozen=True)
class ArmAnswers:
    """One arm's answers to a case: whole, and reassembled from the stream."""

    whole: Answer
    streamed: Answer


@dataclass(frozen=True)
class Readings:
    """An arm's vllm:num_requests_running before a dropped stream, and once settled (or at the bound)."""

    before: float | None
    after: float | None


def accumulate(total: CaseTally, latest: CaseTally) -> CaseTally:
    """Two tallies of the same case as one; the latest finding wins, and the latest round says whether
    its answers were all scored."""
    return CaseTally(
        kind=latest.kind,
        rounds=total.rounds + latest.rounds,
        baseline_passed=total.baseline_passed + latest.baseline_passed,
        baseline_trials=total.baseline_trials + latest.baseline_trials,
        speculative_passed=total.speculative_passed + latest.speculative_passed,
        speculative_trials=total.speculative_trials + latest.speculative_trials,
        paired=total.paired + latest.paired,
        regressions=total.regressions + latest.regressions,
        diverged_at=total.diverged_at + latest.diverged_at,
        lost=total.lost + latest.lost,
        won=total.won + latest.won,
        baseline_scores=total.baseline_scores.merge(latest.baseline_scores),
        speculative_scores=total.speculative_scores.merge(latest.speculative_scores),
        unscored=latest.unscored,
        finding=latest.finding or total.finding,
    )


def combined(tallies: Iterable[CaseTally]) -> CaseTally | None:
    """Several cases' tallies (of one kind) as one; rounds are the most any case ran."""
    out: CaseTally | None = None
    for tally in tallies:
        out = tally if out is None else replace(accumulate(out, tally), rounds=max(out.rounds, tally.rounds))
    return out


def greedy_round(case: ProbeCase, *, baseline: ArmAnswers, again: ArmAnswers, speculative: ArmAnswers) -> CaseTally:
    """Greedy text: the speculative answer against the baseline's, and the baseline's against its own
    repeat (another request, so another batch), whole and streamed. A difference is counted, not failed."""
    spec_parts = [divergence(s.text, b.text) for s, b in _pairs(speculative, baseline)]
    self_parts = [divergence(a.text, b.text) for a, b in _pairs(again, baseline)]
    finding = None
    for (spec, base), part in zip(_pairs(speculative, baseline), spec_parts, strict=True):
        if part.position is not None:
            at = part.position
            shown = excerpt(base.text, at), excerpt(spec.text, at)
            finding = Finding(case.kind, excerpt(case.prompt), f"text at {at}", *shown)
    return CaseTally(
        kind=case.kind,
        baseline_passed=sum(part.position is None for part in self_parts),
        baseline_trials=len(self_parts),
        speculative_passed=sum(part.position is None for part in spec_parts),
        speculative_trials=len(spec_parts),
        diverged_at=sum(part.position for part in spec_parts if part.position is not None),
        finding=finding,
    )


def answer_round(case: ProbeCase, *, baseline: ArmAnswers, speculative: ArmAnswers) -> CaseTally:
    """stop, toolCall or structured: each arm's answers judged by the case's contract."""
    base = _faults(case, baseline, None)
    spec = _faults(case, speculative, baseline)
    return _tally(case, base, spec, shown=lambda i, field: _shown((baseline.whole, baseline.streamed)[i], field))


def sampled_round(case: ProbeCase, *, baseline: Sequence[Scored], speculative: Sequence[Scored]) -> CaseTally:
    """sampled: each arm's answers at the case's temperature, scored, paired one to one in the order they
    were asked (the i-th of each arm). The round's scores count only when every answer of both arms got
    one: a scorer that fails on some answers (broken ones, say) must not leave out just those. The
    finding is each arm's worst-scored answer, when the speculative arm's is the worse."""
    answers = [*baseline, *speculative]
    missing = [scored for scored in answers if scored.score is None]
    counted = not missing and len(baseline) == len(speculative)
    pairs = tuple((_score(b), _score(s)) for b, s in zip(baseline, speculative, strict=True)) if counted else ()
    sign = score_sign(case)
    finding = None
    if pairs:
        worst_base, worst_spec = (min(arm, key=lambda scored: sign * _score(scored)) for arm in (baseline, speculative))
        if sign * _score(worst_spec) < sign * _score(worst_base):
            shown = _shown_score(worst_base), _shown_score(worst_spec)
            finding = Finding(case.kind, excerpt(case.prompt), "worst score", *shown)
    why = (
        f"{len(missing)} of {len(answers)} answers of the latest round unscored ({missing[0].why})" if missing else None
    )
    return CaseTally(
        kind=case.kind,
        baseline_passed=len(pairs),
        baseline_trials=len(baseline),
        speculative_passed=len(pairs),
        speculative_trials=len(speculative),
        lost=sum(sign * s < sign * b for b, s in pairs),
        won=sum(sign * s > sign * b for b, s in pairs),
        baseline_scores=_moments(b for b, _ in pairs),
        speculative_scores=_moments(s for _, s in pairs),
        unscored=why,
        finding=finding,
    )


def strata(tally: CaseTally) -> tuple[Stratum, ...]:
    """One round's tally as the sequential tests' strata: the speculative arm's failures (greedy: its
    divergences from the baseline) beside the baseline's (greedy: from itself); sampled: each untied pair
    a stratum of its own, one answer a side, the loser the one that failed. A greedy round's comparisons
    share the baseline's answers: one that diverged makes both sides differ at once, which only gathers
    the speculative count closer to half the total than the hypergeometric does, so the tests stay
    valid, a little cautious."""
    if tally.kind is ProbeKind.SAMPLED:
        return ((1, 1, 0, 1),) * tally.lost + ((0, 1, 1, 1),) * tally.won
    return ((tally.speculative_diverged, tally.speculative_trials, tally.baseline_diverged, tally.baseline_trials),)


def score_sign(case: ProbeCase) -> float:
    """What a sampled case's scores are multiplied by so that higher is better: -1 where they improve downwards."""
    return -1.0 if case.score is not None and case.score.better is Better.LOWER else 1.0


def _score(scored: Scored) -> float:
    assert scored.score is not None  # only rounds whose answers were all scored are compared
    return scored.score


def _shown_score(scored: Scored) -> str:
    return f"{_score(scored):g}: {excerpt(scored.answer.text)}"


def _moments(values: Iterable[float]) -> Moments:
    out = Moments()
    for value in values:
        out = out.add(value)
    return out


def cancel_round(case: ProbeCase, *, baseline: Readings, speculative: Readings) -> CaseTally:
    """cancel: each arm's running-requests gauge came back after a dropped stream."""
    base = [cancel_fault(baseline.before, baseline.after)]
    spec = [cancel_fault(speculative.before, speculative.after)]
    return _tally(case, base, spec, shown=lambda _, __: f"{baseline.before} before, {baseline.after} after")


def _pairs(one: ArmAnswers, other: ArmAnswers) -> list[tuple[Answer, Answer]]:
    return [(one.whole, other.whole), (one.streamed, other.streamed)]


def _faults(case: ProbeCase, arm: ArmAnswers, baseline: ArmAnswers | None) -> list[Fault | None]:
    if case.kind is ProbeKind.TOOL_CALL:
        return [tool_call_fault(arm.whole, arm.streamed, case=case)]
    if case.kind is ProbeKind.STRUCTURED:
        return [structured_fault(answer, schema=case.json_schema or {}) for answer in (arm.whole, arm.streamed)]
    if case.kind is ProbeKind.STOP:
        against = (None, None) if baseline is None else (baseline.whole, baseline.streamed)
        return [
            stop_fault(answer, base, stop=case.stop)
            for answer, base in zip((arm.whole, arm.streamed), against, strict=True)
        ]
    raise ValueError(f"{case.kind.value} cases are not judged as answers")


def _shown(answer: Answer, field: str) -> str:
    """The baseline's side of a finding: the same field of its answer."""
    if field in ("finish_reason", "stop_reason", "status"):
        return str(getattr(answer, field))
    if field.startswith(("tool_calls", "streamed tool_calls")) and answer.tool_calls:
        return excerpt(answer.tool_calls[0].arguments)
    return excerpt(answer.text)


def _tally(
    case: ProbeCase, base: list[Fault | None], spec: list[Fault | None], *, shown: Callable[[int, str], str]
) -> CaseTally:
    finding = None
    regressions = 0
    for i, (b, s) in enumerate(zip(base, spec, strict=True)):
        if b is None and s is not None:
            regressions += 1
            finding = Finding(case.kind, excerpt(case.prompt), s.field, shown(i, s.field), s.got)
    return CaseTally(
        kind=case.kind,
        baseline_passed=base.count(None),
        baseline_trials=len(base),
        speculative_passed=spec.count(None),
        speculative_trials=len(spec),
        paired=base.count(None),
        regressions=regressions,
        finding=finding,
    )
