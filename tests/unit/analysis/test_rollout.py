"""The rollout state machine: state x input -> next state and effects, as a matrix, and its invariants."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import pytest

from specpilot.analysis import rollout
from specpilot.analysis.checks import Check
from specpilot.analysis.judge import WindowVerdict
from specpilot.analysis.rollout import TABLE, Action, Input, Judged, Manual, Policy, Step, Tick, advance
from specpilot.api.reasons import FallbackReason, MetricName, Reason
from specpilot.api.spec import Analysis, Reentry, Rollback, Scope, Stage
from specpilot.api.status import ScopeState, ScopeStatus, Verdict, WindowSummary

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)
S = ScopeState
R = Reason
F = FallbackReason

SCOPE = Scope(
    name="code",
    stages=[
        Stage(weight=10, min_requests=100, min_duration="4m"),
        Stage(weight=50, min_requests=100, min_duration="4m"),
    ],
)
# A stage's minDuration counts once its new load settled: a one-minute window after it began.
POLICY = Policy(scope=SCOPE, analysis=Analysis(window="1m"), rollback=Rollback(cooldown="10m"))
AUTOMATIC = replace(POLICY, rollback=Rollback(cooldown="10m", reentry=Reentry.AUTOMATIC))
SUSPENDED = replace(POLICY, suspend=True)
SUSPENDED_AUTOMATIC = replace(AUTOMATIC, suspend=True)
REHEARSING = replace(POLICY, rehearsing=True)

ORDINARY = ScopeStatus(name="code")
PILOTING = ScopeStatus(
    name="code", state=S.PILOTING, stage=0, weight=10, stage_started_at=T0, last_transition_time=T0, judge={"a": 1.0}
)
READY = PILOTING.model_copy(update={"stage_requests": 90})  # one more window of 40 meets minRequests
FAILING = PILOTING.model_copy(update={"failed_checks": 2})
LAST = PILOTING.model_copy(update={"stage": 1, "weight": 50, "stage_requests": 90})
SPECULATIVE = LAST.model_copy(update={"state": S.SPECULATIVE, "stage_requests": 400})
SPECULATIVE_FAILING = SPECULATIVE.model_copy(update={"failed_checks": 2})
HELD = PILOTING.model_copy(update={"state": S.HELD})
HELD_READY = READY.model_copy(update={"state": S.HELD})
HELD_SPECULATIVE = SPECULATIVE.model_copy(update={"state": S.HELD})
ROLLED_BACK = ScopeStatus(name="code", state=S.ROLLED_BACK, stage=0, weight=0, last_transition_time=T0)

TPCT = Check(
    metric=MetricName.TIME_PER_COMMITTED_TOKEN_RATIO, verdict=Verdict.FAIL, observed=1.3, threshold=1.0, reason="slow"
)
KV = Check(
    metric=MetricName.KV_CACHE_USAGE, verdict=Verdict.FAIL, observed=0.97, threshold=0.95, reason="kv", hard=True
)

ERRORS = Check(
    metric=MetricName.ERROR_RATE, verdict=Verdict.FAIL, observed=0.2, threshold=0.01, reason="errors", hard=True
)


def judged(verdict: Verdict, *, at: datetime, failing: Check | None = None, requests: int = 40) -> Judged:
    fallback = failing.fallback if failing is not None and failing.hard else None
    checks = (failing,) if failing else ()
    v = WindowVerdict(
        verdict=verdict, checks=checks, state={"looks": 5.0}, reason=f"{verdict}.", fallback=fallback, failing=failing
    )
    return Judged(
        verdict=v,
        summary=WindowSummary(end=at, verdict=verdict, reason=v.reason),
        start=at - 5 * MIN,
        requests=requests,
    )


def passed(minutes: int) -> Judged:
    return judged(Verdict.PASS, at=T0 + minutes * MIN)


def failed(minutes: int) -> Judged:
    return judged(Verdict.FAIL, at=T0 + minutes * MIN, failing=TPCT)


def hard(minutes: int) -> Judged:
    return judged(Verdict.FAIL, at=T0 + minutes * MIN, failing=KV)


def broken(minutes: int) -> Judged:
    return judged(Verdict.FAIL, at=T0 + minutes * MIN, failing=ERRORS)


def unsure(minutes: int) -> Judged:
    return judged(Verdict.INCONCLUSIVE, at=T0 + minutes * MIN)


PROMOTE, ABORT, RESUME = Manual(Action.PROMOTE), Manual(Action.ABORT), Manual(Action.RESUME)


@dataclass(frozen=True)
class Case:
    status: ScopeStatus
    event: Input
    state: ScopeState
    weight: int
    events: tuple[Reason, ...] = ()
    record: FallbackReason | None = None
    policy: Policy = POLICY
    warm: bool = True
    minutes: int | None = None  # now, in minutes after T0; defaults to the window's end, else 2

    @property
    def now(self) -> datetime:
        if self.minutes is not None:
            return T0 + self.minutes * MIN
        return self.event.summary.end if isinstance(self.event, Judged) else T0 + 2 * MIN


CASES = {
    # Ordinary: waits for warm arms, then pilots its first stage.
    "ordinary/warm-tick-starts": Case(ORDINARY, Tick(), S.PILOTING, 10, (R.SCOPE_PILOT_STARTED,)),
    "ordinary/cold-tick-waits": Case(ORDINARY, Tick(), S.ORDINARY, 0, warm=False),
    "ordinary/suspended-waits": Case(ORDINARY, Tick(), S.ORDINARY, 0, policy=SUSPENDED),
    "ordinary/window-while-warm-starts": Case(ORDINARY, passed(3), S.PILOTING, 10, (R.SCOPE_PILOT_STARTED,)),
    "ordinary/promote-starts": Case(ORDINARY, PROMOTE, S.PILOTING, 10, (R.SCOPE_PILOT_STARTED,), warm=False),
    "ordinary/abort-keeps-it-from-starting": Case(ORDINARY, ABORT, S.ROLLED_BACK, 0, (R.SCOPE_ABORTED,)),
    "ordinary/resume-refused": Case(ORDINARY, RESUME, S.ORDINARY, 0, (R.MANUAL_ACTION_REFUSED,)),
    "ordinary/promote-while-suspended-refused": Case(
        ORDINARY, PROMOTE, S.ORDINARY, 0, (R.MANUAL_ACTION_REFUSED,), policy=SUSPENDED
    ),
    # Piloting: passing windows count; the gate promotes; failures count, then roll back.
    "piloting/pass-counts": Case(PILOTING, passed(2), S.PILOTING, 10),
    "piloting/rehearsed-pass-meeting-the-gate-is-only-recorded": Case(
        READY, passed(5), S.PILOTING, 10, policy=REHEARSING
    ),
    "piloting/pass-meeting-the-gate-promotes": Case(READY, passed(5), S.PILOTING, 50, (R.SCOPE_PROMOTED,)),
    "piloting/pass-short-of-requests-stays": Case(PILOTING, passed(9), S.PILOTING, 10),
    "piloting/pass-short-of-duration-stays": Case(READY, passed(4), S.PILOTING, 10),
    "piloting/last-stage-gate-goes-speculative": Case(LAST, passed(5), S.SPECULATIVE, 50, (R.SCOPE_SPECULATIVE,)),
    "piloting/fail-counts": Case(PILOTING, failed(2), S.PILOTING, 10, (R.WINDOW_FAILED,)),
    "piloting/failure-limit-rolls-back": Case(
        FAILING, failed(2), S.ROLLED_BACK, 0, (R.SCOPE_ROLLED_BACK,), F.THRESHOLD_EXCEEDED
    ),
    "piloting/hard-limit-rolls-back-at-once": Case(
        PILOTING, hard(2), S.ROLLED_BACK, 0, (R.SCOPE_ROLLED_BACK,), F.KV_CACHE_PRESSURE
    ),
    "piloting/inconclusive-holds": Case(PILOTING, unsure(2), S.HELD, 10, (R.SCOPE_HELD,)),
    "piloting/window-before-warmup-holds": Case(PILOTING, passed(2), S.HELD, 10, (R.SCOPE_HELD,), warm=False),
    "piloting/tick-changes-nothing": Case(PILOTING, Tick(), S.PILOTING, 10),
    "piloting/suspended-holds": Case(PILOTING, Tick(), S.HELD, 10, (R.SCOPE_SUSPENDED,), policy=SUSPENDED),
    "piloting/suspended-failing-window-does-not-roll-back": Case(
        FAILING, hard(2), S.HELD, 10, (R.SCOPE_SUSPENDED,), policy=SUSPENDED
    ),
    "piloting/promote": Case(PILOTING, PROMOTE, S.PILOTING, 50, (R.SCOPE_PROMOTED,)),
    "piloting/promote-at-last-stage-goes-speculative": Case(LAST, PROMOTE, S.SPECULATIVE, 50, (R.SCOPE_SPECULATIVE,)),
    "piloting/promote-while-suspended-refused": Case(
        PILOTING, PROMOTE, S.PILOTING, 10, (R.MANUAL_ACTION_REFUSED,), policy=SUSPENDED
    ),
    "piloting/abort": Case(PILOTING, ABORT, S.ROLLED_BACK, 0, (R.SCOPE_ABORTED,), F.MANUAL_ABORT),
    "piloting/abort-acts-while-suspended": Case(
        PILOTING, ABORT, S.ROLLED_BACK, 0, (R.SCOPE_ABORTED,), F.MANUAL_ABORT, policy=SUSPENDED
    ),
    "piloting/resume-refused": Case(PILOTING, RESUME, S.PILOTING, 10, (R.MANUAL_ACTION_REFUSED,)),
    "piloting/resume-while-suspended-refused": Case(
        PILOTING, RESUME, S.PILOTING, 10, (R.MANUAL_ACTION_REFUSED,), policy=SUSPENDED
    ),
    # Speculative: keeps judging at the last weight; a later failure still rolls it back.
    "speculative/pass-stays": Case(SPECULATIVE, passed(30), S.SPECULATIVE, 50),
    "speculative/fail-counts": Case(SPECULATIVE, failed(30), S.SPECULATIVE, 50, (R.WINDOW_FAILED,)),
    "speculative/failure-limit-rolls-back": Case(
        SPECULATIVE_FAILING, failed(30), S.ROLLED_BACK, 0, (R.SCOPE_ROLLED_BACK,), F.THRESHOLD_EXCEEDED
    ),
    "speculative/hard-limit-rolls-back": Case(
        SPECULATIVE, hard(30), S.ROLLED_BACK, 0, (R.SCOPE_ROLLED_BACK,), F.KV_CACHE_PRESSURE
    ),
    "speculative/inconclusive-holds": Case(SPECULATIVE, unsure(30), S.HELD, 50, (R.SCOPE_HELD,)),
    "speculative/window-before-warmup-holds": Case(SPECULATIVE, passed(30), S.HELD, 50, (R.SCOPE_HELD,), warm=False),
    "speculative/suspended-holds": Case(SPECULATIVE, passed(30), S.HELD, 50, (R.SCOPE_SUSPENDED,), policy=SUSPENDED),
    # During the peak rehearsal a window is evidence: only a hard limit moves the scope.
    "speculative/rehearsed-fail-is-only-recorded": Case(
        SPECULATIVE_FAILING, failed(30), S.SPECULATIVE, 50, policy=REHEARSING
    ),
    "speculative/rehearsed-inconclusive-is-only-recorded": Case(
        SPECULATIVE, unsure(30), S.SPECULATIVE, 50, policy=REHEARSING
    ),
    "speculative/rehearsed-overload-limit-is-only-recorded": Case(
        SPECULATIVE, hard(30), S.SPECULATIVE, 50, policy=REHEARSING
    ),
    "speculative/rehearsed-error-limit-rolls-back": Case(
        SPECULATIVE, broken(30), S.ROLLED_BACK, 0, (R.SCOPE_ROLLED_BACK,), F.HARD_LIMIT, policy=REHEARSING
    ),
    "speculative/promote-refused": Case(SPECULATIVE, PROMOTE, S.SPECULATIVE, 50, (R.MANUAL_ACTION_REFUSED,)),
    "speculative/abort": Case(SPECULATIVE, ABORT, S.ROLLED_BACK, 0, (R.SCOPE_ABORTED,), F.MANUAL_ABORT),
    "speculative/resume-refused": Case(SPECULATIVE, RESUME, S.SPECULATIVE, 50, (R.MANUAL_ACTION_REFUSED,)),
    "speculative/promote-while-suspended-refused": Case(
        SPECULATIVE, PROMOTE, S.SPECULATIVE, 50, (R.MANUAL_ACTION_REFUSED,), policy=SUSPENDED
    ),
    # Held: the next conclusive window returns it; inconclusive ones keep it.
    "held/pass-releases": Case(HELD, passed(2), S.PILOTING, 10, (R.SCOPE_RELEASED,)),
    "held/pass-meeting-the-gate-promotes": Case(HELD_READY, passed(6), S.PILOTING, 50, (R.SCOPE_PROMOTED,)),
    "held/pass-at-the-passed-last-stage-returns-speculative": Case(
        HELD_SPECULATIVE, passed(30), S.SPECULATIVE, 50, (R.SCOPE_SPECULATIVE,)
    ),
    "held/fail-returns-to-piloting-counting": Case(HELD, failed(2), S.PILOTING, 10, (R.WINDOW_FAILED,)),
    "held/failure-limit-rolls-back": Case(
        HELD.model_copy(update={"failed_checks": 2}),
        failed(2),
        S.ROLLED_BACK,
        0,
        (R.SCOPE_ROLLED_BACK,),
        F.THRESHOLD_EXCEEDED,
    ),
    "held/hard-limit-rolls-back": Case(HELD, hard(2), S.ROLLED_BACK, 0, (R.SCOPE_ROLLED_BACK,), F.KV_CACHE_PRESSURE),
    "held/inconclusive-stays-quietly": Case(HELD, unsure(2), S.HELD, 10),
    "held/window-before-warmup-stays-quietly": Case(HELD, passed(2), S.HELD, 10, warm=False),
    "held/suspended-stays-quietly": Case(HELD, passed(2), S.HELD, 10, policy=SUSPENDED),
    "held/promote": Case(HELD, PROMOTE, S.PILOTING, 50, (R.SCOPE_PROMOTED,)),
    "held/rehearsed-pass-is-only-recorded": Case(HELD, passed(2), S.HELD, 10, policy=REHEARSING),
    "held/abort": Case(HELD, ABORT, S.ROLLED_BACK, 0, (R.SCOPE_ABORTED,), F.MANUAL_ABORT),
    "held/resume-refused": Case(HELD, RESUME, S.HELD, 10, (R.MANUAL_ACTION_REFUSED,)),
    "held/promote-while-suspended-refused": Case(
        HELD, PROMOTE, S.HELD, 10, (R.MANUAL_ACTION_REFUSED,), policy=SUSPENDED
    ),
    # RolledBack: cooldown and re-entry.
    "rolled-back/manual-reentry-stays-after-cooldown": Case(ROLLED_BACK, Tick(), S.ROLLED_BACK, 0, minutes=60),
    "rolled-back/automatic-within-cooldown-stays": Case(
        ROLLED_BACK, Tick(), S.ROLLED_BACK, 0, policy=AUTOMATIC, minutes=9
    ),
    "rolled-back/automatic-after-cooldown-reenters": Case(
        ROLLED_BACK, Tick(), S.PILOTING, 10, (R.SCOPE_REENTERED,), policy=AUTOMATIC, minutes=10
    ),
    "rolled-back/automatic-waits-for-warm-arms": Case(
        ROLLED_BACK, Tick(), S.ROLLED_BACK, 0, policy=AUTOMATIC, warm=False, minutes=60
    ),
    "rolled-back/automatic-waits-while-suspended": Case(
        ROLLED_BACK, Tick(), S.ROLLED_BACK, 0, policy=SUSPENDED_AUTOMATIC, minutes=60
    ),
    "rolled-back/window-is-ignored": Case(ROLLED_BACK, failed(3), S.ROLLED_BACK, 0),
    # Rehearsed to narrow its crossover, production keeping it on ordinary decoding: evidence alone.
    "rolled-back/rehearsed-window-is-only-recorded": Case(ROLLED_BACK, failed(3), S.ROLLED_BACK, 0, policy=REHEARSING),
    "rolled-back/rehearsed-error-limit-moves-nothing": Case(
        ROLLED_BACK, broken(3), S.ROLLED_BACK, 0, policy=REHEARSING
    ),
    "rolled-back/resume": Case(ROLLED_BACK, RESUME, S.PILOTING, 10, (R.SCOPE_RESUMED,)),
    "rolled-back/resume-while-suspended-refused": Case(
        ROLLED_BACK, RESUME, S.ROLLED_BACK, 0, (R.MANUAL_ACTION_REFUSED,), policy=SUSPENDED
    ),
    "rolled-back/promote-refused": Case(ROLLED_BACK, PROMOTE, S.ROLLED_BACK, 0, (R.MANUAL_ACTION_REFUSED,)),
    "rolled-back/abort-again-changes-nothing": Case(ROLLED_BACK, ABORT, S.ROLLED_BACK, 0),
}


def step(case: Case) -> Step:
    return advance(case.status, case.event, policy=case.policy, warm=case.warm, now=case.now)


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_transitions(case: Case) -> None:
    result = step(case)
    assert (result.status.state, result.weight) == (case.state, case.weight)
    assert tuple(e.reason for e in result.events) == case.events
    assert (result.record.reason if result.record else None) is case.record
    if not case.events:
        assert result.status.last_transition_time == case.status.last_transition_time


def test_every_row_of_the_table_is_in_the_matrix() -> None:
    covered = {
        (case.status.state, rollout._cause(case.status, case.event, policy=case.policy, warm=case.warm, now=case.now))
        for case in CASES.values()
    }
    assert set(TABLE) <= covered, sorted(set(TABLE) - covered)


# --- what the transitions write ---------------------------------------------------------------------


def test_start_resets_the_stage_and_the_judge() -> None:
    status = advance(
        ROLLED_BACK.model_copy(update={"failed_checks": 3, "judge": {"x": 1.0}, "stage_requests": 7}),
        RESUME,
        policy=POLICY,
        warm=True,
        now=T0 + 3 * MIN,
    ).status
    assert status.stage == 0 and status.weight == 10 and status.stage_started_at == T0 + 3 * MIN
    assert (status.failed_checks, status.stage_requests, status.passed_windows, status.judge) == (0, 0, 0, {})
    assert status.last_transition_time == T0 + 3 * MIN


def test_a_stages_duration_counts_from_when_its_load_settled() -> None:
    longer = replace(POLICY, analysis=Analysis(window="3m"))  # the first window wholly inside ends at 3
    assert advance(READY, passed(5), policy=longer, warm=True, now=T0 + 5 * MIN).status.stage == 0
    assert advance(READY, passed(7), policy=longer, warm=True, now=T0 + 7 * MIN).status.stage == 1


def test_promotion_resets_the_stage_counters_and_keeps_the_judge_state() -> None:
    status = advance(READY, passed(5), policy=POLICY, warm=True, now=T0 + 5 * MIN).status
    assert (status.stage, status.weight, status.stage_started_at) == (1, 50, T0 + 5 * MIN)
    assert (status.stage_requests, status.passed_windows, status.failed_checks) == (0, 0, 0)
    # The sequential tests spend over the scope's whole pilot, so their state survives the stage.
    assert status.judge == {"looks": 5.0}
    assert status.last_window is not None and status.last_window.end == T0 + 5 * MIN


def test_a_window_records_its_summary_requests_and_judge_state() -> None:
    status = advance(PILOTING, passed(2), policy=POLICY, warm=True, now=T0 + 2 * MIN).status
    assert status.last_window == passed(2).summary
    assert (status.stage_requests, status.passed_windows, status.judge) == (40, 1, {"looks": 5.0})


def test_a_pass_clears_the_failure_count() -> None:
    assert advance(FAILING, passed(3), policy=POLICY, warm=True, now=T0 + 3 * MIN).status.failed_checks == 0


def test_an_inconclusive_window_keeps_the_failure_count_and_adds_no_requests() -> None:
    status = advance(FAILING, unsure(3), policy=POLICY, warm=True, now=T0 + 3 * MIN).status
    assert (status.failed_checks, status.stage_requests) == (2, 0)
    assert status.last_window is not None and status.last_window.verdict is Verdict.INCONCLUSIVE


def test_a_window_before_warmup_is_shown_as_not_judged_and_spends_nothing() -> None:
    status = advance(PILOTING, failed(3), policy=POLICY, warm=False, now=T0 + 3 * MIN).status
    assert status.last_window is not None and status.last_window.verdict is Verdict.INCONCLUSIVE
    assert "warmup" in status.last_window.reason
    assert (status.judge, status.failed_checks) == (PILOTING.judge, 0)


def test_a_rolled_back_scopes_rehearsal_window_is_shown_and_changes_nothing_else() -> None:
    status = advance(ROLLED_BACK, broken(3), policy=REHEARSING, warm=True, now=T0 + 3 * MIN).status
    assert status.last_window == broken(3).summary
    assert status == ROLLED_BACK.model_copy(update={"last_window": broken(3).summary})
    # without the rehearsal its windows are not judged at all
    assert advance(ROLLED_BACK, broken(3), policy=POLICY, warm=True, now=T0 + 3 * MIN).status == ROLLED_BACK


def test_rollback_records_the_failing_check_and_its_window() -> None:
    result = advance(FAILING, failed(7), policy=POLICY, warm=True, now=T0 + 7 * MIN + 5 * timedelta(seconds=1))
    record = result.record
    assert record is not None
    assert (record.scope, record.reason, record.metric) == ("code", F.THRESHOLD_EXCEEDED, TPCT.metric)
    assert (record.observed, record.threshold) == (1.3, 1.0)
    assert (record.window.start, record.window.end) == (T0 + 2 * MIN, T0 + 7 * MIN)
    assert record.at == T0 + 7 * MIN + 5 * timedelta(seconds=1)
    assert (result.status.weight, result.status.failed_checks, result.status.judge) == (0, 3, {})
    assert "slow" in result.events[0].message and result.events[0].type is rollout.EventType.WARNING


def test_abort_records_the_stage_it_ended() -> None:
    record = advance(PILOTING, ABORT, policy=POLICY, warm=True, now=T0 + 4 * MIN).record
    assert record is not None
    assert (record.metric, record.observed, record.threshold) == (MetricName.MANUAL, None, None)
    assert (record.window.start, record.window.end) == (T0, T0 + 4 * MIN)


def test_suspend_records_no_window() -> None:
    status = advance(PILOTING, passed(2), policy=SUSPENDED, warm=True, now=T0 + 2 * MIN).status
    assert (status.last_window, status.stage_requests) == (None, 0)


# --- idempotent on its window ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "event"),
    [
        (PILOTING.model_copy(update={"last_window": passed(4).summary}), failed(4)),
        (PILOTING.model_copy(update={"last_window": passed(4).summary}), hard(3)),
        (PILOTING.model_copy(update={"stage_started_at": T0 + 10 * MIN}), hard(9)),
    ],
    ids=["same-window-again", "older-window", "window-closed-before-the-stage-began"],
)
def test_a_replayed_window_changes_nothing(status: ScopeStatus, event: Judged) -> None:
    assert advance(status, event, policy=POLICY, warm=True, now=T0 + 20 * MIN) == Step(status=status)


def test_a_restarted_operator_replaying_the_flip_window_emits_nothing_twice() -> None:
    flip = hard(5)
    first = advance(PILOTING, flip, policy=POLICY, warm=True, now=T0 + 5 * MIN)
    assert first.record is not None and len(first.events) == 1
    # The status that landed is read back after a restart, and the same window closes again.
    landed = ScopeStatus.from_wire(first.status.to_wire())
    again = advance(landed, flip, policy=AUTOMATIC, warm=True, now=T0 + 6 * MIN)
    assert (again.record, again.events, again.status) == (None, (), landed)


def test_a_pilot_walks_every_stage_to_speculative_and_back() -> None:
    status = advance(ORDINARY, Tick(), policy=POLICY, warm=True, now=T0).status
    reasons = []
    for minute in range(1, 16):
        result = advance(status, passed(minute), policy=POLICY, warm=True, now=T0 + minute * MIN)
        status = result.status
        reasons += [e.reason for e in result.events]
    assert (status.state, status.stage, status.weight) == (S.SPECULATIVE, 1, 50)
    assert reasons == [R.SCOPE_PROMOTED, R.SCOPE_SPECULATIVE]
    for minute in (16, 17, 18):
        result = advance(status, failed(minute), policy=POLICY, warm=True, now=T0 + minute * MIN)
        status = result.status
    assert (status.state, status.weight) == (S.ROLLED_BACK, 0)
    assert result.record is not None and result.record.reason is F.THRESHOLD_EXCEEDED
