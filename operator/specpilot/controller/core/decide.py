"""One reconcile's evidence and decision: judged windows into the evidence store, and, when the
decision is due, every scope's and the pilot's decision into status. Pure: the shell loads and
writes the store and lands the status.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache

from specpilot.analysis.decision import (
    ScopeFindings,
    decide_pilot,
    decide_scope,
    decision_due,
    envelope_peak,
    revisions,
)
from specpilot.analysis.evidence import (
    Evidence,
    ScopeEvidence,
    WindowLoad,
    dump,
    fit,
    load,
    mix_changed,
    record_probes,
    record_window,
    watch_production,
    with_arms,
)
from specpilot.analysis.quality import ProbeResult, kind_counts, scope_cases
from specpilot.analysis.rollout import Event, EventType
from specpilot.analysis.scheduled import ScheduledArm, scheduled_arm
from specpilot.api.pilot import DECIDE_ANNOTATION
from specpilot.api.reasons import Reason
from specpilot.api.spec import QuantileRatio, SpeculationPilotSpec
from specpilot.api.status import Decision, FallbackRecord, RehearsalStatus, ScopeState, ScopeStatus, Verdict
from specpilot.controller.core.progress import Measured
from specpilot.wire.names import Arm


@dataclass(frozen=True)
class Decided:
    evidence: Evidence
    scopes: list[ScopeStatus]
    decision: Decision | None
    events: list[Event]


def fresh_for(evidence: Evidence | None, config_hashes: Mapping[Arm, str], compared: Arm) -> Evidence:
    """The store to keep adding to: a new one when the engine or the draft changed since it began, or
    the arm speculation is compared with, since its windows no longer compare like with like."""
    fresh = Evidence(config_hashes=dict(config_hashes), compared=compared)
    if evidence is None or evidence.compared is not compared:
        return fresh
    if any(evidence.config_hashes.get(arm) not in (None, digest) for arm, digest in config_hashes.items()):
        return fresh
    return evidence.model_copy(update={"config_hashes": dict(config_hashes)})


def record(
    evidence: Evidence,
    *,
    spec: SpeculationPilotSpec,
    measured: Mapping[str, Measured],
    loads: Mapping[str, WindowLoad],
    scopes: Sequence[ScopeStatus],
    kv_blocks: Mapping[Arm, int],
    gpus: Mapping[Arm, int],
    replicas: Mapping[Arm, int],
    flipped: Sequence[str] = (),
    draining: Collection[str] = (),
    load_changed_at: datetime | None = None,
    rehearsing: Collection[str] = (),
    block_size: int | None = None,
    probe: ProbeResult | None = None,
) -> Evidence:
    """The store with this reconcile's judged windows (their verdicts from the scopes' last windows);
    after `flipped` left the speculative arm, the other scopes still on it start again (`mix_changed`):
    what they measured beside it (its cache, its slower requests) does not describe the arm without it.
    While the requests of scopes already off the arm still finish on it (`draining`: a flipped scope's
    long or preempted requests), the arm's mix is still changing: the others start again from the end
    of each such window, so their bins hold only windows that began after the last of them finished.
    A window within which `load_changed_at` falls (a rehearsal step began, the rehearsal ended, or its
    arms run unmatched: `rehearsal.tick.load_changed_at`) is kept out of the bins too; the windows of scopes
    `rehearsing` go to the bins alone, marked. The probe rounds so far (`probe`) give each scope's
    counts by kind. The store comes back within its ConfigMap's budget (`fit`)."""
    overlap = spec.analysis.window / spec.analysis.interval
    out = with_arms(evidence, overlap=overlap, kv_blocks=kv_blocks, gpus=gpus, replicas=replicas, block_size=block_size)
    for status in scopes:
        item = measured.get(status.name)
        if item is None or status.last_window is None or status.last_window.end != item.window.end:
            continue  # not judged this time (a manual action took the scope instead)
        quality_failed = any(check.verdict is Verdict.FAIL for check in item.quality)
        changes = load_changes(status, out.scopes.get(status.name, ScopeEvidence()), load_changed_at)
        out = record_window(
            out,
            item.window,
            loads[status.name],
            verdict=status.last_window.verdict,
            quality_failed=quality_failed,
            settled=not draining and all(at is None or at <= item.window.start for at in changes),
            rehearsed=status.name in rehearsing,
            gap_quantile=spec.analysis.thresholds.itl_quantile,
            min_samples=spec.analysis.min_samples,
        )
    # Every scope's window of a tick ends at the same collection, and production's load (every scope's
    # requests) is the same in each: watched once per tick.
    if loads:
        out = watch_production(out, next(iter(loads.values())))
    if (flipped or draining) and measured:
        out = _mix_changed(out, scopes, measured, flipped=flipped, draining=draining)
    if probe is not None and probe.since is not None:
        counts = {name: kind_counts(probe, cases) for name, cases in scope_cases(spec).items()}
        out = record_probes(out, counts, since=probe.since)
    return fit(out)


def _mix_changed(
    evidence: Evidence,
    scopes: Sequence[ScopeStatus],
    measured: Mapping[str, Measured],
    *,
    flipped: Sequence[str],
    draining: Collection[str],
) -> Evidence:
    """The store once the speculative arm's mix changed: the scopes still on it start again from the end
    of the last window it changed within. One already off it keeps what it measured there, which is what
    backs its own flip."""
    at = max(item.window.end for item in measured.values())
    others = [
        status.name
        for status in scopes
        if status.weight > 0 and status.name not in flipped and status.name not in draining
    ]
    return mix_changed(evidence, others, at=at)


def load_changes(
    status: ScopeStatus, scope: ScopeEvidence, load_changed_at: datetime | None
) -> tuple[datetime | None, ...]:
    """When the load the scope's window measured may have changed: its stage began, the speculative
    arm's mix changed, the rehearsal moved, or (rolled back, and rehearsed since) it left the arms."""
    flipped = status.last_transition_time if status.state is ScopeState.ROLLED_BACK else None
    return status.stage_started_at, flipped, scope.mix_changed_at, load_changed_at


def load_since(
    status: ScopeStatus, scope: ScopeEvidence, load_changed_at: datetime | None, *, end: datetime
) -> datetime | None:
    """When the load of the scope's window ending at `end` last changed (`load_changes`); None where it
    never did."""
    changes = load_changes(status, scope, load_changed_at)
    return max((at for at in changes if at is not None and at <= end), default=None)


# Evidence stores whose findings are kept: one a pilot, for this many pilots deciding at once. Only a
# pilot's newest store is decided again, and each kept one holds its text (up to STORE_BUDGET) and bands.
DECIDED_KEPT = 16


def findings(
    evidence: Evidence,
    spec: SpeculationPilotSpec,
    fallbacks: Sequence[FallbackRecord],
    states: Mapping[str, ScopeState] | None = None,
    rehearsal: RehearsalStatus | None = None,
    *,
    look: int = 1,
) -> list[ScopeFindings]:
    """Every scope's findings at the decision's `look`-th statement; the same evidence is decided once (a
    crossover's bootstrap costs tens of milliseconds, and reconciles outnumber the windows that change the
    evidence), and the findings of the newest `DECIDED_KEPT` stores are kept."""
    records = tuple(record.model_dump_json() for record in fallbacks)
    scopes = tuple((scope.name, (states or {}).get(scope.name)) for scope in spec.scopes)
    ttft = spec.analysis.thresholds.ttft
    peak = envelope_peak(spec, evidence, rehearsal)
    ungated = tuple(spec.speed_only)
    rehearsed = spec.rehearsal is not None
    return list(
        _findings(
            dump(evidence),
            records,
            spec.analysis.confidence,
            ttft,
            scopes,
            peak=peak,
            ungated=ungated,
            rehearsal=rehearsed,
            scheduled=scheduled_arm(spec),
            look=look,
        )
    )


@lru_cache(maxsize=DECIDED_KEPT)
def _findings(
    evidence: str,
    fallbacks: tuple[str, ...],
    confidence: float,
    ttft: QuantileRatio,
    scopes: tuple[tuple[str, ScopeState | None], ...],
    *,
    peak: float | None,
    ungated: tuple[str, ...] = (),
    rehearsal: bool = False,
    scheduled: ScheduledArm | None = None,
    look: int = 1,
) -> tuple[ScopeFindings, ...]:
    store = load(evidence)
    records = [FallbackRecord.model_validate_json(record) for record in fallbacks]
    return tuple(
        decide_scope(
            name,
            store,
            fallbacks=records,
            confidence=confidence,
            state=state,
            ttft=ttft,
            peak=peak,
            gated=name not in ungated,
            rehearsal=rehearsal,
            scheduled=scheduled,
            look=look,
        )
        for name, state in scopes
    )


def decide(
    evidence: Evidence,
    *,
    spec: SpeculationPilotSpec,
    scopes: list[ScopeStatus],
    fallbacks: Sequence[FallbackRecord],
    annotations: Mapping[str, str],
    previous: Decision | None,
    rehearsal: RehearsalStatus | None = None,
    now: datetime,
) -> Decided:
    """The decisions, when due (every scope settled, or asked for), stated once and again only when
    the evidence moves them (`revisions`), or with whatever changed once a peak rehearsal's windows
    are all in; else status keeps what it had."""
    trigger = decision_due(scopes, annotations, annotation=DECIDE_ANNOTATION)
    if trigger is None:
        return Decided(evidence, scopes, previous, [])
    states = {scope.name: scope.state for scope in scopes}
    look = previous.looks + 1 if previous is not None else 1
    found = {f.scope: f for f in findings(evidence, spec, fallbacks, states, rehearsal, look=look)}
    decided = [scope.model_copy(update={"decision": found[scope.name].decision}) for scope in scopes]
    decision = decide_pilot(list(found.values()), trigger=trigger, now=now, previous=previous, look=look)
    if previous is None:
        return Decided(
            evidence, decided, decision, [Event(EventType.NORMAL, Reason.DECISION_STATED, decision.reasons[0])]
        )
    before = {scope.name: scope.decision for scope in scopes}
    after = {name: f.decision for name, f in found.items()}
    moved = revisions(previous, decision, before=before, after=after)
    if not moved and _rehearsed_since(rehearsal, previous, spec, now) and before != after:
        moved = ["the peak rehearsal measured loads the live stages had not reached"]
    if not moved:
        kept = [scope if scope.decision is not None else new for scope, new in zip(scopes, decided, strict=True)]
        return Decided(evidence, kept, previous, [])
    message = f"{'; '.join(moved)}. {decision.reasons[0]}"
    return Decided(evidence, decided, decision, [Event(EventType.NORMAL, Reason.DECISION_REVISED, message)])


def _rehearsed_since(
    rehearsal: RehearsalStatus | None, previous: Decision, spec: SpeculationPilotSpec, now: datetime
) -> bool:
    """A rehearsal ended after the decision was stated, and its last windows are recorded."""
    end = rehearsal.finished_at if rehearsal is not None else None
    return end is not None and end > previous.decided_at and now - end >= spec.analysis.window
