"""One reconcile's scope progress: due windows, warm-up, manual actions, and the flips it reports."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from specpilot.analysis import rollout
from specpilot.analysis.evidence import ArmLoad, WindowLoad
from specpilot.analysis.window import ArmEngine, ArmRequests, ScopeWindow
from specpilot.api.pilot import ABORT_ANNOTATION, PROMOTE_ANNOTATION, RESUME_ANNOTATION
from specpilot.api.reasons import FallbackReason, MetricName
from specpilot.api.status import (
    Condition,
    ConditionStatus,
    ConditionType,
    CrossoverBracket,
    FallbackRecord,
    RehearsalPhase,
    RehearsalStatus,
    ScopeState,
    ScopeStatus,
    SpeculationPilotStatus,
    Verdict,
    Window,
    WindowSummary,
)
from specpilot.controller.core.progress import (
    Measured,
    advance_scopes,
    due,
    manual_actions,
    warm,
    window_due,
    window_summary,
)
from specpilot.wire.names import Arm
from specpilot.wire.samples import RequestOutcome
from tests.unit.analysis.windows import engine as analysis_engine
from tests.unit.analysis.windows import window as analysis_window
from tests.unit.controller.specs import ROOT, load

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
_, SPEC = load(ROOT / "manifests/examples/local-demo.yaml")  # interval 10s, window 30s, warmup 20s
UNPROBED = SPEC.model_copy(update={"quality": SPEC.quality.model_copy(update={"probes": None})})


def armsready(since: datetime, status: ConditionStatus = ConditionStatus.TRUE) -> SpeculationPilotStatus:
    ready = Condition(type=ConditionType.ARMS_READY, status=status, last_transition_time=since, reason="ArmsAvailable")
    return SpeculationPilotStatus(conditions=[ready])


@pytest.mark.parametrize(
    ("previous", "expected"),
    [
        (None, False),
        (armsready(T0 - timedelta(seconds=5)), False),
        (armsready(T0 - timedelta(seconds=20)), True),
        (armsready(T0 - timedelta(hours=1), ConditionStatus.FALSE), False),
    ],
    ids=["no-status", "ready-too-recently", "ready-for-warmup", "not-ready"],
)
def test_warm_means_arms_ready_for_the_warmup(previous: SpeculationPilotStatus | None, expected: bool) -> None:
    assert warm(previous, SPEC.analysis, T0) is expected


def scope(state: ScopeState, last_end: datetime | None = None, weight: int = 25) -> ScopeStatus:
    last = WindowSummary(end=last_end, verdict=Verdict.PASS) if last_end is not None else None
    return ScopeStatus(name="chat", state=state, stage=0, weight=weight, last_window=last, stage_started_at=T0)


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (scope(ScopeState.ORDINARY, weight=0), False),
        (scope(ScopeState.ROLLED_BACK, weight=0), False),
        (scope(ScopeState.PILOTING), True),
        (scope(ScopeState.PILOTING, T0 - timedelta(seconds=5)), False),
        (scope(ScopeState.HELD, T0 - timedelta(seconds=10)), True),
        (scope(ScopeState.SPECULATIVE, T0 - timedelta(seconds=9.5)), True),  # reconciles land late
    ],
    ids=["ordinary", "rolled-back", "first-window", "within-interval", "held-after-interval", "slack"],
)
def test_window_due_once_per_interval_for_judged_states(status: ScopeStatus, expected: bool) -> None:
    assert due(status, SPEC.analysis, T0) is expected


def test_a_rolled_back_scopes_windows_are_due_while_the_rehearsal_runs_it() -> None:
    flipped = scope(ScopeState.ROLLED_BACK, T0 - timedelta(minutes=5), weight=0)
    assert not due(flipped, SPEC.analysis, T0)
    assert due(flipped, SPEC.analysis, T0, rehearsed=("chat",))
    recorded = flipped.model_copy(
        update={"last_window": WindowSummary(end=T0 - timedelta(seconds=5), verdict=Verdict.FAIL)}
    )
    assert not due(recorded, SPEC.analysis, T0, rehearsed=("chat",)), "once per interval, as any scope"
    # the collection wakes the reconcile for it while the rehearsal runs
    running = RehearsalStatus(phase=RehearsalPhase.RUNNING, scopes=["chat"])
    status = armsready(T0 - timedelta(minutes=5)).model_copy(update={"scopes": [flipped]})
    assert not window_due(status, SPEC, T0, T0)
    # not one flipped back during the rehearsal: only those it began on with a bracket
    assert not window_due(status.model_copy(update={"rehearsal": running}), SPEC, T0, T0)
    bracketed = running.model_copy(update={"brackets": [CrossoverBracket(scope="chat", low=1.0, high=4.0)]})
    assert window_due(status.model_copy(update={"rehearsal": bracketed}), SPEC, T0, T0)


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        ({}, {}),
        ({PROMOTE_ANNOTATION: "chat"}, {"chat": rollout.Action.PROMOTE}),
        ({RESUME_ANNOTATION: "code, chat"}, {"chat": rollout.Action.RESUME, "code": rollout.Action.RESUME}),
        (
            {ABORT_ANNOTATION: "*", PROMOTE_ANNOTATION: "chat"},
            {"chat": rollout.Action.ABORT, "code": rollout.Action.ABORT},
        ),
        ({PROMOTE_ANNOTATION: "nosuch"}, {}),
        ({"other/annotation": "chat"}, {}),
    ],
    ids=["none", "promote", "resume-two", "abort-all-wins", "unknown-scope", "unrelated"],
)
def test_manual_actions_from_annotations(annotations: dict[str, str], expected: dict[str, rollout.Action]) -> None:
    assert manual_actions(annotations, ["chat", "code"]) == expected


def slow_window(end: datetime) -> ScopeWindow:
    """A window in which the speculative arm is twice as slow per committed token, on plenty of requests."""
    n = 200

    def arm(seconds_per_token: float) -> ArmRequests:
        return ArmRequests(
            outcomes={RequestOutcome.OK: n},
            decode_seconds=tuple(seconds_per_token * 99 for _ in range(n)),
            committed_tokens=tuple(99 for _ in range(n)),
            ttft_seconds=tuple(0.05 for _ in range(n)),
            e2e_seconds=tuple(2.0 for _ in range(n)),
        )

    engine = ArmEngine(acceptance_length=1.2, kv_usage=((end, 0.3),))
    return ScopeWindow(
        scope="code",
        start=end - timedelta(seconds=30),
        end=end,
        compared=arm(0.02),
        speculative=arm(0.04),
        compared_engine=engine,
        speculative_engine=engine,
    )


def test_failing_windows_flip_a_scope_and_record_why() -> None:
    statuses = [
        ScopeStatus(name="chat", state=ScopeState.ORDINARY),
        ScopeStatus(name="code", state=ScopeState.PILOTING, stage=0, weight=25, stage_started_at=T0),
    ]
    flips, now = (), T0
    for tick in range(1, 6):
        now = T0 + timedelta(seconds=10 * tick)
        measured = {"code": Measured(slow_window(now), new_requests=50)}
        spec = UNPROBED
        step = advance_scopes(statuses, spec, measured=measured, manual={}, fallbacks=[], warm=True, now=now)
        statuses, flips = step.scopes, step.flipped or flips
        if step.flipped:
            break
    code = next(s for s in statuses if s.name == "code")
    assert flips == ("code",) and code.state is ScopeState.ROLLED_BACK and code.weight == 0
    (record,) = step.fallbacks
    assert (record.reason, record.metric) == (
        FallbackReason.THRESHOLD_EXCEEDED,
        MetricName.TIME_PER_COMMITTED_TOKEN_RATIO,
    )
    assert record.observed is not None and record.observed > 1.5
    chat = next(s for s in statuses if s.name == "chat")
    assert chat.state is ScopeState.PILOTING, "a warm ordinary scope starts its first stage"


def test_window_summary_for_webhooks_names_scope_span_and_arms() -> None:
    summary = window_summary("demo", "team-a", slow_window(T0))
    assert summary["scope"] == "code" and summary["window"]["end"] == T0.isoformat()
    assert summary["arms"]["speculative"]["requests"] == 200
    assert summary["compared"] == "control" and set(summary["arms"]) == {"speculative", "control"}
    assert summary["arms"]["speculative"]["timePerCommittedTokenSeconds"] == pytest.approx(0.04)


def test_sustained_kv_pressure_flips_only_the_scope_that_loads_the_arm_most() -> None:
    pressured = analysis_window(speculative_engine=analysis_engine(0.99))
    statuses = [
        ScopeStatus(name=name, state=ScopeState.PILOTING, stage=0, weight=25, stage_started_at=pressured.start)
        for name in ("chat", "code")
    ]
    measured = {"chat": Measured(pressured, 50), "code": Measured(pressured, 50)}
    spec = UNPROBED
    now = pressured.end
    loads = {"chat": 40.0, "code": 160.0}
    step = advance_scopes(
        statuses, spec, measured=measured, manual={}, fallbacks=[], warm=True, now=now, kv_loads=loads
    )
    assert step.flipped == ("code",)
    (record,) = step.fallbacks
    assert (record.scope, record.reason, record.metric) == (
        "code",
        FallbackReason.KV_CACHE_PRESSURE,
        MetricName.KV_CACHE_USAGE,
    )
    chat = step.scopes[0]
    assert (chat.state, chat.weight) == (ScopeState.HELD, 25), "held where it is, not flipped"
    assert chat.last_window is not None and chat.last_window.verdict is Verdict.INCONCLUSIVE
    assert "put on scope 'code' (80% of the arm's KV load)" in chat.last_window.reason


def test_kv_pressure_while_a_flipped_scopes_requests_drain_flips_no_other_scope() -> None:
    pressured = analysis_window(speculative_engine=analysis_engine(0.99))
    code = ScopeStatus(name="code", state=ScopeState.PILOTING, stage=0, weight=25, stage_started_at=pressured.start)
    chat = ScopeStatus(name="chat", state=ScopeState.ROLLED_BACK, stage=0, weight=0)
    spec = UNPROBED

    def judged(chat_load: float) -> ScopeStatus:
        step = advance_scopes(
            [code, chat],
            spec,
            measured={"code": Measured(pressured, 50)},
            manual={},
            fallbacks=[],
            warm=True,
            now=pressured.end,
            kv_loads={"code": 100.0, "chat": chat_load},
        )
        return step.scopes[0]

    held = judged(900.0)
    assert (held.state, held.weight) == (ScopeState.HELD, 25)
    assert held.last_window is not None and "scope 'chat' (90% of the arm's KV load), which is on ordinary" in (
        held.last_window.reason
    )
    assert judged(0.0).weight == 0, "once chat's requests have drained, the pressure is code's"


SLOW = replace(analysis_window(), speculative=slow_window(T0).speculative, compared=slow_window(T0).compared)


def kv_flip(scope: str, at: datetime) -> FallbackRecord:
    """Scope `scope` flipped back for KV pressure at `at`."""
    return FallbackRecord(
        scope=scope,
        at=at,
        reason=FallbackReason.KV_CACHE_PRESSURE,
        metric=MetricName.KV_CACHE_USAGE,
        window=Window(start=at - timedelta(seconds=15), end=at),
    )


def test_a_rolled_back_scopes_rehearsal_window_is_shown_and_flips_nothing() -> None:
    """Slower by far in its window: rehearsed, a rolled-back scope stays where it is, its window shown
    (and so recorded as evidence)."""
    status = ScopeStatus(name="chat", state=ScopeState.ROLLED_BACK, stage=1, weight=0, last_transition_time=T0)
    measured = {"chat": Measured(SLOW, SLOW.speculative.routed)}
    step = advance_scopes(
        [status], UNPROBED, measured=measured, manual={}, fallbacks=[], warm=True, now=SLOW.end, rehearsing=("chat",)
    )
    (after,) = step.scopes
    assert after.last_window is not None and after.last_window.end == SLOW.end
    assert after == status.model_copy(update={"last_window": after.last_window})
    assert (step.fallbacks, step.flipped, step.events) == ([], (), [])


def chat_judged(window: ScopeWindow, fallbacks: list[FallbackRecord]) -> ScopeStatus:
    """Scope chat, piloting at 25%, after `window` is judged with `fallbacks` on record."""
    status = ScopeStatus(name="chat", state=ScopeState.PILOTING, stage=0, weight=25, stage_started_at=SLOW.start)
    spec = UNPROBED
    measured = {"chat": Measured(window, window.speculative.routed)}
    step = advance_scopes([status], spec, measured=measured, manual={}, fallbacks=fallbacks, warm=True, now=SLOW.end)
    return step.scopes[0]


def after_kv_flip(flipped_at: datetime, *, waiting: float = 0.0) -> WindowSummary:
    """chat's slow window, judged when scope longform was flipped for KV pressure at `flipped_at`."""
    window = replace(SLOW, speculative_engine=replace(SLOW.speculative_engine, waiting=waiting))
    judged = chat_judged(window, [kv_flip("longform", flipped_at)])
    assert judged.last_window is not None
    return judged.last_window


def test_a_window_overlapping_another_scopes_kv_flip_is_held_and_a_later_one_judged() -> None:
    held = after_kv_flip(SLOW.start + timedelta(seconds=5))
    assert held.verdict is Verdict.INCONCLUSIVE and "overlaps KV-cache pressure put on scope 'longform'" in held.reason
    assert after_kv_flip(SLOW.start - timedelta(seconds=1)).verdict is Verdict.FAIL


def test_after_a_kv_flip_a_window_is_held_while_the_speculative_queue_drains() -> None:
    draining = after_kv_flip(SLOW.start - timedelta(seconds=60), waiting=12.0)
    assert draining.verdict is Verdict.INCONCLUSIVE and "its queue is still draining" in draining.reason
    assert after_kv_flip(SLOW.start - timedelta(seconds=60)).verdict is Verdict.FAIL


def test_timeouts_sent_before_another_scopes_kv_flip_do_not_flip_a_later_window() -> None:
    flipped_at = SLOW.start - timedelta(seconds=60)  # long before the window: no hold, no queue
    sent_before, sent_after = flipped_at.timestamp() - 5, flipped_at.timestamp() + 5
    timing_out = replace(
        SLOW.compared,  # as fast as the control arm
        outcomes={RequestOutcome.OK: 200, RequestOutcome.TIMEOUT: 40},
        answerable_starts=(sent_before,) * 40 + (sent_after,) * 200,
        timeout_starts=(sent_before,) * 40,
    )
    window = replace(SLOW, speculative=timing_out)
    record = kv_flip("longform", flipped_at)
    kept = chat_judged(window, [record])
    assert kept.weight > 0 and kept.last_window is not None and kept.last_window.verdict is Verdict.PASS
    assert "40 requests sent before scope 'longform' was flipped back" in kept.last_window.reason, "status says so"
    own = record.model_copy(update={"scope": "chat"})  # a scope's own KV flip excuses none of its timeouts
    for fallbacks in ([], [own]):
        flipped = chat_judged(window, fallbacks)
        assert flipped.weight == 0 and flipped.last_window is not None
        assert "timeout rate" in flipped.last_window.reason


def test_a_collection_wakes_the_reconcile_only_when_a_warm_window_is_due() -> None:
    judged_at = T0 - timedelta(seconds=10)
    last = WindowSummary(end=judged_at, verdict=Verdict.PASS, samples=10)
    scope = ScopeStatus(name="chat", state=ScopeState.PILOTING, stage=0, weight=25, last_window=last)
    status = armsready(T0 - timedelta(minutes=5)).model_copy(update={"scopes": [scope]})
    assert window_due(status, SPEC, T0, T0)
    assert not window_due(status, SPEC, judged_at + timedelta(seconds=2), T0), "an interval has not passed"
    assert not window_due(status, SPEC.model_copy(update={"suspend": True}), T0, T0)
    assert not window_due(armsready(T0).model_copy(update={"scopes": [scope]}), SPEC, T0, T0), "not warm"
    assert not window_due(None, SPEC, T0, T0) and not window_due(status, SPEC, None, T0)


def test_speed_failures_are_held_while_another_scope_builds_kv_pressure() -> None:
    status = ScopeStatus(name="chat", state=ScopeState.PILOTING, stage=0, weight=25, stage_started_at=SLOW.start)
    spec = UNPROBED
    building = replace(
        SLOW.speculative_engine,
        kv_usage=((SLOW.end - timedelta(seconds=30), 0.5), (SLOW.end - timedelta(seconds=10), 0.97), (SLOW.end, 0.8)),
    )
    measured = {"chat": Measured(replace(SLOW, speculative_engine=building), 50)}

    flipped = ScopeStatus(name="code", state=ScopeState.ROLLED_BACK, stage=0, weight=0)

    def verdict(loads: dict[str, float]) -> WindowSummary:
        step = advance_scopes(
            [status, flipped], spec, measured=measured, manual={}, fallbacks=[], warm=True, now=SLOW.end, kv_loads=loads
        )
        assert step.scopes[0].last_window is not None
        return step.scopes[0].last_window

    held = verdict({"chat": 1.0, "longform": 9.0})
    assert held.verdict is Verdict.INCONCLUSIVE and "the pressure is put on scope 'longform'." in held.reason
    assert verdict({"chat": 9.0, "longform": 1.0}).verdict is Verdict.FAIL, "its own pressure holds nothing"
    draining = verdict({"chat": 1.0, "code": 9.0})  # code's requests still in flight after its flip
    assert "put on scope 'code', which is on ordinary decoding already; its requests still hold" in draining.reason


@pytest.mark.parametrize(
    ("compared", "expected"),
    [(Arm.CONTROL, 1.1), (Arm.BASELINE, 1.0)],
)
def test_the_last_window_shows_the_load_its_evidence_is_filed_at(compared: Arm, expected: float) -> None:
    """The compared pair's mean over the stage's last minute against a control arm (the window's own
    arrivals where that minute was not all read), the speculative arm's own against the baseline."""
    statuses = [ScopeStatus(name="code", state=ScopeState.PILOTING, stage=0, weight=25, stage_started_at=T0)]
    now = T0 + timedelta(minutes=2)
    window = replace(slow_window(now), compared_arm=compared)
    arms = {
        Arm.SPECULATIVE: ArmLoad(offered_per_replica=0.7, recent_per_replica=1.0),
        compared: ArmLoad(offered_per_replica=1.2),
    }
    load = WindowLoad(arms=arms, arrival_rate=2.0)
    measured = {"code": Measured(window, new_requests=50)}
    for loads, shown in (({"code": load}, expected), (None, None)):
        step = advance_scopes(
            statuses, UNPROBED, measured=measured, manual={}, fallbacks=[], warm=True, now=now, loads=loads
        )
        (code,) = step.scopes
        assert code.last_window is not None and code.last_window.offered_load == pytest.approx(shown)
