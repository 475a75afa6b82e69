"""Quality gates, separate from speed: application-behaviour probes and business webhooks.

The operator runs the probes and calls the webhooks; these functions turn what came back into checks
that `judge_window` takes as `extra`, one per probe kind of a scope. Verification is probability
computation, not fact checking, so quality is judged against its own limits and never traded against a
speedup.

A probe check is a hard limit, judged after every round for as long as the pilot runs, so each kind's
chance of flipping a scope whose arms are equal is bounded over the whole pilot (`probe_alpha`), not
per look: a quarter of it goes to the mixture test since the first round, the rest to the change
detector, which catches a fault that begins after many clean rounds about as soon as one that begins at
the first (`proportions`; the split is the one `bench/probes_aa.py` finds to keep a late fault within
1.5 times the rounds of an early one, while a fault from the first round is still caught well within the
targets). Both follow the rounds in order, per scope and kind (`ProbeResult.tests`), and what
they have seen is kept in the evidence beside the counts, so a restart of the operator resumes them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from specpilot.analysis.checks import Check, inconclusive
from specpilot.analysis.evidence import ProbeArm, ProbeCounts
from specpilot.analysis.probes import CaseTally, accumulate, combined, strata
from specpilot.analysis.proportions import Sequential
from specpilot.api.reasons import MetricName
from specpilot.api.spec import ProbeCase, ProbeKind, Quality, SpeculationPilotSpec
from specpilot.api.status import Verdict

FALSE_FLIPS = 0.01  # the share of pilots with equal arms in which a probe kind may flip its scope
CHANGE_SHARE = 0.75  # of a kind's false flips, the change detector's; the mixture test's is the rest

Group = frozenset[str]  # the case keys of one kind among a scope's cases: what its sequential tests follow


@dataclass(frozen=True)
class ProbeResult:
    """Probe tallies by case (`case_key`), accumulated over rounds, the sequential tests by group
    (`kind_groups`), stepped once per round, why the latest round failed, when the first of these
    rounds began (the rounds of one run of the operator: they live in its memory) and how long the
    latest took (a slow score webhook or a cancel case's bound shows here, on the probes' own schedule)."""

    tallies: Mapping[str, CaseTally] = field(default_factory=dict)
    error: str | None = None
    since: datetime | None = None
    tests: Mapping[Group, Sequential] = field(default_factory=dict)
    seconds: float | None = None


def case_key(case: ProbeCase) -> str:
    """A case's identity across rounds: its inputs, as written."""
    return case.model_dump_json()


def scope_cases(spec: SpeculationPilotSpec) -> dict[str, tuple[ProbeCase, ...]]:
    """Each scope's probe cases: its own, or quality.probes' (none without them)."""
    default = spec.quality.probes.all_cases if spec.quality.probes is not None else ()
    return {scope.name: tuple(scope.probes.cases) if scope.probes else default for scope in spec.scopes}


def round_cases(spec: SpeculationPilotSpec) -> tuple[ProbeCase, ...]:
    """The cases one probe round sends: every scope's, each once."""
    unique = {case_key(case): case for cases in scope_cases(spec).values() for case in cases}
    return tuple(unique.values())


def kind_groups(cases: Sequence[ProbeCase]) -> dict[ProbeKind, Group]:
    """A scope's cases by kind, as keys: each kind's sequential tests pool its cases' rounds (scopes with
    the same cases share them)."""
    groups: dict[ProbeKind, set[str]] = {}
    for case in cases:
        groups.setdefault(case.kind, set()).add(case_key(case))
    return {kind: frozenset(keys) for kind, keys in groups.items()}


def probe_groups(spec: SpeculationPilotSpec) -> frozenset[Group]:
    """Every scope's groups: what `accumulated` steps."""
    return frozenset(group for cases in scope_cases(spec).values() for group in kind_groups(cases).values())


def accumulated(previous: ProbeResult | None, latest: ProbeResult, *, groups: Collection[Group]) -> ProbeResult:
    """The latest round added to the rounds before it, and a step of each group's tests that the round
    answered. Cases and groups no longer probed are dropped; a round that failed keeps what it has so
    far and says why."""
    before = previous.tallies if previous is not None else {}
    tested = previous.tests if previous is not None else {}
    since = previous.since if previous is not None else latest.since
    if latest.error is not None and not latest.tallies:
        return ProbeResult(before, latest.error, since, tested, latest.seconds)
    tallies = {key: accumulate(before[key], tally) if key in before else tally for key, tally in latest.tallies.items()}
    tests = {}
    for group in groups:
        answered = [latest.tallies[key] for key in sorted(group) if key in latest.tallies]
        test = tested.get(group, Sequential())
        tests[group] = test.step(s for tally in answered for s in strata(tally)) if answered else test
    return ProbeResult(tallies, latest.error, since, tests, latest.seconds)


PROBE_METRIC = {
    ProbeKind.GREEDY: MetricName.PROBE_GREEDY,
    ProbeKind.STOP: MetricName.PROBE_STOP,
    ProbeKind.TOOL_CALL: MetricName.PROBE_TOOL_CALL,
    ProbeKind.STRUCTURED: MetricName.PROBE_STRUCTURED,
    ProbeKind.CANCEL: MetricName.PROBE_CANCEL,
    ProbeKind.SAMPLED: MetricName.PROBE_SAMPLED,
}


def probe_checks(
    result: ProbeResult | None,
    cases: Sequence[ProbeCase],
    *,
    quality: Quality,
    confidence: float,
    earlier: Mapping[ProbeKind, ProbeCounts] | None = None,
) -> tuple[Check, ...]:
    """A scope's probe checks, one per kind among its cases; hard limits. `earlier` is what the operator's
    earlier runs counted for the scope (`ProbeRecord.before`): their tests go on where they stopped.
    Inconclusive until a round of this run has answered."""
    by_kind = _by_kind(result, cases)
    if not by_kind:
        why = result.error if result is not None and result.error else "no completed probe round"
        return (inconclusive(MetricName.PROBE_AGREEMENT, f"probes: {why}", hard=True),)
    assert result is not None  # a kind with a tally has a result
    alpha = probe_alpha(confidence)
    groups = kind_groups(cases)
    checks = []
    for kind, found in by_kind.items():
        test = result.tests.get(groups[kind], Sequential())
        if earlier and kind in earlier:
            test = earlier[kind].test.then(test)
        if kind is ProbeKind.SAMPLED:
            checks.append(sampled_check(found, test, alpha=alpha))
            continue
        tally = combined(tally for _, tally in found)
        assert tally is not None  # every kind listed has a tally
        if kind in _RATE_WORDS:
            checks.append(rate_check(tally, test, alpha=alpha))
        else:
            checks.append(behaviour_check(tally, test, min_agreement=quality.min_agreement, alpha=alpha))
    latest = _latest_round(result)
    return tuple(replace(check, evidence=f"{check.evidence}; {latest}") if latest else check for check in checks)


def _latest_round(result: ProbeResult) -> str:
    """How the latest round went, on the probes' own schedule: how long it took, and why it failed."""
    parts = [f"took {result.seconds:.3g} s"] if result.seconds is not None else []
    parts += [f"failed: {result.error}"] if result.error else []
    return f"the latest round {' and '.join(parts)}" if parts else ""


def _by_kind(
    result: ProbeResult | None, cases: Sequence[ProbeCase]
) -> dict[ProbeKind, list[tuple[ProbeCase, CaseTally]]]:
    """The cases with a tally so far, and their tallies, by kind (in the order the cases come)."""
    tallies = result.tallies if result is not None else {}
    by_kind: dict[ProbeKind, list[tuple[ProbeCase, CaseTally]]] = {}
    for case in cases:
        if (tally := tallies.get(case_key(case))) is not None:
            by_kind.setdefault(case.kind, []).append((case, tally))
    return by_kind


def kind_counts(result: ProbeResult | None, cases: Sequence[ProbeCase]) -> dict[ProbeKind, ProbeCounts]:
    """A scope's probe rounds so far as the evidence keeps them: per kind, each arm's checks, passes and
    scores over the kind's cases (`CaseTally` says what they count for each kind)."""
    out = {}
    groups = kind_groups(cases)
    for kind, found in _by_kind(result, cases).items():
        tally = combined(tally for _, tally in found)
        assert tally is not None and result is not None  # every kind listed has a tally
        out[kind] = ProbeCounts(
            rounds=tally.rounds,
            baseline=ProbeArm(checks=tally.baseline_trials, passed=tally.baseline_passed, scores=tally.baseline_scores),
            speculative=ProbeArm(
                checks=tally.speculative_trials,
                passed=tally.speculative_passed,
                scores=tally.speculative_scores,
            ),
            test=result.tests.get(groups[kind], Sequential()),
        )
    return out


def probe_alpha(confidence: float) -> float:
    """The chance a probe kind may flip a scope whose arms are equal, over the whole pilot: FALSE_FLIPS, or
    `1 - confidence` where that is smaller."""
    return min(FALSE_FLIPS, 1 - confidence)


def _tested(test: Sequential, *, alpha: float) -> tuple[bool, str]:
    """Whether either sequential test shows the speculative arm failing more often, the change detector
    at CHANGE_SHARE of `alpha` and the mixture test at the rest (a union bound keeps the two within it),
    and what they read."""
    mixture, change = test.mixture_p(), test.change_p()
    at_mixture, at_change = alpha * (1 - CHANGE_SHARE), alpha * CHANGE_SHARE
    said = (
        f"mixture SPRT p={mixture:.3g} at level {at_mixture:.3g}, CUSUM p={change:.3g} at level {at_change:.3g}, "
        f"over {test.rounds} round(s)"
    )
    return mixture <= at_mixture or change <= at_change, said


@dataclass(frozen=True)
class _RateWords:
    """How a rate check speaks of its kind's failure."""

    failed: str  # what a failing answer did, e.g. "diverged"
    compared: str  # what the compared arm's failures are set against, e.g. "baseline from itself"
    fails: str  # the failing verdict's reason, before the finding
    passes: str  # the passing verdict's reason


_RATE_WORDS = {
    ProbeKind.GREEDY: _RateWords(
        "diverged",
        "baseline from itself",
        "greedy probe diverges more than the baseline from itself",
        "greedy probe diverges no more than the baseline from itself",
    ),
    ProbeKind.CANCEL: _RateWords(
        "kept a dropped stream's slot",
        "baseline",
        "cancel probe keeps dropped streams' slots more often than the baseline",
        "cancel probe keeps dropped streams' slots no more often than the baseline",
    ),
}


def rate_check(tally: CaseTally, test: Sequential, *, alpha: float) -> Check:
    """greedy or cancel: fails only when the speculative arm's failure rate is shown above the compared
    arm's (greedy: text that parts from the baseline's, against the baseline's parting from its own
    repeat; cancel: a dropped stream's slot not back within the bound, against the same on the
    baseline, whose pod carries the same traffic (a copy of it) and so the same chance that load
    hides the gauge's return), by the kind's sequential tests (`_tested`): a single difference is
    natural variation, not a failure."""
    metric, words = PROBE_METRIC[tally.kind], _RATE_WORDS[tally.kind]
    x_s, n_s, x_b, n_b = (
        tally.speculative_diverged,
        tally.speculative_trials,
        tally.baseline_diverged,
        tally.baseline_trials,
    )
    if not n_s or not n_b:
        return inconclusive(metric, f"{tally.kind.value} probe: no comparison yet", hard=True)
    shown, said = _tested(test, alpha=alpha)
    evidence = (
        f"speculative {words.failed} {x_s}/{n_s}, {words.compared} {x_b}/{n_b} over {tally.rounds} round(s); {said}"
    )
    if shown:
        verdict, reason = Verdict.FAIL, f"{words.fails}{_detail(tally)}"
    else:
        verdict, reason = Verdict.PASS, words.passes
    return Check(
        metric=metric,
        verdict=verdict,
        observed=x_s / n_s,
        threshold=x_b / n_b,
        evidence=evidence,
        reason=reason,
        hard=True,
    )


def sampled_check(found: Sequence[tuple[ProbeCase, CaseTally]], test: Sequential, *, alpha: float) -> Check:
    """Sampled answers fail only when the speculative arm's scores are shown worse than the baseline's:
    a one-sided sign test on the pairs of answers (one of each arm, of the same case and round, ties
    left out). With no difference each untied pair goes either way at even odds whatever the scores'
    scale and however many ties they hold (0/1 finish reasons, lengths at maxTokens, a rubric's grades),
    where a rank test's normal approximation would flip identical arms too often; the kind's sequential
    tests (`_tested`) read the pairs round by round. A case whose latest round left answers unscored
    makes it inconclusive: a score that could not be read never passes."""
    metric = MetricName.PROBE_SAMPLED
    unscored = next((tally.unscored for _, tally in found if tally.unscored), None)
    if unscored is not None:
        return inconclusive(metric, f"sampled probe: {unscored}", hard=True)
    pairs = sum(tally.baseline_passed for _, tally in found)
    if not pairs:
        return inconclusive(metric, "sampled probe: no round scored yet", hard=True)
    lost = sum(tally.lost for _, tally in found)
    untied = lost + sum(tally.won for _, tally in found)
    rounds = max(tally.rounds for _, tally in found)
    shown, said = _tested(test, alpha=alpha)
    evidence = (
        f"the speculative answer scored worse in {lost} of {untied} untied pairs ({pairs} pairs over "
        f"{rounds} round(s)); {said}"
    )
    if shown:
        worst = next((tally for _, tally in reversed(found) if tally.finding), None)
        detail = _detail(worst) if worst else ""
        verdict, reason = Verdict.FAIL, f"sampled probe scores worse than the baseline's{detail}"
    else:
        verdict, reason = Verdict.PASS, "sampled probe scores no worse than the baseline's"
    return Check(
        metric=metric,
        verdict=verdict,
        observed=lost / untied if untied else 0.0,
        threshold=0.5,
        evidence=evidence,
        reason=reason,
        hard=True,
    )


def behaviour_check(tally: CaseTally, test: Sequential, *, min_agreement: float, alpha: float) -> Check:
    """stop, toolCall or structured: the share of answers that pass on the speculative arm where the
    baseline's pass, against quality.minAgreement, and the kind's sequential tests (`_tested`) on the
    arms' failures, which catch a regression below that share and one that begins after many clean
    rounds. Where the baseline fails too, and the tests show nothing, speculation is not to blame:
    inconclusive."""
    kind, metric = tally.kind.value, PROBE_METRIC[tally.kind]
    shown, said = _tested(test, alpha=alpha)
    if not tally.paired and not shown:
        return inconclusive(metric, f"{kind} probe: the baseline fails it too", hard=True, evidence=said)
    share = 1 - tally.regressions / tally.paired if tally.paired else 0.0
    evidence = (
        f"{tally.paired - tally.regressions}/{tally.paired} speculative answers pass where the baseline's do; "
        f"speculative failed {tally.speculative_diverged}/{tally.speculative_trials}, baseline "
        f"{tally.baseline_diverged}/{tally.baseline_trials}; {said}"
    )
    if tally.paired and share < min_agreement:
        verdict, reason = Verdict.FAIL, f"{kind} probe passes {share:.1%}, below {min_agreement:.1%}{_detail(tally)}"
    elif shown:
        verdict, reason = Verdict.FAIL, f"{kind} probe fails more often than the baseline{_detail(tally)}"
    else:
        verdict, reason = Verdict.PASS, f"{kind} probe passes {share:.1%}"
    return Check(
        metric=metric,
        verdict=verdict,
        observed=share,
        threshold=min_agreement,
        evidence=evidence,
        reason=reason,
        hard=True,
    )


def _detail(tally: CaseTally) -> str:
    """A failing reason's tail: the latest finding."""
    return f": {tally.finding.sentence()}" if tally.finding else ""


@dataclass(frozen=True)
class WebhookResult:
    """One webhook's answer about one window."""

    name: str
    ok: bool
    critical: bool
    detail: str


def webhook_check(name: str, ok: bool, *, critical: bool, detail: str = "") -> Check:
    """One webhook's answer for the window: a 2xx passes; a non-2xx, a timeout or no answer fails.

    A critical webhook that fails flips the scope at once; another counts as an ordinary failed
    check towards failureLimit."""
    kind = "critical webhook" if critical else "webhook"
    return Check(
        metric=MetricName.WEBHOOK,
        verdict=Verdict.PASS if ok else Verdict.FAIL,
        evidence=detail,
        reason=f"{kind} {name} {'passed' if ok else 'failed'}" + (f": {detail}" if detail and not ok else ""),
        hard=critical,
    )
