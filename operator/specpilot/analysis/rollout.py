"""The rollout state machine of one scope: a transition table and the actions it names, no I/O.

`advance(status, event, ...)` takes the scope's status, one input (a judged window, a manual action,
or time passing) and `now`, and returns the next status with its effects: the weight to route, a
fallback record to append and the Events to emit. The caller applies them in one status write.

How to read it: `_cause` reduces the input to one letter of a small alphabet (`Cause`), looking at
the status only where the letter depends on it (the stage gate, the failure count, the cooldown);
`TABLE[state, cause]` names the next state and the action; a pair the table does not list changes
nothing. The table is the whole policy; the actions only do the bookkeeping.

Idempotent on its window: a window that does not end after the last one recorded (nor after the
stage began) changes nothing, so a restarted operator that replays a window emits no second flip,
record or Event. Manual actions are idempotent by state (aborting a rolled-back scope does nothing);
the caller removes the annotation once the status that acted on it has landed.

The judge state (`ScopeStatus.judge`) holds the looks the sequential tests have spent. It survives
promotions, since the spending covers the scope's whole pilot (resetting it at each stage would spend
1 - confidence again per stage); it starts afresh when the scope starts or re-enters piloting.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from specpilot.analysis.judge import WindowVerdict
from specpilot.api.reasons import FallbackReason, MetricName, Reason
from specpilot.api.spec import Analysis, Reentry, Rollback, Scope, Stage
from specpilot.api.status import FallbackRecord, ScopeState, ScopeStatus, Verdict, Window, WindowSummary
from specpilot.wire.names import Arm


class EventType(StrEnum):
    """A Kubernetes Event's type."""

    NORMAL = "Normal"
    WARNING = "Warning"


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event to emit once the status it belongs to has landed."""

    type: EventType
    reason: Reason
    message: str


class Action(StrEnum):
    """A manual action on a scope, from the pilot's annotations."""

    PROMOTE = "promote"
    ABORT = "abort"
    RESUME = "resume"


@dataclass(frozen=True, kw_only=True)
class Judged:
    """A closed window of the scope and its verdict.

    `requests` counts the speculative-arm requests that this window is the first to include (those
    that finished after the previous window's end): windows overlap, and a request must count once
    towards the stage's minRequests. A flip records `loads` and `in_flight`: where speculation lost, and
    the batch it ran at there."""

    verdict: WindowVerdict
    summary: WindowSummary
    start: datetime
    requests: int
    loads: Mapping[Arm, float] = field(default_factory=dict)  # the compared arms' offered load per replica
    in_flight: Mapping[Arm, float] = field(default_factory=dict)  # their requests in flight per replica


@dataclass(frozen=True)
class Manual:
    """An SRE's promote, abort or resume."""

    action: Action


@dataclass(frozen=True)
class Tick:
    """Time passing, with no window and no action: it starts, and re-enters, scopes."""


Input = Judged | Manual | Tick


@dataclass(frozen=True, kw_only=True)
class Policy:
    """What the pilot's spec says about one scope's rollout."""

    scope: Scope
    analysis: Analysis
    rollback: Rollback
    suspend: bool = False
    paused: bool = False  # production's baseline is saturated: no promotion until it recovers
    # The peak rehearsal runs the scope's traffic on the compared arms while its live share is on
    # production: its windows are recorded as evidence, and only a hard limit moves it (a rolled-back
    # scope, rehearsed to narrow its crossover, not even that).
    rehearsing: bool = False


@dataclass(frozen=True, kw_only=True)
class Step:
    """The scope's next status and what to do about it."""

    status: ScopeStatus
    record: FallbackRecord | None = None
    events: tuple[Event, ...] = ()

    @property
    def weight(self) -> int:
        """Percent of the scope's requests the router should send to the speculative arm."""
        return self.status.weight


class Cause(StrEnum):
    """The alphabet of the table: what an input means for a scope in its state."""

    IDLE = "idle"  # time passing and nothing due, or a replayed window
    WARM = "warm"  # both arms ready for analysis.warmup, pilot not suspended
    COOLED = "cooled"  # rollback.cooldown over, reentry Automatic, arms warm, pilot not suspended
    SUSPENDED = "suspended"  # a window or time passing while spec.suspend is set
    COLD = "cold"  # a window while an arm has not been ready for analysis.warmup: not judged
    PASS = "pass"  # a passing window
    PASS_GATE = "pass_gate"  # a passing window that meets the stage's minRequests and minDuration
    FAIL = "fail"  # a failing window, short of failureLimit in a row
    FAIL_LIMIT = "fail_limit"  # the failureLimit-th failing window in a row
    HARD = "hard"  # a window in which a hard limit fired (or a critical webhook failed)
    INCONCLUSIVE = "inconclusive"  # a window that could not be judged
    REHEARSED = "rehearsed"  # a rehearsal window without a hard limit, or of a rolled-back scope: evidence, no move
    PROMOTE = "promote"
    ABORT = "abort"
    RESUME = "resume"
    FROZEN = "frozen"  # a promote or resume while the pilot is suspended


class Do(StrEnum):
    """The actions the table names."""

    START = "start"  # stage 0 at its weight; counters and judge state afresh
    COUNT_PASS = "count_pass"  # record the window; failed checks back to 0
    PROMOTE = "promote"  # the next stage's weight (or speculative, from the last stage)
    COUNT_FAIL = "count_fail"  # record the window; one more failed check
    ROLL_BACK = "roll_back"  # weight 0 at once, with a fallback record
    ABORT = "abort"  # weight 0 at once, with a ManualAbort record
    HOLD = "hold"  # keep the weight, record why
    OBSERVE = "observe"  # record the window only: state, stage, counters and judge state unchanged
    REFUSE = "refuse"  # change nothing, say why in a Warning


S = ScopeState
C = Cause
NEXT = None  # the next stage: Piloting at stage + 1, or Speculative from the last stage

#: (state, cause) -> (next state, action). Unlisted pairs change nothing.
TABLE: Mapping[tuple[ScopeState, Cause], tuple[ScopeState | None, Do]] = {
    (S.ORDINARY, C.WARM): (S.PILOTING, Do.START),
    (S.ORDINARY, C.PROMOTE): (S.PILOTING, Do.START),
    (S.ORDINARY, C.ABORT): (S.ROLLED_BACK, Do.ABORT),
    (S.ORDINARY, C.RESUME): (S.ORDINARY, Do.REFUSE),
    (S.ORDINARY, C.FROZEN): (S.ORDINARY, Do.REFUSE),
    (S.PILOTING, C.PASS): (S.PILOTING, Do.COUNT_PASS),
    (S.PILOTING, C.PASS_GATE): (NEXT, Do.PROMOTE),
    (S.PILOTING, C.FAIL): (S.PILOTING, Do.COUNT_FAIL),
    (S.PILOTING, C.FAIL_LIMIT): (S.ROLLED_BACK, Do.ROLL_BACK),
    (S.PILOTING, C.HARD): (S.ROLLED_BACK, Do.ROLL_BACK),
    (S.PILOTING, C.INCONCLUSIVE): (S.HELD, Do.HOLD),
    (S.PILOTING, C.COLD): (S.HELD, Do.HOLD),
    (S.PILOTING, C.SUSPENDED): (S.HELD, Do.HOLD),
    (S.PILOTING, C.PROMOTE): (NEXT, Do.PROMOTE),
    (S.PILOTING, C.ABORT): (S.ROLLED_BACK, Do.ABORT),
    (S.PILOTING, C.RESUME): (S.PILOTING, Do.REFUSE),
    (S.PILOTING, C.FROZEN): (S.PILOTING, Do.REFUSE),
    (S.SPECULATIVE, C.PASS): (S.SPECULATIVE, Do.COUNT_PASS),
    (S.SPECULATIVE, C.FAIL): (S.SPECULATIVE, Do.COUNT_FAIL),
    (S.SPECULATIVE, C.FAIL_LIMIT): (S.ROLLED_BACK, Do.ROLL_BACK),
    (S.SPECULATIVE, C.HARD): (S.ROLLED_BACK, Do.ROLL_BACK),
    (S.SPECULATIVE, C.INCONCLUSIVE): (S.HELD, Do.HOLD),
    (S.SPECULATIVE, C.COLD): (S.HELD, Do.HOLD),
    (S.SPECULATIVE, C.SUSPENDED): (S.HELD, Do.HOLD),
    (S.SPECULATIVE, C.PROMOTE): (S.SPECULATIVE, Do.REFUSE),
    (S.SPECULATIVE, C.ABORT): (S.ROLLED_BACK, Do.ABORT),
    (S.SPECULATIVE, C.RESUME): (S.SPECULATIVE, Do.REFUSE),
    (S.SPECULATIVE, C.FROZEN): (S.SPECULATIVE, Do.REFUSE),
    (S.HELD, C.PASS): (S.PILOTING, Do.COUNT_PASS),
    (S.HELD, C.PASS_GATE): (NEXT, Do.PROMOTE),
    (S.HELD, C.FAIL): (S.PILOTING, Do.COUNT_FAIL),
    (S.HELD, C.FAIL_LIMIT): (S.ROLLED_BACK, Do.ROLL_BACK),
    (S.HELD, C.HARD): (S.ROLLED_BACK, Do.ROLL_BACK),
    (S.HELD, C.INCONCLUSIVE): (S.HELD, Do.HOLD),
    (S.HELD, C.COLD): (S.HELD, Do.HOLD),
    (S.HELD, C.PROMOTE): (NEXT, Do.PROMOTE),
    (S.HELD, C.ABORT): (S.ROLLED_BACK, Do.ABORT),
    (S.HELD, C.RESUME): (S.HELD, Do.REFUSE),
    (S.HELD, C.FROZEN): (S.HELD, Do.REFUSE),
    (S.ROLLED_BACK, C.COOLED): (S.PILOTING, Do.START),
    (S.ROLLED_BACK, C.RESUME): (S.PILOTING, Do.START),
    (S.ROLLED_BACK, C.PROMOTE): (S.ROLLED_BACK, Do.REFUSE),
    (S.ROLLED_BACK, C.FROZEN): (S.ROLLED_BACK, Do.REFUSE),
    (S.PILOTING, C.REHEARSED): (S.PILOTING, Do.OBSERVE),
    (S.SPECULATIVE, C.REHEARSED): (S.SPECULATIVE, Do.OBSERVE),
    (S.HELD, C.REHEARSED): (S.HELD, Do.OBSERVE),
    (S.ROLLED_BACK, C.REHEARSED): (S.ROLLED_BACK, Do.OBSERVE),
}


def advance(status: ScopeStatus, event: Input, *, policy: Policy, warm: bool, now: datetime) -> Step:
    """The scope's next status and effects after `event`.

    `warm`: both arms have been ready for at least analysis.warmup."""
    cause = _cause(status, event, policy=policy, warm=warm, now=now)
    row = TABLE.get((status.state, cause))
    if row is None:
        return Step(status=status)
    target, do = row
    return _ACTIONS[do](_Move(status, event, cause, target, policy, now))


def _cause(status: ScopeStatus, event: Input, *, policy: Policy, warm: bool, now: datetime) -> Cause:
    # Order matters. Manual actions first: an SRE's abort acts even on a suspended pilot (suspend
    # freezes the automatic decisions, not the person who can always flip a scope back); promote
    # and resume would start or advance piloting, which suspend forbids.
    if isinstance(event, Manual):
        if event.action is Action.ABORT:
            return C.ABORT
        return C.FROZEN if policy.suspend else C(event.action.value)
    # A replayed window before anything else, so that replaying changes nothing, suspended or not.
    if isinstance(event, Judged) and _stale(status, event):
        return C.IDLE
    if policy.suspend:
        return C.SUSPENDED
    if status.state is S.ORDINARY:
        return C.WARM if warm else C.IDLE
    if status.state is S.ROLLED_BACK:
        automatic = policy.rollback.reentry is Reentry.AUTOMATIC
        if automatic and warm and _cooled(status, policy, now):
            return C.COOLED
        # production keeps it on ordinary decoding: a window of its rehearsal is evidence alone
        return C.REHEARSED if policy.rehearsing and isinstance(event, Judged) else C.IDLE
    if isinstance(event, Tick):
        return C.IDLE
    if not warm:
        return C.COLD
    verdict = event.verdict
    if verdict.hard and not (policy.rehearsing and _overloaded(verdict)):
        return C.HARD
    if policy.rehearsing:
        return C.REHEARSED
    if verdict.verdict is Verdict.FAIL:
        return C.FAIL_LIMIT if status.failed_checks + 1 >= policy.analysis.failure_limit else C.FAIL
    if verdict.verdict is Verdict.INCONCLUSIVE:
        return C.INCONCLUSIVE
    if status.state is not S.SPECULATIVE and _gate_met(status, event, policy, now):
        return C.PASS_GATE
    return C.PASS


# Hard limits that an overloaded arm trips: at a rehearsed load they say where its capacity ends (the
# step's figures), not that the arm is broken. Errors, quality and acceptance still flip a scope.
CAPACITY_LIMITS = frozenset({MetricName.TIMEOUT_RATE, MetricName.REJECTION_RATE, MetricName.KV_CACHE_USAGE})


def _overloaded(verdict: WindowVerdict) -> bool:
    """Every hard limit the window tripped is one an overloaded arm trips."""
    tripped = [check for check in verdict.checks if check.hard and check.verdict is Verdict.FAIL]
    return bool(tripped) and all(check.metric in CAPACITY_LIMITS for check in tripped)


def _stale(status: ScopeStatus, event: Judged) -> bool:
    end = event.summary.end
    seen = status.last_window is not None and end <= status.last_window.end
    # A window that closed before the stage began says nothing about the stage.
    return seen or (status.stage_started_at is not None and end <= status.stage_started_at)


def _cooled(status: ScopeStatus, policy: Policy, now: datetime) -> bool:
    since = status.last_transition_time
    return since is None or now - since >= policy.rollback.cooldown


def _gate_met(status: ScopeStatus, event: Judged, policy: Policy, now: datetime) -> bool:
    """Enough requests at this stage, and its minDuration spent since its new load settled (a window
    after the weight changed, once no window still holds requests from before); never while promotion
    is paused."""
    if policy.paused:
        return False
    stage = _stage(policy.scope, status.stage)
    settled = (status.stage_started_at or now) + policy.analysis.window
    enough = status.stage_requests + event.requests >= stage.min_requests
    return enough and now - settled >= stage.min_duration


def _stage(scope: Scope, index: int | None) -> Stage:
    return scope.stages[min(index or 0, len(scope.stages) - 1)]


# --- actions --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Move:
    """One transition in progress: what the actions read."""

    status: ScopeStatus
    event: Input
    cause: Cause
    target: ScopeState | None
    policy: Policy
    now: datetime

    @property
    def window(self) -> Judged | None:
        return self.event if isinstance(self.event, Judged) else None

    def counted(self) -> dict[str, object]:
        """The status updates that record a judged window: its summary, the judge state, its requests."""
        judged = self.window
        if judged is None:
            return {}
        return {
            "last_window": judged.summary,
            "judge": judged.verdict.state,
            "stage_requests": self.status.stage_requests + judged.requests,
        }

    def moved(self, state: ScopeState, *updates: Mapping[str, object]) -> ScopeStatus:
        """The status in `state` with `updates` applied, later ones winning; lastTransitionTime moves
        only on a real change of state or stage."""
        changes: dict[str, object] = {"state": state}
        for update in updates:
            changes.update(update)
        if state is not self.status.state or changes.get("stage", self.status.stage) != self.status.stage:
            changes["last_transition_time"] = self.now
        return self.status.model_copy(update=changes)


def _start(move: _Move) -> Step:
    stage = move.policy.scope.stages[0]
    status = move.moved(S.PILOTING, _fresh_stage(0, stage, move.now), {"judge": {}})
    reason, how = {
        C.COOLED: (Reason.SCOPE_REENTERED, "cooldown over"),
        C.RESUME: (Reason.SCOPE_RESUMED, "resumed by hand"),
        C.PROMOTE: (Reason.SCOPE_PILOT_STARTED, "promoted by hand"),
    }.get(move.cause, (Reason.SCOPE_PILOT_STARTED, "both arms warm"))
    message = f"Scope {status.name}: {how}, piloting stage 1 of {len(move.policy.scope.stages)} at {stage.weight}%"
    return Step(status=status, events=(Event(EventType.NORMAL, reason, message),))


def _count_pass(move: _Move) -> Step:
    target = move.target or move.status.state
    status = move.moved(target, move.counted(), {"failed_checks": 0, "passed_windows": move.status.passed_windows + 1})
    if target is move.status.state:
        return Step(status=status)
    message = f"Scope {status.name}: a passing window returned it to stage {_human(status.stage)} at {status.weight}%"
    return Step(status=status, events=(Event(EventType.NORMAL, Reason.SCOPE_RELEASED, message),))


def _promote(move: _Move) -> Step:
    stages = move.policy.scope.stages
    index = min(move.status.stage or 0, len(stages) - 1)
    counted = move.counted()
    passed = move.status.passed_windows + (1 if move.window else 0)
    how = "by hand" if move.cause is C.PROMOTE else "after its stage's requests and duration with a passing window"
    if index + 1 < len(stages):
        stage = stages[index + 1]
        status = move.moved(S.PILOTING, counted, _fresh_stage(index + 1, stage, move.now))
        message = f"Scope {status.name}: promoted {how} to stage {index + 2} of {len(stages)} at {stage.weight}%"
        return Step(status=status, events=(Event(EventType.NORMAL, Reason.SCOPE_PROMOTED, message),))
    status = move.moved(S.SPECULATIVE, counted, {"failed_checks": 0, "passed_windows": passed})
    message = f"Scope {status.name}: passed its last stage {how}; speculative at {status.weight}%"
    return Step(status=status, events=(Event(EventType.NORMAL, Reason.SCOPE_SPECULATIVE, message),))


def _count_fail(move: _Move) -> Step:
    judged = move.window
    assert judged is not None and judged.verdict.failing is not None  # only failing windows count
    failed = move.status.failed_checks + 1
    status = move.moved(move.target or move.status.state, move.counted(), {"failed_checks": failed})
    limit = move.policy.analysis.failure_limit
    message = f"Scope {status.name}: window failed ({failed} of {limit} in a row): {judged.verdict.reason}"
    return Step(status=status, events=(Event(EventType.WARNING, Reason.WINDOW_FAILED, message),))


def _roll_back(move: _Move) -> Step:
    judged = move.window
    assert judged is not None and judged.verdict.failing is not None  # only failing windows roll back
    check = judged.verdict.failing
    reason = judged.verdict.fallback or FallbackReason.THRESHOLD_EXCEEDED
    status = move.moved(
        S.ROLLED_BACK, move.counted(), {"weight": 0, "failed_checks": move.status.failed_checks + 1, "judge": {}}
    )
    record = FallbackRecord(
        scope=status.name,
        at=move.now,
        reason=reason,
        metric=check.metric,
        observed=check.observed,
        threshold=check.threshold,
        window=Window(start=judged.start, end=judged.summary.end),
        loads=dict(judged.loads),
        in_flight=dict(judged.in_flight),
    )
    message = f"Scope {status.name}: flipped back to ordinary decoding ({reason.value}): {check.reason}"
    return Step(status=status, record=record, events=(Event(EventType.WARNING, Reason.SCOPE_ROLLED_BACK, message),))


def _abort(move: _Move) -> Step:
    status = move.moved(S.ROLLED_BACK, {"weight": 0, "judge": {}})
    message = f"Scope {status.name}: aborted by hand, back to ordinary decoding"
    event = Event(EventType.WARNING, Reason.SCOPE_ABORTED, message)
    if move.status.weight == 0:  # nothing was flipped, so nothing to record
        return Step(status=status, events=(event,))
    record = FallbackRecord(
        scope=status.name,
        at=move.now,
        reason=FallbackReason.MANUAL_ABORT,
        metric=MetricName.MANUAL,
        window=Window(start=move.status.stage_started_at or move.now, end=move.now),
    )
    return Step(status=status, record=record, events=(event,))


def _hold(move: _Move) -> Step:
    judged = move.window
    if judged is None or move.cause is C.SUSPENDED:
        # Suspended: no new windows are judged, so a window is not recorded either.
        status, reason, why = move.moved(S.HELD), Reason.SCOPE_SUSPENDED, "pilot suspended"
    elif move.cause is C.COLD:
        # Not judged: the window is shown with why, and spends nothing of the sequential tests.
        why = f"not judged: an arm has not been ready for warmup {move.policy.analysis.warmup}"
        shown = judged.summary.model_copy(update={"verdict": Verdict.INCONCLUSIVE, "reason": why})
        status, reason = move.moved(S.HELD, {"last_window": shown}), Reason.SCOPE_HELD
    else:
        status = move.moved(S.HELD, {"last_window": judged.summary, "judge": judged.verdict.state})
        reason, why = Reason.SCOPE_HELD, judged.verdict.reason
    if move.status.state is S.HELD:
        return Step(status=status)
    message = f"Scope {status.name}: held at {status.weight}%: {why}"
    return Step(status=status, events=(Event(EventType.NORMAL, reason, message),))


def _observe(move: _Move) -> Step:
    judged = move.window
    assert judged is not None
    return Step(status=move.moved(move.status.state, {"last_window": judged.summary}))


def _refuse(move: _Move) -> Step:
    assert isinstance(move.event, Manual)
    action = move.event.action.value
    why = {
        C.FROZEN: "the pilot is suspended",
        C.RESUME: "only a rolled-back scope can be resumed",
        C.PROMOTE: "it is at its last stage" if move.status.state is S.SPECULATIVE else "resume it first",
    }[move.cause]
    message = f"Scope {move.status.name}: {action} refused ({move.status.state.value}): {why}"
    return Step(status=move.status, events=(Event(EventType.WARNING, Reason.MANUAL_ACTION_REFUSED, message),))


def _fresh_stage(index: int, stage: Stage, now: datetime) -> dict[str, object]:
    return {
        "stage": index,
        "weight": stage.weight,
        "failed_checks": 0,
        "stage_started_at": now,
        "stage_requests": 0,
        "passed_windows": 0,
    }


def _human(stage: int | None) -> int:
    return (stage or 0) + 1


_ACTIONS = {
    Do.OBSERVE: _observe,
    Do.START: _start,
    Do.COUNT_PASS: _count_pass,
    Do.PROMOTE: _promote,
    Do.COUNT_FAIL: _count_fail,
    Do.ROLL_BACK: _roll_back,
    Do.ABORT: _abort,
    Do.HOLD: _hold,
    Do.REFUSE: _refuse,
}
