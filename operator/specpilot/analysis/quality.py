"""Quality gates, separate from speed: application-behaviour probes and business webhooks.

The operator runs the probes and calls the webhooks; these functions turn what came back into checks
that `judge_window` takes as `extra`, one per probe kind of a scope. Verification is probability
computation, not fact checking, so quality is judged against its own limits and never traded against a
speedup.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from specpilot.analysis.checks import Check, inconclusive
from specpilot.analysis.evidence import ProbeArm, ProbeCounts
from specpilot.analysis.probes import CaseTally, accumulate, combined, score_sign
from specpilot.analysis.proportions import rate_above_pvalue
from specpilot.analysis.stats import binomial_sf, spent_alpha
from specpilot.api.reasons import MetricName
from specpilot.api.spec import ProbeCase, ProbeKind, Quality, SpeculationPilotSpec
from specpilot.api.status import Verdict


@dataclass(frozen=True)
class ProbeResult:
    """Probe tallies by case (`case_key`), accumulated over rounds, why the latest round failed, and when
    the first of these rounds began (the rounds of one run of the operator: they live in its memory)."""

    tallies: Mapping[str, CaseTally] = field(default_factory=dict)
    error: str | None = None
    since: datetime | None = None


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


def accumulated(previous: ProbeResult | None, latest: ProbeResult) -> ProbeResult:
    """The latest round added to the rounds before it. Cases no longer probed are dropped; a round
    that failed keeps the tallies so far and says why."""
    before = previous.tallies if previous is not None else {}
    since = previous.since if previous is not None else latest.since
    if latest.error is not None and not latest.tallies:
        return ProbeResult(before, latest.error, since)
    tallies = {key: accumulate(before[key], tally) if key in before else tally for key, tally in latest.tallies.items()}
    return ProbeResult(tallies, latest.error, since)


PROBE_METRIC = {
    ProbeKind.GREEDY: MetricName.PROBE_GREEDY,
    ProbeKind.STOP: MetricName.PROBE_STOP,
    ProbeKind.TOOL_CALL: MetricName.PROBE_TOOL_CALL,
    ProbeKind.STRUCTURED: MetricName.PROBE_STRUCTURED,
    ProbeKind.CANCEL: MetricName.PROBE_CANCEL,
    ProbeKind.SAMPLED: MetricName.PROBE_SAMPLED,
}


def probe_checks(
    result: ProbeResult | None, cases: Sequence[ProbeCase], *, quality: Quality, confidence: float
) -> tuple[Check, ...]:
    """A scope's probe checks, one per kind among its cases; hard limits. Inconclusive until a round
    has answered."""
    by_kind = _by_kind(result, cases)
    if not by_kind:
        why = result.error if result is not None and result.error else "no completed probe round"
        return (inconclusive(MetricName.PROBE_AGREEMENT, f"probes: {why}", hard=True),)
    checks = []
    for kind, found in by_kind.items():
        if kind is ProbeKind.SAMPLED:
            checks.append(sampled_check(found, confidence=confidence))
            continue
        tally = combined(tally for _, tally in found)
        assert tally is not None  # every kind listed has a tally
        if kind in _RATE_WORDS:
            checks.append(rate_check(tally, confidence=confidence))
        else:
            checks.append(behaviour_check(tally, min_agreement=quality.min_agreement))
    return tuple(checks)


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
    for kind, found in _by_kind(result, cases).items():
        tally = combined(tally for _, tally in found)
        assert tally is not None  # every kind listed has a tally
        out[kind] = ProbeCounts(
            rounds=tally.rounds,
            baseline=ProbeArm(checks=tally.baseline_trials, passed=tally.baseline_passed, scores=tally.baseline_scores),
            speculative=ProbeArm(
                checks=tally.speculative_trials,
                passed=tally.speculative_passed,
                scores=tally.speculative_scores,
            ),
        )
    return out


def probe_level(rounds: int, confidence: float) -> float:
    """The level a probe test is held to after `rounds` rounds: `1 - confidence` spent across rounds as
    the judge spends it across windows (a hard limit: one failing round flips), so that testing after
    every round does not eventually flip identical arms."""
    return spent_alpha(rounds, alpha=1 - confidence, failure_limit=1)


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


def rate_check(tally: CaseTally, *, confidence: float) -> Check:
    """greedy or cancel: fails only when the speculative arm's failure rate is shown above the compared
    arm's (greedy: text that parts from the baseline's, against the baseline's parting from its own
    repeat; cancel: a dropped stream's slot not back within the bound, against the same on the
    baseline, whose pod carries the same share of the same traffic and so the same chance that load
    hides the gauge's return). Fisher's one-sided exact test on the accumulated counts at the probes'
    level (`probe_level`): a single difference is natural variation, not a failure."""
    metric, words = PROBE_METRIC[tally.kind], _RATE_WORDS[tally.kind]
    x_s, n_s, x_b, n_b = (
        tally.speculative_diverged,
        tally.speculative_trials,
        tally.baseline_diverged,
        tally.baseline_trials,
    )
    if not n_s or not n_b:
        return inconclusive(metric, f"{tally.kind.value} probe: no comparison yet", hard=True)
    level = probe_level(tally.rounds, confidence)
    p = rate_above_pvalue(x_s, n_s, x_b, n_b)
    evidence = (
        f"speculative {words.failed} {x_s}/{n_s}, {words.compared} {x_b}/{n_b} over {tally.rounds} round(s); "
        f"one-sided Fisher p={p:.3g}, level {level:.3g}"
    )
    if p <= level:
        detail = f": {tally.finding.sentence()}" if tally.finding else ""
        verdict, reason = Verdict.FAIL, f"{words.fails}{detail}"
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


def sampled_check(found: Sequence[tuple[ProbeCase, CaseTally]], *, confidence: float) -> Check:
    """Sampled answers fail only when the speculative arm's scores are shown worse than the baseline's:
    a one-sided sign test on the newest pairs of answers (one of each arm, of the same case and round,
    ties left out). With no difference each untied pair goes either way at even odds, so the pairs the
    speculative answer lost are Binomial(untied, 1/2), an exact tail (`stats.binomial_sf`) whatever the
    scores' scale and however many ties they hold (0/1 finish reasons, lengths at maxTokens, a rubric's
    grades), where a rank test's normal approximation would flip identical arms too often. The level is
    spent across rounds as the greedy check spends it. A case whose latest round left answers unscored
    makes it inconclusive: a score that could not be read never passes."""
    metric = MetricName.PROBE_SAMPLED
    unscored = next((tally.unscored for _, tally in found if tally.unscored), None)
    if unscored is not None:
        return inconclusive(metric, f"sampled probe: {unscored}", hard=True)
    pairs = [_turned(case, pair) for case, tally in found for pair in tally.score_pairs]
    if not pairs:
        return inconclusive(metric, "sampled probe: no round scored yet", hard=True)
    untied = sum(base != spec for base, spec in pairs)
    lost = sum(spec < base for base, spec in pairs)
    rounds = max(tally.rounds for _, tally in found)
    level = probe_level(rounds, confidence)
    p = binomial_sf(lost, untied, 0.5)
    evidence = (
        f"the speculative answer scored worse in {lost} of {untied} untied pairs ({len(pairs)} pairs over "
        f"{rounds} round(s)); one-sided sign test p={p:.3g}, level {level:.3g}"
    )
    if p <= level:
        worst = next((tally.finding for _, tally in reversed(found) if tally.finding), None)
        detail = f": {worst.sentence()}" if worst else ""
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


def _turned(case: ProbeCase, pair: tuple[float, float]) -> tuple[float, float]:
    """A pair of scores with higher better, whichever way the case's score improves."""
    sign = score_sign(case)
    return sign * pair[0], sign * pair[1]


def behaviour_check(tally: CaseTally, *, min_agreement: float) -> Check:
    """stop, toolCall or structured: the share of answers that pass on the speculative arm
    where the baseline's pass, against quality.minAgreement. Where the baseline fails too, speculation
    is not to blame: inconclusive."""
    kind, metric = tally.kind.value, PROBE_METRIC[tally.kind]
    if not tally.paired:
        return inconclusive(metric, f"{kind} probe: the baseline fails it too", hard=True)
    share = 1 - tally.regressions / tally.paired
    evidence = f"{tally.paired - tally.regressions}/{tally.paired} speculative answers pass where the baseline's do"
    if share < min_agreement:
        detail = f": {tally.finding.sentence()}" if tally.finding else ""
        verdict, reason = Verdict.FAIL, f"{kind} probe passes {share:.1%}, below {min_agreement:.1%}{detail}"
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
