"""Quality gates, separate from speed: application-behaviour probes and business webhooks.

The operator runs the probes and calls the webhooks; these functions turn what came back into checks
that `judge_window` takes as `extra`, one per probe kind of a scope. Verification is probability
computation, not fact checking, so quality is judged against its own limits and never traded against a
speedup.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from specpilot.analysis.checks import Check, inconclusive
from specpilot.analysis.probes import CaseTally, accumulate, combined
from specpilot.analysis.proportions import rate_above_pvalue
from specpilot.analysis.stats import spent_alpha
from specpilot.api.reasons import MetricName
from specpilot.api.spec import ProbeCase, ProbeKind, Quality, SpeculationPilotSpec
from specpilot.api.status import Verdict


@dataclass(frozen=True)
class ProbeResult:
    """Probe tallies by case (`case_key`), accumulated over rounds, and why the latest round failed."""

    tallies: Mapping[str, CaseTally] = field(default_factory=dict)
    error: str | None = None


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
    if latest.error is not None and not latest.tallies:
        return ProbeResult(before, latest.error)
    tallies = {key: accumulate(before[key], tally) if key in before else tally for key, tally in latest.tallies.items()}
    return ProbeResult(tallies, latest.error)


PROBE_METRIC = {
    ProbeKind.GREEDY: MetricName.PROBE_GREEDY,
    ProbeKind.STOP: MetricName.PROBE_STOP,
    ProbeKind.TOOL_CALL: MetricName.PROBE_TOOL_CALL,
    ProbeKind.STRUCTURED: MetricName.PROBE_STRUCTURED,
    ProbeKind.CANCEL: MetricName.PROBE_CANCEL,
}


def probe_checks(
    result: ProbeResult | None, cases: Sequence[ProbeCase], *, quality: Quality, confidence: float
) -> tuple[Check, ...]:
    """A scope's probe checks, one per kind among its cases; hard limits. Inconclusive until a round
    has answered."""
    tallies = result.tallies if result is not None else {}
    by_kind: dict[ProbeKind, list[CaseTally]] = {}
    for case in cases:
        if (tally := tallies.get(case_key(case))) is not None:
            by_kind.setdefault(case.kind, []).append(tally)
    if not by_kind:
        why = result.error if result is not None and result.error else "no completed probe round"
        return (inconclusive(MetricName.PROBE_AGREEMENT, f"probes: {why}", hard=True),)
    checks = []
    for kind, found in by_kind.items():
        tally = combined(found)
        assert tally is not None  # every kind listed has a tally
        if kind is ProbeKind.GREEDY:
            checks.append(greedy_check(tally, confidence=confidence))
        else:
            checks.append(behaviour_check(tally, min_agreement=quality.min_agreement))
    return tuple(checks)


def greedy_check(tally: CaseTally, *, confidence: float) -> Check:
    """Greedy text fails only when the speculative arm's divergence rate is shown above the baseline's
    own (the same prompt asked twice): Fisher's one-sided exact test on the accumulated counts, at a
    level spent across rounds as the judge spends it across windows (`stats.spent_alpha`), so checking
    after every round does not eventually flip identical arms."""
    metric = MetricName.PROBE_GREEDY
    x_s, n_s, x_b, n_b = (
        tally.speculative_diverged,
        tally.speculative_trials,
        tally.baseline_diverged,
        tally.baseline_trials,
    )
    if not n_s or not n_b:
        return inconclusive(metric, "greedy probe: no comparison yet", hard=True)
    level = spent_alpha(tally.rounds, alpha=1 - confidence, failure_limit=1)
    p = rate_above_pvalue(x_s, n_s, x_b, n_b)
    evidence = (
        f"speculative diverged {x_s}/{n_s}, baseline from itself {x_b}/{n_b} over {tally.rounds} round(s); "
        f"one-sided Fisher p={p:.3g}, level {level:.3g}"
    )
    if p <= level:
        detail = f": {tally.finding.sentence()}" if tally.finding else ""
        verdict, reason = Verdict.FAIL, f"greedy probe diverges more than the baseline from itself{detail}"
    else:
        verdict, reason = Verdict.PASS, "greedy probe diverges no more than the baseline from itself"
    return Check(
        metric=metric,
        verdict=verdict,
        observed=x_s / n_s,
        threshold=x_b / n_b,
        evidence=evidence,
        reason=reason,
        hard=True,
    )


def behaviour_check(tally: CaseTally, *, min_agreement: float) -> Check:
    """stop, toolCall, structured or cancel: the share of answers that pass on the speculative arm
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
