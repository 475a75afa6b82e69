"""The peak rehearsal: its ladder and figures as pure functions, and a pilot driven through it by the shell."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from specpilot.analysis.decision import decide_scope, envelope_peak
from specpilot.analysis.evidence import Evidence, load_bin
from specpilot.analysis.window import ArmEngine, ArmRequests
from specpilot.api.common import Duration
from specpilot.api.reasons import FallbackReason, MetricName
from specpilot.api.spec import Analysis, Burst, Peak, Rehearsal, SpeculationPilotSpec
from specpilot.api.status import (
    ArmStepFigures,
    CrossoverBracket,
    Decision,
    DecisionOutcome,
    DeferReason,
    FallbackRecord,
    RehearsalPhase,
    RehearsalStatus,
    RehearsalStep,
    ScopeDecision,
    ScopeState,
    ScopeStatus,
    Window,
)
from specpilot.controller.core.arm_objects import render_arm
from specpilot.controller.core.measurements import RECENT_LOAD, horizon
from specpilot.controller.core.objects import PilotRef
from specpilot.controller.core.rehearsal.figures import arm_figures, capacity_of
from specpilot.controller.core.rehearsal.ladder import bracket, ladder, step_duration
from specpilot.controller.core.rehearsal.manifests import render_restart
from specpilot.controller.core.rehearsal.steps import advance, next_move, read_span
from specpilot.controller.core.rehearsal.tick import load_changed_at
from specpilot.testing.fakes import ITL, Json
from specpilot.testing.harness import Harness, climbing, pilot_doc, staged_climb_doc
from specpilot.wire.names import Arm
from specpilot.wire.samples import RequestOutcome
from tests.unit.analysis.crossover import pilot as crossover_pilot

STEP = 30  # seconds: the local demo's analysis window


def production(*loads: float) -> dict[int, int]:
    out: dict[int, int] = {}
    for load in loads:
        out[load_bin(load)] = out.get(load_bin(load), 0) + 1
    return out


def test_the_ladder_climbs_evenly_from_productions_median_to_its_peak_then_bursts() -> None:
    observed = production(2.0, 2.0, 2.0, 3.0, 3.9)
    steps = ladder(Rehearsal(peak=Peak(production_factor=2.0), steps=4, burst=Burst(factor=1.5)), observed)
    assert not isinstance(steps, str)
    loads = [step.load for step in steps]
    assert [step.burst for step in steps] == [False, False, False, False, True, False, False]
    assert [step.flip for step in steps] == [False] * 5 + [True, False]  # the routing fallback, at the peak
    assert [step.restart for step in steps] == [False] * 6 + [True]  # then the restart fallback
    assert loads[5] == loads[6] == loads[3]
    assert [step.on_ladder for step in steps] == [True] * 4 + [False] * 3
    median, highest = loads[0], loads[3]
    assert 2.0 <= median <= 2.0 * 2 ** (1 / 4)  # the upper edge of the median's bin
    assert 7.8 <= highest <= 8.0 + 1e-3  # twice the upper edge of the highest bin
    assert loads[1] - loads[0] == pytest.approx(loads[3] - loads[2], abs=1e-3)
    assert loads[4] == pytest.approx(highest * 1.5, abs=1e-3)


def test_a_peak_given_per_replica_needs_no_production_record_and_a_relative_one_does() -> None:
    steps = ladder(Rehearsal(peak=Peak(per_replica=9.0), steps=3, burst=None, restart=False), {})
    assert not isinstance(steps, str)
    assert [step.load for step in steps] == [3.0, 6.0, 9.0, 9.0]
    assert "never measured" in str(ladder(Rehearsal(peak=Peak(production_factor=2.0)), {}))
    # a peak below production's median: the ladder does not climb down
    low = ladder(Rehearsal(peak=Peak(per_replica=1.0), steps=2, burst=None), production(4.0))
    assert not isinstance(low, str) and [step.load for step in low] == [1.0, 1.0, 1.0, 1.0]


ADOPTED_BELOW = ScopeDecision(outcome=DecisionOutcome.ADOPT_IN_LOW_LOAD_WINDOWS, crossover_low=2.0, crossover_high=10.0)
T1 = datetime(2026, 12, 1, tzinfo=UTC)


def rolled_back(name: str = "code", decision: ScopeDecision | None = ADOPTED_BELOW) -> ScopeStatus:
    """A scope flipped back an hour before `T1`, decided as `decision` says."""
    return ScopeStatus(
        name=name,
        state=ScopeState.ROLLED_BACK,
        weight=0,
        last_transition_time=T1 - timedelta(hours=1),
        decision=decision,
    )


def test_a_rolled_back_scope_whose_decision_brackets_its_crossover_is_rehearsed_across_the_bracket() -> None:
    assert bracket(rolled_back()) == CrossoverBracket(scope="code", low=2.0, high=10.0)
    deferred = ScopeDecision(outcome=DecisionOutcome.DEFER, defer_reason=DeferReason.NO_NET_GAIN)
    unbracketed = ADOPTED_BELOW.model_copy(update={"crossover_high": None})
    speculative = rolled_back().model_copy(update={"state": ScopeState.SPECULATIVE, "weight": 50})
    for other in (rolled_back(decision=deferred), rolled_back(decision=unbracketed), rolled_back(decision=None)):
        assert bracket(other) is None, other.decision
    assert bracket(speculative) is None
    rehearsal = Rehearsal(peak=Peak(production_factor=2.0), steps=5, burst=None, restart=False)
    # alone: from the bracket's low end to its high end, production's load not needed; the fallback at its top
    alone = ladder(rehearsal, {}, brackets=[CrossoverBracket(scope="code", low=2.0, high=10.0)], climb=False)
    assert not isinstance(alone, str)
    assert [(step.load, step.flip) for step in alone] == [
        (2, False),
        (4, False),
        (6, False),
        (8, False),
        (10, False),
        (10, True),
    ]
    # beside scopes on speculative decoding: the ladder spans their climb and the bracket
    both = ladder(rehearsal, production(4.0), brackets=[CrossoverBracket(scope="code", low=2.0, high=5.0)])
    assert not isinstance(both, str)
    assert both[0].load == 2.0 and 8.0 <= both[4].load <= 8.0 * 2 ** (1 / 4) + 1e-3  # twice 4.0's bin's top


def _decided_after(
    flip_metric: MetricName, flip_load: float, alpha: float, loads: tuple[float, ...], per_load: int
) -> ScopeDecision:
    """The scope's decision with spec.rehearsal set, after a climb at `loads` flipped back at `flip_load`."""
    evidence = crossover_pilot({"code": alpha}, loads=loads, per_load=per_load)
    flip = FallbackRecord(
        scope="code",
        at=T1,
        reason=FallbackReason.THRESHOLD_EXCEEDED,
        metric=flip_metric,
        observed=5.99,
        threshold=4.0,
        window=Window(start=T1 - timedelta(seconds=30), end=T1),
        loads={Arm.SPECULATIVE: flip_load, Arm.CONTROL: flip_load},
    )
    found = decide_scope(
        "code", evidence, fallbacks=[flip], confidence=0.9, state=ScopeState.ROLLED_BACK, rehearsal=True
    )
    return found.decision


@pytest.mark.parametrize(
    ("metric", "alpha", "loads", "per_load", "span"),
    [
        # a thin win at the first stage (3 windows at 2), its ITL limit failed at 4: from the thin win to the flip
        pytest.param(MetricName.INTER_TOKEN_LATENCY_RATIO, 0.95, (2,), 3, (2.0, 4.0), id="thin-win-then-flip"),
        # flipped for speed at its first stage, no win: from a quarter of the flip's load up to it
        pytest.param(MetricName.TIME_PER_COMMITTED_TOKEN_RATIO, 0.1, (4,), 9, (1.0, 4.0), id="first-stage-flip"),
        # a win then a flip for the ITL limit: where that limit fails
        pytest.param(MetricName.INTER_TOKEN_LATENCY_RATIO, 0.95, (2, 2.75), 9, (2.75, 4.0), id="limit-after-a-win"),
    ],
)
def test_a_rolled_back_scope_left_unsettled_below_its_flip_is_rehearsed_there(
    metric: MetricName, alpha: float, loads: tuple[float, ...], per_load: int, span: tuple[float, float]
) -> None:
    decision = _decided_after(metric, 4.0, alpha, loads, per_load)
    found = bracket(rolled_back(decision=decision))
    assert found is not None, decision.reasons
    assert (found.low, found.high) == pytest.approx(span)
    rehearsal = Rehearsal(peak=Peak(production_factor=2.0), steps=3, burst=None, restart=False)
    steps = ladder(rehearsal, {}, brackets=[found], climb=False)
    assert not isinstance(steps, str)
    low, high = span
    assert [step.load for step in steps if step.on_ladder] == pytest.approx([low, (low + high) / 2, high])


def test_the_rehearsal_is_due_on_the_rolled_back_scopes_with_a_bracket_and_stops_only_for_a_new_flip() -> None:
    spec = SpeculationPilotSpec.model_validate(rehearsed_doc(restart=False)["spec"])
    chat = ScopeStatus(name="chat", state=ScopeState.SPECULATIVE, weight=50)
    stated = Decision(outcome=DecisionOutcome.ADOPT_IN_LOW_LOAD_WINDOWS, decided_at=T1)

    def due(
        scopes: list[ScopeStatus],
        *,
        previous: RehearsalStatus | None = None,
        decision: Decision | None = stated,
        requested: bool = False,
        now: datetime = T1,
    ) -> RehearsalStatus | None:
        return advance(
            spec,
            previous,
            scopes=scopes,
            decision=decision,
            evidence=Evidence(),
            saturated=None,
            router_ready=False,
            figures=None,
            requested=requested,
            now=now,
        )

    both = due([chat, rolled_back()])
    assert both is not None and both.scopes == ["chat", "code"]
    assert both.brackets == [CrossoverBracket(scope="code", low=2.0, high=10.0)]
    assert [step.load for step in both.steps if step.on_ladder] == [2.0, 7.0, 12.0]  # the bracket to the peak
    alone = due([rolled_back()])
    assert alone is not None and [step.load for step in alone.steps] == [2.0, 6.0, 10.0, 10.0]
    assert due([rolled_back()], decision=None) is None, "not before the decision is stated"
    asked = due([chat, rolled_back()], decision=None, requested=True)
    assert asked is not None and asked.scopes == ["chat", "code"], "the annotation asks for it too"
    assert due([rolled_back(decision=None)]) is None
    # running: production keeps code on ordinary decoding, as it was; only a flip since it began stops it
    running = both.model_copy(update={"phase": RehearsalPhase.STARTING})

    def after(scopes: list[ScopeStatus]) -> RehearsalStatus | None:
        return due(scopes, previous=running, now=T1 + timedelta(minutes=1))

    kept = after([chat, rolled_back()])
    assert kept is not None and kept.phase is RehearsalPhase.STARTING
    for flipped, name in (
        (rolled_back().model_copy(update={"last_transition_time": T1 + timedelta(seconds=30)}), "code"),
        (rolled_back("chat", decision=None), "chat"),
    ):
        scopes = [flipped, rolled_back()] if name == "chat" else [chat, flipped]
        stopped = after(scopes)
        assert stopped is not None and stopped.phase is RehearsalPhase.STOPPED, name
        assert stopped.message == f"scope {name} flipped back to ordinary decoding"


def test_a_rolled_back_scopes_crossover_step_stays_within_its_bracket() -> None:
    spec = SpeculationPilotSpec.model_validate(rehearsed_doc(maxDuration="20m", restart=False)["spec"])
    assert spec.rehearsal is not None
    code = CrossoverBracket(scope="code", low=2.0, high=10.0)
    planned = ladder(spec.rehearsal, {}, brackets=[code], climb=False)
    assert not isinstance(planned, str)
    status = ran(spec.rehearsal, list(planned), index=2, at=T1).model_copy(update={"brackets": [code]})
    # below its bracket: at its low end, and first (the lowest crossover); another scope's is not bounded
    below = ended(spec, status, {"chat": 1.0, "code": 1.2})
    assert [(s.load, s.crossover) for s in below.steps[3:4]] == [(1.0, "chat")]
    below = ended(spec, status, {"chat": 5.0, "code": 1.2})
    assert [(s.load, s.crossover) for s in below.steps[3:4]] == [(2.0, "code")]
    above = ended(spec, status, {"code": 14.0})
    assert [(s.load, s.crossover) for s in above.steps[3:4]] == [(10.0, "code")]


def figures(on_time: float | None, completed: float, *, kept_up: bool = True) -> ArmStepFigures:
    return ArmStepFigures(requests=100, completed_per_replica=completed, on_time=on_time, kept_up=kept_up)


def test_capacity_is_the_highest_load_an_arm_served_on_a_step_it_kept_up_with_on_time() -> None:
    steps = [
        RehearsalStep(load=2, speculative=figures(1.0, 2.1), control=figures(1.0, 1.9)),
        # its arrivals fell short of the planned 4: capacity is what it served, not what was planned
        RehearsalStep(load=4, speculative=figures(0.995, 3.5), control=figures(0.9, 4.0)),
        RehearsalStep(load=6, speculative=figures(1.0, 4.5, kept_up=False), control=None),
    ]
    assert capacity_of(steps, Arm.SPECULATIVE, 0.99) == 3.5
    assert capacity_of(steps, Arm.CONTROL, 0.99) == 1.9
    assert capacity_of(steps[1:], Arm.CONTROL, 0.99) is None
    nothing = [RehearsalStep(load=2, speculative=ArmStepFigures(), control=ArmStepFigures())]
    assert capacity_of(nothing, Arm.SPECULATIVE, 0.5) is None


def test_a_ladder_step_is_read_past_its_first_window_and_any_other_step_over_its_last() -> None:
    window, start = timedelta(seconds=15), datetime(2026, 12, 1, tzinfo=UTC)
    step = RehearsalStep(load=2, started_at=start)
    assert read_span(step, window, end=start + timedelta(seconds=60)) == timedelta(seconds=45)
    # no longer than two windows, or just begun: the last window
    assert read_span(step, window, end=start + timedelta(seconds=30)) == window
    assert read_span(step, window, end=start + timedelta(seconds=5)) == window
    for other in (
        RehearsalStep(load=2, started_at=start, burst=True),
        RehearsalStep(load=2, started_at=start, flip=True),
    ):
        assert read_span(other, window, end=start + timedelta(seconds=60)) == window


def test_measurements_reach_back_over_a_rehearsal_step_longer_than_the_recent_load() -> None:
    analysis = Analysis(window=Duration("15s"), interval=Duration("5s"))
    # a window's load reads back over the recent span, longer than two windows
    margin = horizon(analysis) - RECENT_LOAD
    assert margin > timedelta(0) and 2 * analysis.window < RECENT_LOAD
    ladder_only = Rehearsal(peak=Peak(per_replica=4.0), step_duration=Duration("90s"), crossover_steps=0)
    assert horizon(analysis, ladder_only) == timedelta(seconds=90) + margin
    # a crossover step runs twice as long, and is read over most of it too
    assert horizon(analysis, Rehearsal(peak=Peak(per_replica=4.0), step_duration=Duration("90s"))) == (
        timedelta(seconds=180) + margin
    )
    short = Rehearsal(peak=Peak(per_replica=4.0), step_duration=Duration("45s"), crossover_steps=0)
    assert horizon(analysis, short) == horizon(analysis)


def ran(rehearsal: Rehearsal, steps: list[RehearsalStep], *, index: int, at: datetime) -> RehearsalStatus:
    """A rehearsal running step `index` since `at`, begun a minute before its first step."""
    steps = [*steps]
    steps[index] = steps[index].model_copy(update={"started_at": at})
    return RehearsalStatus(
        phase=RehearsalPhase.RUNNING,
        started_at=at - timedelta(minutes=1),
        scopes=["chat", "code"],
        step=index,
        steps=steps,
    )


def ended(spec: SpeculationPilotSpec, status: RehearsalStatus, crossovers: dict[str, float | None]) -> RehearsalStatus:
    """The rehearsal as its current step ends, with the scopes' crossovers as given."""
    step = status.steps[status.step]
    assert step.started_at is not None and spec.rehearsal is not None
    found = advance(
        spec,
        status,
        scopes=[],
        decision=None,
        evidence=Evidence(),
        saturated=None,
        router_ready=True,
        figures=None,
        crossover=crossovers.get,
        now=step.started_at + step_duration(spec.rehearsal, step),
    )
    assert found is not None
    return found


def test_after_the_ladder_a_crossover_step_runs_at_each_scopes_crossover_twice_as_long() -> None:
    doc = rehearsed_doc(maxDuration="20m", restart=False, crossoverSteps=1)
    spec = SpeculationPilotSpec.model_validate(doc["spec"])
    assert spec.rehearsal is not None
    planned = ladder(spec.rehearsal, {})
    assert not isinstance(planned, str) and [s.on_ladder for s in planned] == [True, True, True, False]
    start = datetime(2026, 12, 1, tzinfo=UTC)
    # a ladder step that is not the last: the ladder goes on, whatever the crossovers
    middle = ended(spec, ran(spec.rehearsal, list(planned), index=1, at=start), {"chat": 5.0})
    assert [s.crossover for s in middle.steps] == [None] * 4 and middle.step == 2
    # the ladder's last step: one step at the lower crossover first, then the other scope's
    status = ended(spec, ran(spec.rehearsal, list(planned), index=2, at=start), {"chat": 7.25, "code": 5.5})
    assert [(s.load, s.crossover) for s in status.steps[3:]] == [(5.5, "code"), (12.0, None)]
    assert status.step == 3 and status.steps[3].started_at == start + timedelta(seconds=STEP)
    assert step_duration(spec.rehearsal, status.steps[3]) == timedelta(seconds=2 * STEP)
    assert "crossover step for code" in status.message
    # a crossover step reads past its first window, as a ladder step does; capacity is read off the ladder
    step = status.steps[3]
    assert step.held and not step.on_ladder and step.started_at is not None
    span = read_span(step, timedelta(seconds=15), end=step.started_at + timedelta(seconds=2 * STEP))
    assert span == timedelta(seconds=2 * STEP - 15)
    status = ended(spec, status, {"chat": 7.25, "code": 5.8})
    assert [(s.load, s.crossover) for s in status.steps[3:]] == [(5.5, "code"), (7.25, "chat"), (12.0, None)]
    # one step per scope (crossoverSteps: 1): then the routing fallback
    status = ended(spec, status, {"chat": 7.0, "code": 5.8})
    assert status.step == 5 and status.steps[5].flip and len(status.steps) == 6
    # none where no scope's arms cross
    plain = ended(spec, ran(spec.rehearsal, list(planned), index=2, at=start), {"chat": None, "code": None})
    assert [s.crossover for s in plain.steps] == [None] * 4 and plain.steps[3].flip
    # by default two per scope, each at the crossover as the windows then place it
    twice = SpeculationPilotSpec.model_validate(rehearsed_doc(maxDuration="20m", restart=False)["spec"])
    assert twice.rehearsal is not None and twice.rehearsal.crossover_steps == 2
    status = ended(twice, ran(twice.rehearsal, list(planned), index=2, at=start), {"chat": 5.5})
    status = ended(twice, status, {"chat": 6.0})
    status = ended(twice, status, {"chat": 5.9})
    assert [(s.load, s.crossover) for s in status.steps[3:]] == [(5.5, "chat"), (6.0, "chat"), (12.0, None)]
    assert status.steps[status.step].flip


def test_the_next_tick_comes_when_the_rehearsal_moves_not_an_interval_late() -> None:
    rehearsal = Rehearsal(peak=Peak(per_replica=4.0), steps=2, step_duration=Duration("30s"), restart=False)
    planned = ladder(rehearsal, {})
    assert not isinstance(planned, str) and planned[-1].flip
    start = datetime(2026, 12, 1, tzinfo=UTC)
    margin = timedelta(milliseconds=100)
    climbing = ran(rehearsal, list(planned), index=0, at=start)
    assert next_move(rehearsal, climbing, start + timedelta(seconds=28)) == timedelta(seconds=2) + margin
    flipping = ran(rehearsal, list(planned), index=2, at=start)
    # the routing fallback flips halfway through its step, then the step ends
    assert next_move(rehearsal, flipping, start + timedelta(seconds=12)) == timedelta(seconds=3) + margin
    assert next_move(rehearsal, flipping, start + timedelta(seconds=16)) == timedelta(seconds=14) + margin
    assert next_move(rehearsal, flipping, start + timedelta(seconds=31)) is None  # overdue: the next tick moves it
    done = flipping.model_copy(update={"phase": RehearsalPhase.COMPLETED})
    assert next_move(rehearsal, done, start) is None and next_move(rehearsal, None, start) is None


def test_no_window_is_binned_while_the_arms_run_unmatched_after_the_flip_and_through_the_restart() -> None:
    spec = SpeculationPilotSpec.model_validate(rehearsed_doc(steps=2, crossoverSteps=0)["spec"])
    assert spec.rehearsal is not None
    planned = ladder(spec.rehearsal, {})
    assert not isinstance(planned, str) and [s.flip for s in planned] == [False, False, True, False]
    start = datetime(2026, 12, 1, tzinfo=UTC)
    later = start + timedelta(seconds=STEP * 0.9)
    climbing = ran(spec.rehearsal, list(planned), index=1, at=start)
    assert load_changed_at(climbing, spec, later) == start  # a ladder step: from its start
    flipping = ran(spec.rehearsal, list(planned), index=2, at=start)
    # the routing fallback: matched until it flips halfway, then the speculative arm drains what it held
    assert load_changed_at(flipping, spec, start + timedelta(seconds=STEP * 0.4)) == start
    assert load_changed_at(flipping, spec, later) == later
    # the restart fallback: one speculative replica is down or decodes without a draft, all step long
    restarting = ran(spec.rehearsal, list(planned), index=3, at=start)
    assert load_changed_at(restarting, spec, later) == later
    finished = start + timedelta(seconds=STEP)
    done = restarting.model_copy(update={"phase": RehearsalPhase.COMPLETED, "finished_at": finished})
    assert load_changed_at(done, spec, finished + timedelta(seconds=STEP)) == finished
    assert load_changed_at(None, spec, later) is None


def test_a_crossover_step_that_would_not_fit_the_cap_is_not_run() -> None:
    spec = SpeculationPilotSpec.model_validate(rehearsed_doc(maxDuration="3m", restart=False)["spec"])
    assert spec.rehearsal is not None
    planned = ladder(spec.rehearsal, {})
    assert not isinstance(planned, str)
    start = datetime(2026, 12, 1, tzinfo=UTC)
    # begun a minute before the ladder's last step, which ends 30 s in: the 90 s left fit the crossover
    # step's 60 s and the routing fallback's 30 s exactly
    status = ran(spec.rehearsal, list(planned), index=2, at=start)
    assert ended(spec, status, {"chat": 4.0}).steps[3].crossover == "chat"
    late = status.model_copy(update={"started_at": start - timedelta(seconds=61)})
    over = ended(spec, late, {"chat": 4.0})
    assert [s.crossover for s in over.steps] == [None] * 4 and over.steps[3].flip


def test_arm_figures_pool_the_scopes_and_count_late_answers_as_missed() -> None:
    chat = ArmRequests(
        outcomes={RequestOutcome.OK: 8, RequestOutcome.TIMEOUT: 1, RequestOutcome.REJECTED: 1},
        late=2,
        ttft_seconds=tuple(0.1 * i for i in range(1, 9)),
        e2e_seconds=tuple(1.0 * i for i in range(1, 9)),
        decode_seconds=(1.0, 1.0),
        committed_tokens=(50, 50),
    )
    code = ArmRequests(outcomes={RequestOutcome.OK: 10}, e2e_seconds=(0.5,) * 10)
    at = datetime(2026, 12, 1, tzinfo=UTC)
    engine = ArmEngine(kv_usage=((at, 0.4), (at + timedelta(seconds=5), 0.7)), preemptions=3)
    out = arm_figures([chat, code], engine, seconds=10, replicas=2, arrived=20)
    assert out.requests == 20 and out.kept_up
    assert out.completed_per_replica == 1.0
    assert out.on_time == pytest.approx(16 / 20)
    assert out.timeout_share == pytest.approx(3 / 20)
    assert out.rejection_share == pytest.approx(1 / 20)
    assert out.time_per_committed_token == pytest.approx(2 / 100)
    assert out.ttft_p50 == pytest.approx(0.4) and out.ttft_p99 == pytest.approx(0.8)
    assert (out.peak_kv_usage, out.preemptions) == (0.7, 3)
    # sent 4 per second per replica, it finished 1: falling behind, whatever the share on time
    assert not arm_figures([chat, code], engine, seconds=10, replicas=2, arrived=80).kept_up
    # sent none it could tell of: nothing on keeping up
    assert arm_figures([chat, code], engine, seconds=10, replicas=2).kept_up is None
    empty = arm_figures([], ArmEngine(), seconds=10, replicas=1, arrived=10)
    assert (empty.requests, empty.on_time, empty.completed_per_replica, empty.kept_up) == (0, None, 0.0, False)


def rehearsed_doc(**rehearsal: object) -> Json:
    doc = pilot_doc()
    doc["spec"]["rehearsal"] = {
        "peak": {"perReplica": 12.0},
        "steps": 3,
        "stepDuration": f"{STEP}s",
        "maxDuration": "10m",
        **rehearsal,
    }
    return doc


async def decided(h: Harness) -> None:
    """Drive the pilot until its decision is stated (every scope settled)."""
    await h.reconcile()
    h.ready_pods = True
    await h.reconcile()
    for _ in range(60):
        await h.step(10)
        if h.status().get("decision"):
            return
    raise AssertionError(f"no decision: {h.status().get('scopes')}")


async def test_after_the_decision_the_rehearsal_climbs_its_ladder_on_its_own_router_and_reads_each_arms_capacity() -> (
    None
):
    h = Harness(rehearsed_doc())
    # past these loads (requests/s per replica) an arm misses every deadline: the control arm first
    h.traffic.capacity = {Arm.CONTROL: 5.0, Arm.SPECULATIVE: 9.0}
    await decided(h)
    rehearsal = h.status()["rehearsal"]
    assert rehearsal["phase"] in ("Starting", "Running"), rehearsal
    assert rehearsal["scopes"] == ["chat", "code"]
    # the live table sends the rehearsed scopes to production; the rehearsal router reaches no production pod
    table = h.table()
    assert table is not None and all(route.weights.baseline == 100 for route in table.scopes)
    services = {name: body for (kind, name), body in h.children().items() if kind == "Service"}
    assert {name for name in services if name.startswith("demo-rehearsal-")} == {
        "demo-rehearsal-speculative",
        "demo-rehearsal-control",
    }
    assert services["demo-rehearsal-control"]["spec"]["selector"]["specpilot.io/arm"] == "control"
    router = h.children()[("Deployment", "demo-rehearsal-router")]
    args = router["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--pilot=demo-rehearsal" in args and "--ordinary-arm=control" in args
    seen_loads = []
    for _ in range(40):
        await h.step(10)
        load = h.rehearsal_load()
        if load is not None:
            seen_loads.append(load["metadata"]["name"])
        if h.status()["rehearsal"]["phase"] not in ("Starting", "Running"):
            break
    rehearsal = h.status()["rehearsal"]
    assert rehearsal["phase"] == "Completed", rehearsal
    assert sorted(set(seen_loads)) == [f"demo-rehearsal-{index}" for index in range(5)]
    steps = rehearsal["steps"][:3]  # the ladder; then the routing and the restart fallback
    measured = [step["control"]["completedPerReplica"] for step in steps]
    assert measured == pytest.approx([step["load"] for step in steps], rel=0.15)
    assert [step["speculative"]["onTime"] >= 0.99 for step in steps] == [True, True, False]
    assert [step["control"]["onTime"] >= 0.99 for step in steps] == [True, False, False]
    assert rehearsal["speculativeCapacity"] == pytest.approx(steps[1]["load"], rel=0.15)
    assert rehearsal["controlCapacity"] == pytest.approx(steps[0]["load"], rel=0.15)
    # missing deadlines past its capacity is what the rehearsal measures: it flips nothing
    assert [scope["state"] for scope in h.status()["scopes"]] == ["Speculative", "Speculative"]
    assert not h.status().get("fallbacks")
    # its objects go, and the rehearsed scopes come back to their live shares
    await h.step(10)
    assert not [name for (_, name) in h.children() if name.startswith("demo-rehearsal")]
    table = h.table()
    assert table is not None and all(route.weights.speculative == 33 for route in table.scopes)
    reasons = h.reasons()
    assert reasons.count("RehearsalStep") == 5 and reasons.count("RehearsalCompleted") == 1
    assert "RehearsalStopped" not in reasons
    # the routing fallback at the peak: the control arm takes twice the peak, past its capacity
    flip = rehearsal["routingFlip"]
    assert flip["recovered"] is False and flip["missed"] > 0 and "recoverySeconds" not in flip
    assert "had not caught up on time" in rehearsal["message"]


def rehearsed_windows(h: Harness) -> int:
    """Windows of the rehearsal's traffic in the evidence's bins, every scope."""
    found = h.kube.objects.get(("ConfigMap", "team-a", "demo-evidence"))
    if found is None:
        return 0
    evidence = Evidence.model_validate_json(found["data"]["evidence.json"])
    return sum(sum(scope.rehearsed.values()) for scope in evidence.scopes.values())


async def test_the_routing_fallback_at_peak_flips_the_rehearsal_table_and_times_the_recovery() -> None:
    h = Harness(rehearsed_doc())
    await decided(h)
    flipped_tables = []
    binned: dict[str, int] = {"matched": 0, "unmatched": 0}  # windows binned per tick, by what the arms ran
    for _ in range(40):
        before, running = rehearsed_windows(h), h.status()["rehearsal"]
        step = running["steps"][running["step"]] if running["phase"] == "Running" else {}
        await h.step(10)
        flipped = step.get("flip") and h.clock.now >= datetime.fromisoformat(step["startedAt"]) + timedelta(
            seconds=STEP / 2
        )
        binned["unmatched" if flipped or step.get("restart") else "matched"] += rehearsed_windows(h) - before
        found = h.kube.objects.get(("ConfigMap", "team-a", "demo-rehearsal-routes"))
        if found is not None and '"control":100' in found["data"]["routes.json"].replace(" ", ""):
            flipped_tables.append(h.clock.now)
        if h.status()["rehearsal"]["phase"] == "Completed":
            break
    rehearsal = h.status()["rehearsal"]
    assert rehearsal["phase"] == "Completed", rehearsal
    assert flipped_tables, "the rehearsal router's table sent the speculative share to the control arm"
    flip = rehearsal["routingFlip"]
    assert flip["recovered"] is True and flip["missed"] == 0 and flip["recoverySeconds"] == 0, (rehearsal, h)
    assert flip["requests"] > 0
    assert "recovered in 0 s" in rehearsal["message"]
    # the flip step is not a ladder step: capacity comes from the ladder
    assert rehearsal["speculativeCapacity"] == rehearsal["steps"][2]["speculative"]["completedPerReplica"]
    # the evidence holds the ladder's windows, and none from the flip on: the speculative arm only
    # drained what it held then, and the restart replaced a replica of it with ordinary decoding
    assert binned["matched"] > 0 and binned["unmatched"] == 0, binned


async def test_the_restart_fallback_at_peak_replaces_a_speculative_replica_and_times_its_readiness() -> None:
    h = Harness(rehearsed_doc())
    h.restart_seconds = 15.0  # the replacement loads its model for this long
    await decided(h)
    during: list[tuple[int, bool]] = []
    for _ in range(40):
        await h.step(10)
        rehearsal = h.status()["rehearsal"]
        if rehearsal["phase"] == "Running" and rehearsal["steps"][rehearsal["step"]].get("restart"):
            speculative = h.children()[("Deployment", "demo-speculative")]["spec"]["replicas"]
            during.append((speculative, ("Deployment", "demo-rehearsal-restart") in h.children()))
        if rehearsal["phase"] == "Completed":
            break
    rehearsal = h.status()["rehearsal"]
    assert rehearsal["phase"] == "Completed", rehearsal
    # while it runs, one speculative replica fewer and one ordinary-decoding replica in its place
    assert during and set(during) == {(0, True)}, during
    restart = h.children().get(("Deployment", "demo-rehearsal-restart"))
    assert restart is None, "the replacement goes with the rehearsal"
    assert h.children()[("Deployment", "demo-speculative")]["spec"]["replicas"] == 1
    fallback = rehearsal["restartFallback"]
    assert fallback["secondsToReady"] == pytest.approx(15.0, abs=10.0), fallback
    assert fallback["requests"] > 0 and fallback["missed"] == 0 and fallback["onTime"] == 1.0
    assert "restarted as ordinary decoding was Ready in" in rehearsal["message"]
    # two scopes rehearsed: each step has each scope's figures besides the arm's
    step = rehearsal["steps"][0]
    assert [scope["name"] for scope in step["scopes"]] == ["chat", "code"]
    assert sum(scope["speculative"]["requests"] for scope in step["scopes"]) == step["speculative"]["requests"]
    assert "keptUp" not in step["scopes"][0]["speculative"] and "peakKvUsage" not in step["scopes"][0]["speculative"]
    # the restart step is not a ladder step: capacity comes from the ladder
    assert rehearsal["speculativeCapacity"] == rehearsal["steps"][2]["speculative"]["completedPerReplica"]


def test_the_replacement_replica_runs_the_control_arms_engine_under_the_speculative_arms_label() -> None:
    spec = SpeculationPilotSpec.from_wire(rehearsed_doc()["spec"])
    ref = PilotRef(name="demo", namespace="team-a", uid="u")
    restart = render_restart(ref, spec)
    control = render_arm(ref, spec, Arm.CONTROL).deployment
    assert restart["spec"]["template"]["spec"] == control["spec"]["template"]["spec"]
    labels = restart["spec"]["template"]["metadata"]["labels"]
    assert labels["specpilot.io/arm"] == "speculative" and labels["app.kubernetes.io/component"] == "rehearsal-restart"
    assert restart["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert "--speculative-config" not in json.dumps(restart)


async def test_a_flip_during_the_rehearsal_stops_it_at_once_and_removes_its_load() -> None:
    h = Harness(rehearsed_doc())
    await decided(h)
    h.traffic.failing = frozenset({Arm.SPECULATIVE})  # a fault: the speculative arm's engines fail requests
    for _ in range(40):
        await h.step(10)
        if h.status()["rehearsal"]["phase"] == "Stopped":
            break
    rehearsal = h.status()["rehearsal"]
    assert rehearsal["phase"] == "Stopped" and "flipped back to ordinary decoding" in rehearsal["message"], rehearsal
    assert h.rehearsal_load() is None
    assert not [name for (_, name) in h.children() if name.startswith("demo-rehearsal")]
    assert "RehearsalStopped" in h.reasons()
    assert rehearsal.get("routingFlip") is None
    assert {record["metric"] for record in h.status()["fallbacks"]} == {"errorRate"}


async def test_a_saturated_production_holds_the_rehearsal_before_it_moves_any_share() -> None:
    h = Harness(rehearsed_doc())
    await decided(h)
    assert h.status()["rehearsal"]["phase"] == "Starting"
    h.engines.figures[Arm.BASELINE] = ArmEngine(acceptance_length=2.0, inter_token_latency=ITL, waiting=50.0)
    for _ in range(3):
        await h.step(10)
    rehearsal = h.status()["rehearsal"]
    assert rehearsal["phase"] == "Waiting" and "production cannot take" in rehearsal["message"], rehearsal
    table = h.table()
    assert table is not None and all(route.weights.speculative == 33 for route in table.scopes)
    assert not [name for (_, name) in h.children() if name.startswith("demo-rehearsal")]
    assert "RehearsalWaiting" in h.reasons()


async def test_the_cap_stops_a_rehearsal_whatever_step_it_is_on() -> None:
    h = Harness(rehearsed_doc(stepDuration="2m", maxDuration="10m"))
    await decided(h)
    for _ in range(60):
        await h.step(10)
        if h.status()["rehearsal"]["phase"] in ("Completed", "Stopped"):
            break
    rehearsal = h.status()["rehearsal"]
    assert rehearsal["phase"] == "Stopped" and "maxDuration" in rehearsal["message"], rehearsal
    started = h.clock.now - timedelta(minutes=10)
    assert rehearsal["startedAt"] <= (started + timedelta(seconds=20)).isoformat().replace("+00:00", "Z")


async def test_a_restarted_operator_resumes_the_step_it_was_on_without_a_second_job_or_event() -> None:
    h = Harness(rehearsed_doc())
    await decided(h)
    for _ in range(20):
        await h.step(10)
        if h.status()["rehearsal"]["phase"] == "Running" and h.status()["rehearsal"]["step"] == 1:
            break
    before = h.status()["rehearsal"]
    assert before["phase"] == "Running" and before["step"] == 1
    load = h.rehearsal_load()
    assert load is not None and load["metadata"]["name"] == "demo-rehearsal-1"
    h.restart()
    steps_seen = h.reasons().count("RehearsalStep")
    await h.step(5)  # within the step: the same Job, the same step start
    after = h.status()["rehearsal"]
    assert after["step"] == 1 and after["steps"][1]["startedAt"] == before["steps"][1]["startedAt"]
    assert [name for (kind, name) in h.children() if kind == "Job"] == ["demo-rehearsal-1"]
    assert h.reasons().count("RehearsalStep") == steps_seen
    for _ in range(20):
        await h.step(10)
        if h.status()["rehearsal"]["phase"] == "Completed":
            break
    assert h.status()["rehearsal"]["phase"] == "Completed"
    assert h.reasons().count("RehearsalStep") == 5 and h.reasons().count("RehearsalCompleted") == 1


async def test_deleting_the_pilot_mid_rehearsal_removes_its_router_and_load_with_the_arms() -> None:
    h = Harness(rehearsed_doc())
    await decided(h)
    for _ in range(10):
        await h.step(10)
        if h.rehearsal_load() is not None:
            break
    assert h.rehearsal_load() is not None
    h.ready_pods = False  # the routers' pods go once deleted
    for _ in range(5):
        if await h.delete():
            break
    deleted = h.kube.verbs("delete")
    assert ("Job", "demo-rehearsal-0") in deleted and ("Deployment", "demo-rehearsal-router") in deleted
    assert deleted.index(("Job", "demo-rehearsal-0")) < deleted.index(("Deployment", "demo-speculative"))
    assert not [name for (_, name) in h.children() if name.startswith("demo-rehearsal")]


def test_the_envelope_must_reach_the_ladder_as_planned_not_a_peak_a_busier_production_moved_since() -> None:
    spec = SpeculationPilotSpec.from_wire(rehearsed_doc(peak={"productionFactor": 2.0})["spec"])
    before = Evidence(compared=Arm.CONTROL, production=production(3.0))
    derived = envelope_peak(spec, before, None)
    assert derived is not None and 6.0 <= derived <= 6.0 * 2 ** (1 / 4)  # twice the upper edge of 3.0's bin
    planned = ladder(spec.rehearsal, before.production)  # type: ignore[arg-type]
    assert not isinstance(planned, str)
    status = RehearsalStatus(phase=RehearsalPhase.RUNNING, steps=list(planned))
    # while the rehearsal runs production takes the rehearsed shares and runs busier: the bar stays put
    busier = before.model_copy(update={"production": production(3.0, 9.0)})
    assert envelope_peak(spec, busier, status) == max(step.load for step in planned if not step.flip)
    assert envelope_peak(spec, busier, None) != envelope_peak(spec, busier, status)
    assert envelope_peak(spec.model_copy(update={"rehearsal": None}), busier, status) is None


async def test_the_rehearse_annotation_runs_it_again_and_is_refused_while_one_runs() -> None:
    h = Harness(rehearsed_doc())
    await decided(h)
    for _ in range(40):
        await h.step(10)
        if h.status()["rehearsal"]["phase"] == "Completed":
            break
    first = h.status()["rehearsal"]
    assert first["phase"] == "Completed"
    h.annotate(**{"specpilot.io/rehearse": "again"})
    await h.step(10)
    again = h.status()["rehearsal"]
    assert again["phase"] in ("Starting", "Running") and again["startedAt"] > first["startedAt"], again
    assert "specpilot.io/rehearse" not in (h.body["metadata"].get("annotations") or {})
    h.annotate(**{"specpilot.io/rehearse": "once more"})
    await h.step(10)
    refused = [e["message"] for e in h.kube.events if e["reason"] == "ManualActionRefused"]
    assert refused and "a rehearsal is" in refused[-1] and "already" in refused[-1], refused
    assert "specpilot.io/rehearse" not in (h.body["metadata"].get("annotations") or {})


async def test_the_rehearse_annotation_before_the_decision_rehearses_the_scopes_being_piloted() -> None:
    h = Harness(rehearsed_doc())
    await h.reconcile()
    h.ready_pods = True
    await h.reconcile()
    for _ in range(6):
        await h.step(10)
    assert not h.status().get("decision") and "rehearsal" not in h.status()
    h.annotate(**{"specpilot.io/rehearse": "now"})
    await h.step(10)
    rehearsal = h.status()["rehearsal"]
    assert rehearsal["scopes"] == ["chat", "code"] and rehearsal["phase"] in ("Starting", "Running"), rehearsal


async def test_the_rehearse_annotation_without_a_rehearsal_in_the_spec_is_refused() -> None:
    h = Harness(pilot_doc())
    await h.reconcile()
    h.annotate(**{"specpilot.io/rehearse": "now"})
    await h.reconcile()
    refused = [e["message"] for e in h.kube.events if e["reason"] == "ManualActionRefused"]
    assert refused == ["specpilot.io/rehearse refused: spec.rehearsal is not set"]
    assert "specpilot.io/rehearse" not in (h.body["metadata"].get("annotations") or {})


async def test_removing_the_rehearsal_from_the_spec_mid_run_stops_it_and_gives_the_shares_back() -> None:
    h = Harness(rehearsed_doc())
    await decided(h)
    for _ in range(10):
        await h.step(10)
        if h.rehearsal_load() is not None:
            break
    assert h.rehearsal_load() is not None
    del h.kube.objects[("SpeculationPilot", "team-a", "demo")]["spec"]["rehearsal"]
    await h.step(10)
    rehearsal = h.status()["rehearsal"]
    assert rehearsal["phase"] == "Stopped" and rehearsal["message"] == "spec.rehearsal was removed", rehearsal
    assert not [name for (_, name) in h.children() if name.startswith("demo-rehearsal")]
    table = h.table()
    assert table is not None and all(route.weights.speculative == 33 for route in table.scopes)
    assert "RehearsalStopped" in h.reasons()


async def test_a_scope_flipped_past_its_crossover_is_rehearsed_inside_its_bracket_and_the_crossover_narrows() -> None:
    """The staged climb of the shell's tests: a win at 2 requests/s per replica, a flip at 10, the crossover
    at 4 bracketed between them (2.05 to 9.98 as measured). Rehearsed on its own router against the control
    arm while production keeps the scope on ordinary decoding, across the bracket and at the crossover as
    it then stands, the crossover is restated at 4.00 (3.82 to 4.20)."""
    doc = staged_climb_doc()
    doc["spec"]["rehearsal"] = {"steps": 4, "stepDuration": "2m", "maxDuration": "40m", "restart": False}
    h = Harness(doc)
    climbing(h.traffic)
    await decided(h)
    before = h.scope("code")["decision"]
    assert before["outcome"] == "AdoptInLowLoadWindows" and "crossoverLoad" not in before, before
    low, high = before["crossoverLow"], before["crossoverHigh"]
    assert low == pytest.approx(2, rel=0.05) and high == pytest.approx(10, rel=0.05)
    rehearsal = h.status()["rehearsal"]
    assert rehearsal["scopes"] == ["code"] and rehearsal["brackets"] == [{"scope": "code", "low": low, "high": high}]
    (flip,) = h.status()["fallbacks"]
    live: set[int] = set()
    for _ in range(150):
        await h.step(10)
        table = h.table()
        assert table is not None
        live |= {route.weights.speculative for route in table.scopes}
        assert h.scope("code")["state"] == "RolledBack" and h.status()["fallbacks"] == [flip]
        if h.status()["rehearsal"]["phase"] != "Running":
            break
    rehearsal = h.status()["rehearsal"]
    assert rehearsal["phase"] == "Completed", rehearsal
    assert live == {0}, "production kept the scope on ordinary decoding throughout"
    steps = [(step["load"], step.get("crossover")) for step in rehearsal["steps"]]
    assert all(low - 1e-3 <= load <= high + 1e-3 for load, _ in steps), steps
    assert [crossover for _, crossover in steps].count("code") == 2, steps
    assert all(step["speculative"]["requests"] > 0 for step in rehearsal["steps"] if not step["flip"])
    assert rehearsed_windows(h) > 0
    for _ in range(4):  # the rehearsal's last windows in
        await h.step(10)
    after = h.scope("code")["decision"]
    assert after["outcome"] == "AdoptInLowLoadWindows", after["reasons"]
    assert after["crossoverLoad"] == pytest.approx(4, rel=0.15)
    assert 4 * 0.85 <= after["crossoverLow"] <= 4 <= after["crossoverHigh"] <= 4 * 1.15, after
    assert "DecisionRevised" in h.reasons()
    assert h.status()["decision"]["crossoverLoad"] == after["crossoverLoad"]
