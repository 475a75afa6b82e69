"""The decisions stated: a scope's findings and decision (`decide_scope`), when the pilot's is due, and
the pilot's decision from its scopes' (`decide_pilot`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from specpilot.analysis.bands import Band, Comparison, Crossover
from specpilot.analysis.decision.alternative import judge_alternative
from specpilot.analysis.decision.gains import DecodeShare
from specpilot.analysis.decision.phrases import _load
from specpilot.analysis.decision.rules import RULES, _first
from specpilot.analysis.decision.scope_facts import DEFAULT_TTFT, _compared, facts
from specpilot.analysis.evidence import Evidence, ScopeEvidence
from specpilot.analysis.scheduled import ScheduledArm
from specpilot.api.spec import QuantileRatio
from specpilot.api.status import (
    AdoptionBound,
    Decision,
    DecisionOutcome,
    DecisionTrigger,
    DeferReason,
    Envelope,
    FallbackRecord,
    ScopeDecision,
    ScopeState,
    ScopeStatus,
)
from specpilot.wire.names import Arm

SETTLED = frozenset({ScopeState.SPECULATIVE, ScopeState.ROLLED_BACK})


@dataclass(frozen=True, kw_only=True)
class ScopeFindings:
    """A scope's bands, comparisons, crossover, timing breakdown and decision."""

    scope: str
    compared: Arm  # the arm the speculative arm was compared with
    bands: Mapping[Arm, tuple[Band, ...]]
    comparisons: tuple[Comparison, ...]
    crossover: Crossover | None
    share: DecodeShare | None
    decision: ScopeDecision


def decide_scope(
    name: str,
    evidence: Evidence,
    *,
    fallbacks: Sequence[FallbackRecord],
    confidence: float,
    state: ScopeState | None = None,
    ttft: QuantileRatio = DEFAULT_TTFT,
    peak: float | None = None,
    gated: bool = True,
    rehearsal: bool = False,
    scheduled: ScheduledArm | None = None,
    look: int = 1,
) -> ScopeFindings:
    """The scope's findings and decision from everything recorded for it; `state` is where the scope
    is now (a scope rolled back for speed or latency is not adopted, whatever its bands say), `ttft`
    the TTFT limit an adopted scope's matched bands must meet, `peak` the load its envelope must
    reach to be adopted at every load (`envelope_peak`; None: production's p95), `gated` whether a
    probe or webhook checks its answers (an adoption without one says it rests on speed alone), and
    `rehearsal` whether spec.rehearsal is set (what is left to rehearse is then stated as planned),
    `scheduled` the speculative arm's schedule where it stops drafting above a batch, and `look` how many
    times the decision has been stated (its non-inferiority test spends its level over them)."""
    arm_bands, comparisons = _compared(evidence, name, confidence)
    found = facts(
        name,
        evidence,
        comparisons=comparisons,
        fallbacks=fallbacks,
        confidence=confidence,
        state=state,
        ttft=ttft,
        peak=peak,
        gated=gated,
        rehearsal=rehearsal,
        scheduled=scheduled,
        look=look,
    )
    decision = _first(found, RULES)
    assert decision is not None  # the last rule always decides
    alternative = (
        judge_alternative(
            name, evidence.scopes.get(name, ScopeEvidence()), arm_bands, overlap=evidence.overlap, confidence=confidence
        )
        if Arm.ALTERNATIVE in evidence.gpus and evidence.compared is Arm.CONTROL
        else None
    )
    return ScopeFindings(
        scope=name,
        compared=found.compared,
        bands=arm_bands,
        comparisons=tuple(comparisons),
        crossover=found.crossing,
        share=found.share,
        decision=decision.model_copy(update={"alternative": alternative}),
    )


def decision_due(
    scopes: Sequence[ScopeStatus], annotations: Mapping[str, str], *, annotation: str
) -> DecisionTrigger | None:
    """Whether the pilot's decision is stated now: asked for, or every scope has settled."""
    if annotation in annotations:
        return DecisionTrigger.REQUESTED
    if scopes and all(scope.state in SETTLED for scope in scopes):
        return DecisionTrigger.SETTLED
    return None


def _low_load_limit(decision: ScopeDecision) -> float:
    """Where a scope adopted in low-load windows stops: its crossover, or the top of what it won at."""
    return decision.crossover_load or decision.max_load or 0.0


def _bounded_by(name: str, decision: ScopeDecision) -> str:
    """What stops a scope's adoption in low-load windows where it stops, with its figure: the pilot's first
    sentence names it."""
    bound = decision.bound
    if decision.crossover_load is not None:
        return f"the crossover of {name}, above which ordinary decoding is faster"
    won = f"the highest load {name} won at"
    if bound is None:
        return won
    seen = f"{bound.observed or 0:.3g} against {bound.limit or 0:.3g}"
    failed = decision.limit_failure
    match bound.kind:
        case AdoptionBound.TTFT_LIMIT:
            return (
                f"the highest load at which {name}'s TTFT tail holds: bounded by its TTFT limit, "
                f"{bound.observed or 0:.2f}x over every load it wins at against {bound.limit or 0:.2f}x"
            )
        case AdoptionBound.END_TO_END:
            return (
                f"the highest load at which {name}'s requests finish faster end to end: bounded by end-to-end time, "
                f"{bound.observed or 0:.2f}x over every load it wins at"
            )
        case AdoptionBound.LIMIT if failed is not None and bound.metric is not None:
            return (
                f"{won}: bounded by its {bound.metric.value} limit ({seen}), which fails between "
                f"{failed.low:.2f} and {failed.high:.2f}"
            )
        case AdoptionBound.UNMEASURED_LOAD:
            return f"{won}: bounded by a load not measured, {bound.observed or 0:.2f}, which it must hold"
        case AdoptionBound.SPEED if bound.metric is not None:
            return f"{won}: bounded by speed, its windows flipped it back for {bound.metric.value} ({seen})"
        case _:
            return f"{won}: bounded by speed, not measurably faster above it"


@dataclass(frozen=True)
class _Stated:
    """What every pilot decision carries: when and why it was stated, and its scopes' first reasons."""

    trigger: DecisionTrigger
    now: datetime
    scope_reasons: tuple[str, ...]

    def reasons(self, lead: str) -> list[str]:
        return [lead, *self.scope_reasons][:32]


def _adopted_in_low_load(
    stated: _Stated,
    decisions: Mapping[str, ScopeDecision],
    envelope: Envelope | None,
    *,
    low: Sequence[str],
    deferred: Sequence[str],
) -> Decision:
    """Some scopes win only at low load: adopted below the lowest of their limits (those adopted within
    the `envelope` go along at every load measured)."""
    first = min(low, key=lambda name: _low_load_limit(decisions[name]))
    chosen = decisions[first]
    limit = _low_load_limit(chosen)
    what = _bounded_by(first, chosen)
    lead = (
        f"Adopt speculation for {', '.join(low)} in low-load windows: below {_load(limit)} ({what})"
        + (f", and for {', '.join(envelope.scopes)} at every load measured" if envelope is not None else "")
        + (f"; defer {', '.join(deferred)}" if deferred else "")
        + "."
    )
    return Decision(
        outcome=DecisionOutcome.ADOPT_IN_LOW_LOAD_WINDOWS,
        decided_at=stated.now,
        stated_because=stated.trigger,
        envelope=envelope,
        crossover_load=limit,
        crossover_low=chosen.crossover_low,
        crossover_high=chosen.crossover_high,
        limit_failure=chosen.limit_failure,
        bound=chosen.bound,
        reasons=stated.reasons(lead),
    )


def _adopted_within(stated: _Stated, envelope: Envelope, *, deferred: Sequence[str]) -> Decision:
    """Some scopes win at every load measured: adopted up to the lowest of their envelopes."""
    lead = (
        f"Adopt speculation for {', '.join(envelope.scopes)} within the envelope measured, up to "
        f"{_load(envelope.max_load or 0)}" + (f"; defer {', '.join(deferred)}" if deferred else "") + "."
    )
    return Decision(
        outcome=DecisionOutcome.ADOPT_WITHIN_ENVELOPE,
        decided_at=stated.now,
        stated_because=stated.trigger,
        envelope=envelope,
        reasons=stated.reasons(lead),
    )


def _envelope(decisions: Mapping[str, ScopeDecision], names: Sequence[str]) -> Envelope:
    """The envelope of the scopes `names`: up to the lowest of the loads they were adopted up to."""
    tops = [t for t in (decisions[name].max_load for name in names) if t is not None]
    return Envelope(scopes=list(names), max_load=min(tops) if tops else None)


def _adopted_with_schedule(
    stated: _Stated, decisions: Mapping[str, ScopeDecision], *, scheduled: Sequence[str], deferred: Sequence[str]
) -> Decision:
    """Some scopes pay on both sides of the schedule's switch: it is adopted for them, up to the lowest of
    the loads they were measured at (one engine runs one schedule for every scope)."""
    envelope = _envelope(decisions, scheduled)
    schedule = decisions[scheduled[0]].schedule
    lead = (
        f"Adopt the scheduled config for {', '.join(scheduled)}, up to {_load(envelope.max_load or 0)}: "
        f"{schedule}" + (f"; defer {', '.join(deferred)}" if deferred else "") + "."
    )
    return Decision(
        outcome=DecisionOutcome.ADOPT_WITH_SCHEDULE,
        decided_at=stated.now,
        stated_because=stated.trigger,
        envelope=envelope,
        schedule=schedule,
        reasons=stated.reasons(lead),
    )


def _deferred(stated: _Stated, decisions: Mapping[str, ScopeDecision]) -> Decision:
    """No scope adopted: deferred for the reason most scopes were (on a tie, the first in DeferReason)."""
    counts = Counter(d.defer_reason for d in decisions.values() if d.defer_reason is not None)
    order = list(DeferReason)
    reason = min(counts, key=lambda r: (-counts[r], order.index(r))) if counts else DeferReason.INSUFFICIENT_EVIDENCE
    lead = f"Defer speculation: {reason.value} for {counts.get(reason, 0)} of {len(decisions)} scope(s)."
    return Decision(
        outcome=DecisionOutcome.DEFER,
        decided_at=stated.now,
        stated_because=stated.trigger,
        defer_reason=reason,
        reasons=stated.reasons(lead),
    )


def decide_pilot(
    findings: Sequence[ScopeFindings],
    *,
    trigger: DecisionTrigger,
    now: datetime,
    previous: Decision | None = None,
    look: int = 1,
) -> Decision:
    """The pilot's decision from its scopes' at its `look`-th statement; `decided_at` (and `looks`) move
    only when the decision changes."""
    decisions = {f.scope: f.decision for f in findings}
    within = [name for name, d in decisions.items() if d.outcome is DecisionOutcome.ADOPT_WITHIN_ENVELOPE]
    low = [name for name, d in decisions.items() if d.outcome is DecisionOutcome.ADOPT_IN_LOW_LOAD_WINDOWS]
    scheduled = [name for name, d in decisions.items() if d.outcome is DecisionOutcome.ADOPT_WITH_SCHEDULE]
    deferred = [name for name, d in decisions.items() if d.outcome is DecisionOutcome.DEFER]
    stated = _Stated(trigger, now, tuple(d.reasons[0] for d in decisions.values() if d.reasons))
    envelope = _envelope(decisions, within) if within else None
    if scheduled:
        decision = _adopted_with_schedule(stated, decisions, scheduled=scheduled, deferred=deferred)
    elif low:
        decision = _adopted_in_low_load(stated, decisions, envelope, low=low, deferred=deferred)
    elif envelope is not None:
        decision = _adopted_within(stated, envelope, deferred=deferred)
    else:
        decision = _deferred(stated, decisions)
    decision = decision.model_copy(update={"looks": look})
    if previous is not None and previous.model_copy(update={"decided_at": now, "looks": look}) == decision:
        return previous
    return decision
