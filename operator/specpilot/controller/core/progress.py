"""Every scope's next step in one reconcile: which windows are due, what the judge says, where the
rollout state machine moves each scope. Pure: windows and quality checks come in as data.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from specpilot.analysis import rollout
from specpilot.analysis.checks import Check
from specpilot.analysis.evidence import WindowLoad, matched_load
from specpilot.analysis.judge import (
    WindowVerdict,
    attribute_kv_pressure,
    draining,
    heaviest_loader,
    judge_window,
    kv_fired,
    summarize,
)
from specpilot.analysis.limits import PressureFlip
from specpilot.analysis.window import ArmEngine, ArmRequests, ScopeWindow
from specpilot.api.pilot import (
    ABORT_ANNOTATION,
    ALL_SCOPES,
    PROMOTE_ANNOTATION,
    REHEARSE_ANNOTATION,
    RESUME_ANNOTATION,
)
from specpilot.api.reasons import FallbackReason
from specpilot.api.spec import Analysis, Probes, SpeculationPilotSpec
from specpilot.api.status import (
    ConditionStatus,
    ConditionType,
    FallbackRecord,
    ScopeState,
    ScopeStatus,
    SpeculationPilotStatus,
)
from specpilot.api.status.pilot_status import FALLBACK_LIMIT
from specpilot.controller.core.conditions import condition
from specpilot.controller.core.rehearsal.steps import rehearsing_rolled_back
from specpilot.wire.names import Arm

JUDGED = frozenset({ScopeState.PILOTING, ScopeState.SPECULATIVE, ScopeState.HELD})
MANUAL = {
    PROMOTE_ANNOTATION: rollout.Action.PROMOTE,
    ABORT_ANNOTATION: rollout.Action.ABORT,
    RESUME_ANNOTATION: rollout.Action.RESUME,
}
# Every annotation the operator acts on once and then removes: the scopes' manual actions, and the
# request for a rehearsal.
ACTED_ON = (*MANUAL, REHEARSE_ANNOTATION)


@dataclass(frozen=True)
class Measured:
    """A due scope's window, the speculative requests new since its last window, and quality checks."""

    window: ScopeWindow
    new_requests: int
    quality: tuple[Check, ...] = ()


@dataclass(frozen=True)
class Progress:
    scopes: list[ScopeStatus]
    fallbacks: list[FallbackRecord]
    events: list[rollout.Event]
    flipped: tuple[str, ...]  # scopes sent back to ordinary decoding in this step


def window_summary(pilot: str, namespace: str, window: ScopeWindow) -> dict[str, Any]:
    """What a webhook receives about a window: the scope, its span, and both compared arms' figures,
    each under its own name; `compared` names the arm the speculative arm is judged against."""

    def arm(requests: ArmRequests, engine: ArmEngine) -> dict[str, Any]:
        return {
            "requests": requests.routed,
            "outcomes": {outcome.value: count for outcome, count in requests.outcomes.items()},
            "late": requests.late,
            "timePerCommittedTokenSeconds": requests.time_per_committed_token,
            "engine": {
                "timePerCommittedTokenSeconds": engine.time_per_committed_token,
                "acceptanceLength": engine.acceptance_length,
                "kvCacheUsageMax": max((value for _, value in engine.kv_usage), default=None),
            },
        }

    return {
        "pilot": pilot,
        "namespace": namespace,
        "scope": window.scope,
        "window": {"start": window.start.isoformat(), "end": window.end.isoformat()},
        "compared": window.compared_arm.value,
        "arms": {
            window.compared_arm.value: arm(window.compared, window.compared_engine),
            Arm.SPECULATIVE.value: arm(window.speculative, window.speculative_engine),
        },
    }


def warm(previous: SpeculationPilotStatus | None, analysis: Analysis, now: datetime) -> bool:
    """Both arms have been ready for analysis.warmup (ArmsReady True since long enough)."""
    ready = condition(previous, ConditionType.ARMS_READY)
    return (
        ready is not None
        and ready.status is ConditionStatus.TRUE
        and now - ready.last_transition_time >= analysis.warmup
    )


def due(scope: ScopeStatus, analysis: Analysis, end: datetime, *, rehearsed: Collection[str] = ()) -> bool:
    """A window ending at `end` should be judged: the scope is piloting, or a rolled-back scope the
    rehearsal runs (`rehearsed`: its windows are evidence), and an interval has passed since its last
    window (less a little, as reconciles land just after the interval)."""
    if scope.state not in JUDGED and scope.name not in rehearsed:
        return False
    interval = analysis.interval
    return scope.last_window is None or end - scope.last_window.end >= interval - timedelta(seconds=1)


def window_due(
    status: SpeculationPilotStatus | None, spec: SpeculationPilotSpec, end: datetime | None, now: datetime
) -> bool:
    """A reconcile now would judge some scope's window ending at `end` (the last collection)."""
    if status is None or end is None or spec.suspend or not warm(status, spec.analysis, now):
        return False
    rehearsed = rehearsing_rolled_back(status.rehearsal, window=spec.analysis.window, now=now)
    return any(due(scope, spec.analysis, end, rehearsed=rehearsed) for scope in status.scopes)


def probe_due(
    probes: Probes, arms: Mapping[Arm, Sequence[object]], probed_at: datetime | None, now: datetime, *, compared: Arm
) -> bool:
    """A probe round should start: the speculative arm and the arm it is compared with have a ready pod,
    and a probe interval passed."""
    ready = all(arms.get(arm) for arm in (compared, Arm.SPECULATIVE))
    return ready and (probed_at is None or now - probed_at >= probes.interval)


def probe_wait(probes: Probes, probed_at: datetime | None, now: datetime, *, poll: float) -> float:
    """Seconds until the probe schedule looks again: when the next round is due, or after `poll` where
    that is sooner (the arms may not be ready yet, the spec may change)."""
    if probed_at is None:
        return poll
    return max(0.0, min(poll, (probed_at + probes.interval - now).total_seconds()))


def manual_actions(annotations: Mapping[str, str], scopes: Sequence[str]) -> dict[str, rollout.Action]:
    """The manual action asked for each scope, from the pilot's annotations (abort wins)."""
    asked: dict[str, rollout.Action] = {}
    for key in (PROMOTE_ANNOTATION, RESUME_ANNOTATION, ABORT_ANNOTATION):
        value = annotations.get(key)
        if value is None:
            continue
        for name in scopes if value.strip() == ALL_SCOPES else [v.strip() for v in value.split(",")]:
            if name in scopes:
                asked[name] = MANUAL[key]
    return asked


def production_saturation(engine: ArmEngine, *, replicas: int, analysis: Analysis) -> str | None:
    """Why production's baseline is saturated over a window, or None: one request or more waiting per
    replica on average, or KV-cache usage above thresholds.kvCacheUsage.max at every scrape."""
    waiting = (engine.waiting or 0.0) / max(1, replicas)
    if waiting >= 1.0:
        return f"production's baseline had {waiting:.1f} requests waiting per replica over the last window"
    lowest = min((value for _, value in engine.kv_usage), default=None)
    limit = analysis.thresholds.kv_cache_usage.max
    if lowest is not None and lowest > limit:
        return f"production's baseline KV-cache usage stayed above {limit:g} over the last window (lowest {lowest:.2f})"
    return None


def advance_scopes(
    scopes: Sequence[ScopeStatus],
    spec: SpeculationPilotSpec,
    *,
    measured: Mapping[str, Measured],
    manual: Mapping[str, rollout.Action],
    fallbacks: Sequence[FallbackRecord],
    warm: bool,
    now: datetime,
    kv_loads: Mapping[str, float] | None = None,
    loads: Mapping[str, WindowLoad] | None = None,
    paused: bool = False,
    rehearsing: Collection[str] = (),
) -> Progress:
    """Each scope moved by its manual action, else its judged window, else time passing.

    `kv_loads` is the KV cache each scope's requests held on the speculative arm over the last
    windows (token-seconds), flipped scopes included while their requests drain: sustained KV
    pressure is put on the heaviest. `loads`: what loaded the arms over each judged window (a flip
    records the compared arms' load). `paused`: production is saturated, so no scope is promoted.
    `rehearsing`: scopes whose windows hold the peak rehearsal's traffic (evidence; only a hard limit
    moves them, and nothing a rolled-back one)."""
    by_name = {scope.name: scope for scope in spec.scopes}
    verdicts = _judge(scopes, spec, measured=measured, manual=manual, fallbacks=fallbacks)
    kv = kv_loads or {}
    on_ordinary = {status.name for status in scopes if status.weight == 0}
    held = _confounded_by_kv(
        measured, verdicts, fallbacks, heaviest=heaviest_loader(kv), flipped=on_ordinary, analysis=spec.analysis
    )
    verdicts = attribute_kv_pressure(verdicts, kv, overlapping=held, flipped=on_ordinary)
    out: list[ScopeStatus] = []
    records = list(fallbacks)
    events: list[rollout.Event] = []
    flipped: list[str] = []
    for status in scopes:
        policy = rollout.Policy(
            scope=by_name[status.name],
            analysis=spec.analysis,
            rollback=spec.rollback,
            suspend=spec.suspend,
            paused=paused,
            rehearsing=status.name in rehearsing,
        )
        event = _input(status.name, manual=manual, verdicts=verdicts, measured=measured, loads=loads or {})
        step = rollout.advance(status, event, policy=policy, warm=warm, now=now)
        out.append(step.status)
        events.extend(step.events)
        if step.record is not None:
            records.append(step.record)
        if status.weight > 0 and step.status.weight == 0:
            flipped.append(status.name)
    return Progress(out, records[-FALLBACK_LIMIT:], events, tuple(flipped))


def _input(
    name: str,
    *,
    manual: Mapping[str, rollout.Action],
    verdicts: Mapping[str, WindowVerdict],
    measured: Mapping[str, Measured],
    loads: Mapping[str, WindowLoad],
) -> rollout.Input:
    """What moves a scope this tick: its manual action, else its judged window, else time passing."""
    if name in manual:
        return rollout.Manual(manual[name])
    if name not in verdicts:
        return rollout.Tick()
    item, verdict, load = measured[name], verdicts[name], loads.get(name)
    return rollout.Judged(
        verdict=verdict,
        summary=summarize(item.window, verdict, offered_load=_filed_at(item.window, load)),
        start=item.window.start,
        requests=item.new_requests,
        loads=_compared(item.window, load.offered if load is not None else {}),
        in_flight=_compared(item.window, load.in_flight if load is not None else {}),
    )


def _filed_at(window: ScopeWindow, load: WindowLoad | None) -> float | None:
    """The load the window's evidence is filed at (the speculative arm's, matched with its compared arm's)."""
    return None if load is None else matched_load(load.recent, window.compared_arm).get(Arm.SPECULATIVE)


def _compared(window: ScopeWindow, per_arm: Mapping[Arm, float | None]) -> dict[Arm, float]:
    """The speculative and compared arms' figures over the window, where measured."""
    arms = (Arm.SPECULATIVE, window.compared_arm)
    return {arm: value for arm in arms if (value := per_arm.get(arm)) is not None}


def _judge(
    scopes: Sequence[ScopeStatus],
    spec: SpeculationPilotSpec,
    *,
    measured: Mapping[str, Measured],
    manual: Mapping[str, rollout.Action],
    fallbacks: Sequence[FallbackRecord],
) -> dict[str, WindowVerdict]:
    """The verdict of each measured scope without a manual action."""
    return {
        status.name: judge_window(
            measured[status.name].window,
            analysis=spec.analysis,
            quality=spec.quality,
            draft_tokens=spec.speculative.draft.num_speculative_tokens,
            state=status.judge,
            extra=measured[status.name].quality,
            pressure_flip=_last_kv_flip(fallbacks, other_than=status.name),
        )
        for status in scopes
        if status.name in measured and status.name not in manual
    }


def _last_kv_flip(fallbacks: Sequence[FallbackRecord], *, other_than: str) -> PressureFlip | None:
    """Another scope's latest flip for KV-cache pressure."""
    record = next(_kv_flips(fallbacks, other_than=other_than), None)
    return PressureFlip(record.scope, record.at) if record is not None else None


def _kv_flips(fallbacks: Sequence[FallbackRecord], *, other_than: str) -> Iterator[FallbackRecord]:
    """Other scopes' flips for KV-cache pressure, newest first."""
    return (
        record
        for record in reversed(fallbacks)
        if record.reason is FallbackReason.KV_CACHE_PRESSURE and record.scope != other_than
    )


def _confounded_by_kv(
    measured: Mapping[str, Measured],
    verdicts: Mapping[str, WindowVerdict],
    fallbacks: Sequence[FallbackRecord],
    *,
    heaviest: str | None,
    flipped: Collection[str],
    analysis: Analysis,
) -> dict[str, str]:
    """Why each judged scope's window is confounded by KV pressure another scope causes.

    Either the arm's usage went above the limit in the window (pressure building, or coming and going
    with preemptions; sustained pressure is `attribute_kv_pressure`'s) and another scope loads it
    most; or
    the window overlaps another scope's KV flip, or follows it by less than a window while the
    speculative arm still drains the queue the pressure built (requests waiting)."""
    limit = analysis.thresholds.kv_cache_usage.max
    out = {}
    for name in verdicts:
        window = measured[name].window
        peak = max((usage for _, usage in window.speculative_engine.kv_usage), default=0.0)
        if heaviest not in (None, name) and peak > limit and not kv_fired(verdicts[name]):
            out[name] = (
                f"KV-cache usage on the speculative arm reached {peak:.2f} in the window, above {limit:g}; "
                f"the pressure is put on scope {heaviest!r}{draining(heaviest, flipped)}"
            )
            continue
        queued = (window.speculative_engine.waiting or 0.0) >= 1.0
        since = window.start - (window.end - window.start) if queued else window.start
        flip = next((record for record in _kv_flips(fallbacks, other_than=name) if record.at >= since), None)
        if flip is not None:
            still = ", and its queue is still draining" if flip.at < window.start else ""
            out[name] = (
                f"the window overlaps KV-cache pressure put on scope {flip.scope!r}, "
                f"flipped back at {flip.at:%H:%M:%S}{still}"
            )
    return out
