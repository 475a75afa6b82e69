"""One reconcile's evidence and decision: judged windows recorded once, decisions stated when due."""

from __future__ import annotations

from datetime import datetime, timedelta

from specpilot.analysis.evidence import ArmLoad, Evidence, ProbeArm, ProbeCounts, WindowLoad, dump, load_bin
from specpilot.analysis.evidence import load as load_evidence
from specpilot.analysis.probes import CaseTally
from specpilot.analysis.quality import ProbeResult, case_key, scope_cases
from specpilot.analysis.rollout import Event
from specpilot.analysis.window import ScopeWindow
from specpilot.api.pilot import DECIDE_ANNOTATION
from specpilot.api.reasons import Reason
from specpilot.api.spec import ProbeKind
from specpilot.api.status import (
    DecisionOutcome,
    DecisionTrigger,
    RehearsalPhase,
    RehearsalStatus,
    ScopeState,
    ScopeStatus,
    Verdict,
    WindowSummary,
)
from specpilot.controller.core.decide import DECIDED_KEPT, _findings, decide, fresh_for, record
from specpilot.controller.core.progress import Measured
from specpilot.wire.names import Arm
from tests.unit.analysis.crossover import pilot
from tests.unit.analysis.windows import END, arm, engine
from tests.unit.controller.specs import ROOT, load

_, SPEC = load(ROOT / "manifests/examples/local-demo.yaml")
NAMES = [scope.name for scope in SPEC.scopes]
HOUR = timedelta(hours=1)


def window(scope: str, end=END) -> ScopeWindow:  # type: ignore[no-untyped-def]
    return ScopeWindow(
        scope=scope,
        start=end - timedelta(seconds=30),
        end=end,
        compared=arm(30, seed=1, per_token=0.02),
        speculative=arm(30, seed=2, per_token=0.01),
        compared_engine=engine(),
        speculative_engine=engine(),
    )


def test_fresh_for_starts_over_when_an_arm_or_the_compared_arm_changed() -> None:
    control = Arm.CONTROL
    kept = fresh_for(Evidence(config_hashes={Arm.BASELINE: "a"}, compared=control), {Arm.BASELINE: "a"}, control)
    assert kept.config_hashes == {Arm.BASELINE: "a"}
    fresh = Evidence(config_hashes={Arm.BASELINE: "a"}, compared=control)
    assert fresh_for(None, {Arm.BASELINE: "a"}, control) == fresh
    changed = Evidence(config_hashes={Arm.BASELINE: "a"}, overlap=2.0, compared=control)
    assert fresh_for(changed, {Arm.BASELINE: "b"}, control) == Evidence(
        config_hashes={Arm.BASELINE: "b"}, compared=control
    )
    # the control arm switched off: windows against it no longer compare like with like
    assert fresh_for(changed, {Arm.BASELINE: "a"}, Arm.BASELINE) == Evidence(config_hashes={Arm.BASELINE: "a"})


def test_only_windows_judged_this_time_are_recorded() -> None:
    judged, other = NAMES[0], NAMES[1]
    measured = {name: Measured(window(name), 30) for name in (judged, other)}
    scopes = [
        ScopeStatus(name=judged, state=ScopeState.PILOTING, last_window=WindowSummary(end=END, verdict=Verdict.PASS)),
        # the other scope took a manual action instead: its last window is older
        ScopeStatus(
            name=other,
            state=ScopeState.PILOTING,
            last_window=WindowSummary(end=END - timedelta(minutes=1), verdict=Verdict.PASS),
        ),
    ]
    load_ = WindowLoad(arms={a: ArmLoad(offered_per_replica=2.0) for a in Arm}, arrival_rate=2.0)
    evidence = record(
        Evidence(),
        spec=SPEC,
        measured=measured,
        loads=dict.fromkeys(NAMES, load_),
        scopes=scopes,
        kv_blocks={Arm.BASELINE: 100},
        gpus={Arm.BASELINE: 1, Arm.SPECULATIVE: 1},
        replicas={Arm.BASELINE: 1},
    )
    assert set(evidence.scopes) == {judged}
    assert evidence.overlap == 3.0 and evidence.kv_blocks == {Arm.BASELINE: 100}
    again = record(
        evidence,
        spec=SPEC,
        measured=measured,
        loads=dict.fromkeys(NAMES, load_),
        scopes=scopes,
        kv_blocks={},
        gpus={},
        replicas={},
    )
    assert again.scopes == evidence.scopes  # the same window again counts once


def test_decisions_wait_until_due_and_are_announced_once() -> None:
    piloting = [ScopeStatus(name=name, state=ScopeState.PILOTING) for name in NAMES]
    waiting = decide(Evidence(), spec=SPEC, scopes=piloting, fallbacks=[], annotations={}, previous=None, now=END)
    assert waiting.decision is None and waiting.events == [] and waiting.scopes == piloting
    asked = decide(
        Evidence(),
        spec=SPEC,
        scopes=piloting,
        fallbacks=[],
        annotations={DECIDE_ANNOTATION: "1"},
        previous=None,
        now=END,
    )
    assert asked.decision is not None and asked.decision.outcome is DecisionOutcome.DEFER
    assert asked.decision.stated_because is DecisionTrigger.REQUESTED
    assert all(scope.decision is not None for scope in asked.scopes)
    assert [event.reason for event in asked.events] == [Reason.DECISION_STATED]
    settled = [ScopeStatus(name=name, state=ScopeState.ROLLED_BACK) for name in NAMES]
    later = decide(
        Evidence(),
        spec=SPEC,
        scopes=settled,
        fallbacks=[],
        annotations={},
        previous=asked.decision,
        now=END + timedelta(minutes=5),
    )
    assert later.events == []  # the same decision: no second Event
    assert later.decision is not None and later.decision.outcome is DecisionOutcome.DEFER


def test_a_stated_decision_is_kept_while_the_evidence_says_the_same_and_revised_when_it_moves() -> None:
    settled = [ScopeStatus(name=name, state=ScopeState.SPECULATIVE) for name in NAMES]
    alphas = {"chat": 0.95, "code": 0.95}
    first = decide(pilot(alphas), spec=SPEC, scopes=settled, fallbacks=[], annotations={}, previous=None, now=END)
    assert first.decision is not None and first.decision.outcome is DecisionOutcome.ADOPT_WITHIN_ENVELOPE
    assert [event.reason for event in first.events] == [Reason.DECISION_STATED]

    more = pilot(alphas, seed=7)  # other windows at the same loads: the same decision, other figures
    anew = decide(more, spec=SPEC, scopes=settled, fallbacks=[], annotations={}, previous=None, now=END)
    assert anew.decision is not None and anew.decision.reasons != first.decision.reasons
    same = decide(
        more, spec=SPEC, scopes=first.scopes, fallbacks=[], annotations={}, previous=first.decision, now=END + HOUR
    )
    assert same.events == [] and same.decision is first.decision and same.scopes == first.scopes

    worse = pilot({"chat": 0.95, "code": 0.1})  # code never wins now
    revised = decide(
        worse, spec=SPEC, scopes=first.scopes, fallbacks=[], annotations={}, previous=first.decision, now=END + HOUR
    )
    assert [event.reason for event in revised.events] == [Reason.DECISION_REVISED]
    assert revised.events[0].message.startswith("code: AdoptWithinEnvelope -> Defer")
    assert revised.decision is not None and revised.decision.decided_at == END + HOUR
    assert {scope.name: scope.decision.outcome for scope in revised.scopes if scope.decision} == {
        "chat": DecisionOutcome.ADOPT_WITHIN_ENVELOPE,
        "code": DecisionOutcome.DEFER,
    }


def test_a_rehearsal_that_ended_after_the_decision_restates_it_once_its_windows_are_in() -> None:
    settled = [ScopeStatus(name=name, state=ScopeState.SPECULATIVE) for name in NAMES]
    alphas = {"chat": 0.95, "code": 0.95}
    first = decide(pilot(alphas), spec=SPEC, scopes=settled, fallbacks=[], annotations={}, previous=None, now=END)
    assert first.decision is not None
    more = pilot(alphas, seed=7)  # the same outcome within its noise: no revision by itself
    ended = RehearsalStatus(phase=RehearsalPhase.COMPLETED, scopes=["chat"], finished_at=END + HOUR)

    def later(at: datetime, rehearsal: RehearsalStatus | None = ended) -> list[Event]:
        assert first.decision is not None
        return decide(
            more,
            spec=SPEC,
            scopes=first.scopes,
            fallbacks=[],
            annotations={},
            previous=first.decision,
            rehearsal=rehearsal,
            now=at,
        ).events

    assert later(END + HOUR + SPEC.analysis.window / 2) == [], "its last window is not recorded yet"
    assert later(END + 2 * HOUR, rehearsal=None) == []
    restated = later(END + HOUR + SPEC.analysis.window)
    assert [event.reason for event in restated] == [Reason.DECISION_REVISED]
    assert restated[0].message.startswith("the peak rehearsal measured loads the live stages had not reached")
    # stated after the rehearsal ended: back to moving on what `revisions` counts
    again = decide(
        more,
        spec=SPEC,
        scopes=first.scopes,
        fallbacks=[],
        annotations={},
        previous=first.decision.model_copy(update={"decided_at": END + 2 * HOUR}),
        rehearsal=ended,
        now=END + 3 * HOUR,
    )
    assert again.events == []


def test_a_window_the_weight_changed_within_stays_out_of_the_load_bins_and_production_is_watched() -> None:
    name = NAMES[0]
    measured = {name: Measured(window(name), 30)}
    summary = WindowSummary(end=END, verdict=Verdict.PASS)
    promoted = ScopeStatus(
        name=name, state=ScopeState.PILOTING, last_window=summary, stage_started_at=END - timedelta(seconds=10)
    )
    loads = {a: ArmLoad(offered_per_replica=2.0) for a in Arm} | {Arm.BASELINE: ArmLoad(offered_per_replica=6.0)}
    load_ = WindowLoad(arms=loads, arrival_rate=2.0)

    def recorded(status: ScopeStatus) -> Evidence:
        return record(
            fresh_for(None, {}, Arm.CONTROL),
            spec=SPEC,
            measured=measured,
            loads={name: load_},
            scopes=[status],
            kv_blocks={},
            gpus={},
            replicas={},
        )

    straddled = recorded(promoted).scopes[name]
    assert straddled.windows == 1 and straddled.unsettled == 1 and straddled.bins == {}
    assert straddled.totals[Arm.SPECULATIVE].routed == 30  # the totals still count its requests
    settled = recorded(promoted.model_copy(update={"stage_started_at": END - timedelta(minutes=5)}))
    assert settled.scopes[name].unsettled == 0
    assert set(settled.scopes[name].bins) == {Arm.SPECULATIVE, Arm.CONTROL}
    # the compared pair shares one bin, at their mean load; production's 6 per replica is watched
    assert {tuple(cells) for cells in settled.scopes[name].bins.values()} == {(load_bin(2.0),)}
    assert settled.production == {load_bin(6.0): 1}
    # an inconclusive window is counted, and nothing it measured is kept
    inconclusive = promoted.model_copy(
        update={"stage_started_at": None, "last_window": WindowSummary(end=END, verdict=Verdict.INCONCLUSIVE)}
    )
    held = recorded(inconclusive).scopes[name]
    assert held.windows == 1 and held.verdicts == {Verdict.INCONCLUSIVE: 1}
    assert held.bins == {} and held.totals == {}


def test_a_rolled_back_scopes_rehearsal_windows_are_binned_alone_once_they_began_after_its_flip() -> None:
    name = NAMES[0]
    measured = {name: Measured(window(name), 30)}
    load_ = WindowLoad(arms={a: ArmLoad(offered_per_replica=4.0) for a in Arm}, arrival_rate=2.0)

    def recorded(flipped_at: datetime) -> Evidence:
        status = ScopeStatus(
            name=name,
            state=ScopeState.ROLLED_BACK,
            stage=1,
            weight=0,
            stage_started_at=END - HOUR,
            last_transition_time=flipped_at,
            last_window=WindowSummary(end=END, verdict=Verdict.FAIL),
        )
        return record(
            fresh_for(None, {}, Arm.CONTROL),
            spec=SPEC,
            measured=measured,
            loads={name: load_},
            scopes=[status],
            kv_blocks={},
            gpus={},
            replicas={},
            rehearsing=[name],
        )

    # its live requests from before the flip are in the window: not the rehearsal's load
    straddled = recorded(END - timedelta(seconds=10)).scopes[name]
    assert straddled.unsettled == 1 and straddled.bins == {} and straddled.totals == {}
    rehearsed = recorded(END - HOUR).scopes[name]
    assert set(rehearsed.bins) == {Arm.SPECULATIVE, Arm.CONTROL} and rehearsed.rehearsed == {load_bin(4.0): 1}
    assert rehearsed.totals == {}, "the totals describe its live traffic"


def test_when_another_scope_leaves_the_speculative_arm_the_others_start_again() -> None:
    chat, code = NAMES[0], NAMES[1]
    load_ = WindowLoad(arms={a: ArmLoad(offered_per_replica=2.0) for a in Arm}, arrival_rate=2.0)
    summary = WindowSummary(end=END, verdict=Verdict.PASS)
    scopes = [
        ScopeStatus(name=name, state=ScopeState.PILOTING, weight=25, last_window=summary) for name in (chat, code)
    ]

    def recorded(
        evidence: Evidence,
        end: datetime,
        flipped: tuple[str, ...] = (),
        draining: tuple[str, ...] = (),
        off: tuple[str, ...] = (),
    ) -> Evidence:
        measured = {name: Measured(window(name, end), 30) for name in (chat, code)}
        judged = [
            s.model_copy(
                update={
                    "last_window": WindowSummary(end=end, verdict=Verdict.PASS),
                    "weight": 0 if s.name in (*flipped, *off) else s.weight,
                }
            )
            for s in scopes
        ]
        return record(
            evidence,
            spec=SPEC,
            measured=measured,
            loads=dict.fromkeys(measured, load_),
            scopes=judged,
            kv_blocks={},
            gpus={},
            replicas={},
            flipped=flipped,
            draining=draining,
        )

    before = recorded(fresh_for(None, {}, Arm.CONTROL), END)
    assert before.scopes[chat].bins
    after = recorded(before, END + timedelta(seconds=10), flipped=(code,))
    assert after.scopes[chat].bins == {} and after.scopes[chat].totals == {}
    assert after.scopes[chat].mix_changed_at == END + timedelta(seconds=10) and after.scopes[chat].windows == 2
    assert after.scopes[code].bins, "the flipped scope keeps what it measured"
    straddling = recorded(after, END + timedelta(seconds=20))  # began before the flip: totals only
    assert straddling.scopes[chat].bins == {} and straddling.scopes[chat].unsettled == 1
    # wholly after it, but the flipped scope's requests still finish on the arm: chat starts again from there
    drained = recorded(straddling, END + timedelta(seconds=50), draining=(code,))
    assert drained.scopes[chat].bins == {} and drained.scopes[chat].unsettled == 2
    assert drained.scopes[chat].mix_changed_at == END + timedelta(seconds=50)
    assert recorded(drained, END + timedelta(seconds=60)).scopes[chat].bins == {}  # began before the drain ended
    clear = recorded(drained, END + timedelta(seconds=80))  # the arm has run without them all window
    assert clear.scopes[chat].bins
    # code is off the arm when chat leaves it too: code keeps the bins that back its own flip
    later = recorded(clear, END + timedelta(seconds=90), flipped=(chat,), off=(code,))
    assert later.scopes[code].bins and later.scopes[code].mix_changed_at is None


def test_probe_counts_are_kept_per_scope_kind_and_arm_and_survive_an_operator_restart() -> None:
    _, spec = load(ROOT / "manifests/examples/probe-cases.yaml")
    cases = scope_cases(spec)
    greedy = next(case for case in cases["extraction"] if case.kind is ProbeKind.GREEDY)
    structured = next(case for case in cases["extraction"] if case.kind is ProbeKind.STRUCTURED)

    def probed(rounds: int, since: datetime) -> ProbeResult:
        # per round: the speculative text equal to the baseline's twice, the baseline's equal to its repeat once
        greedy_tally = CaseTally(ProbeKind.GREEDY, rounds, rounds, 2 * rounds, 2 * rounds, 2 * rounds)
        answers = CaseTally(ProbeKind.STRUCTURED, rounds, 2 * rounds, 2 * rounds, 2 * rounds - 1, 2 * rounds)
        return ProbeResult({case_key(greedy): greedy_tally, case_key(structured): answers}, since=since)

    def recorded(evidence: Evidence, probe: ProbeResult) -> Evidence:
        return record(
            evidence, spec=spec, measured={}, loads={}, scopes=[], kv_blocks={}, gpus={}, replicas={}, probe=probe
        )

    first = recorded(Evidence(), probed(2, END))
    again = recorded(first, probed(3, END))  # the same run, one round on: its counts replace its own
    counts = again.scopes["extraction"].probes.counts()
    assert counts[ProbeKind.GREEDY] == ProbeCounts(
        rounds=3, baseline=ProbeArm(checks=6, passed=3), speculative=ProbeArm(checks=6, passed=6)
    )
    assert counts[ProbeKind.STRUCTURED].speculative == ProbeArm(checks=6, passed=5)
    assert set(again.scopes) == {"extraction"}  # the other scopes' cases have not answered yet
    restarted = load_evidence(dump(again))  # the ConfigMap, read back by a new operator process
    assert restarted == again
    later = recorded(restarted, probed(1, END + HOUR))  # the new process's first round
    counts = later.scopes["extraction"].probes.counts()
    assert counts[ProbeKind.GREEDY] == ProbeCounts(
        rounds=4, baseline=ProbeArm(checks=8, passed=4), speculative=ProbeArm(checks=8, passed=8)
    )
    assert recorded(later, probed(1, END + HOUR)) == later


def test_the_findings_of_the_newest_stores_alone_are_kept() -> None:
    """A pilot's store moves on with every window, so a long run decides ever new stores: no more than
    `DECIDED_KEPT` of them stay in memory, and the newest is decided once however often it is asked."""
    settled = [ScopeStatus(name=name, state=ScopeState.SPECULATIVE) for name in NAMES]
    alphas = {"chat": 0.95, "code": 0.95}
    _findings.cache_clear()
    stores = [pilot(alphas, seed=seed, per_load=1) for seed in range(DECIDED_KEPT + 4)]
    for store in stores:
        decide(store, spec=SPEC, scopes=settled, fallbacks=[], annotations={}, previous=None, now=END)
    assert _findings.cache_info().currsize == DECIDED_KEPT
    decided = _findings.cache_info().misses
    decide(stores[-1], spec=SPEC, scopes=settled, fallbacks=[], annotations={}, previous=None, now=END + HOUR)
    assert _findings.cache_info().misses == decided
