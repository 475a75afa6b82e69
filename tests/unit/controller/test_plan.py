"""`plan` field by field, on snapshots taken from a pilot the harness drove to the state at hand."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from specpilot.analysis.rollout import EventType
from specpilot.api.pilot import ABORT_ANNOTATION, PROMOTE_ANNOTATION
from specpilot.api.reasons import Reason
from specpilot.api.status import Verdict
from specpilot.controller.core.plan import INVALID_SPEC_TICK, Confirm, Plan, flip_served, plan, refused
from specpilot.controller.core.snapshot import Snapshot, Written, read_pilot
from specpilot.controller.core.teardown import teardown
from specpilot.controller.core.windows import windows_due
from specpilot.testing.harness import Harness, pilot_doc
from specpilot.wire.names import Arm

INTERVAL = timedelta(seconds=10)


def snapshot(h: Harness, **changes: object) -> Snapshot:
    """What the shell would gather for `h`'s pilot now."""
    memory = h.controller.memory(h.ref)
    taken = Snapshot(
        pilot=read_pilot(h.body, last_written=memory.status),
        seen=h.observe(),
        now=h.clock.now,
        router_image="specpilot/specpilot:test",
        measurements=memory.measurements,
        evidence=h.stored_evidence,
        written=memory.written,
    )
    return replace(taken, **changes)  # type: ignore[arg-type]


async def warm() -> Harness:
    h = Harness(pilot_doc())
    await h.reconcile()
    h.ready_pods = True
    await h.reconcile()
    for _ in range(3):
        await h.step(INTERVAL.total_seconds())
    return h


async def collected(h: Harness) -> Snapshot:
    h.clock.advance(INTERVAL.total_seconds())
    h.send(INTERVAL.total_seconds())
    await h.collect()
    return snapshot(h)


async def test_a_new_pilot_applies_every_object_dry_run_first_with_the_table_for_its_owner() -> None:
    h = Harness(pilot_doc())
    first = plan(snapshot(h))
    kinds = [step.obj["kind"] for step in first.applies]
    assert kinds == [
        *("ServiceAccount", "Role", "RoleBinding", "ConfigMap"),  # the router's access, then the table
        *["Service"] * 4,  # baseline, speculative, control, alternative
        *["Deployment"] * 4,  # the arms, before the router that sends them traffic
        *("Service", "Deployment"),
    ]
    tables = [step for step in first.applies if step.table is not None]
    assert [step.key for step in tables] == [("ConfigMap", "demo-routes")] and not tables[0].dry_run
    binding = next(step for step in first.applies if step.obj["kind"] == "RoleBinding")
    assert not binding.dry_run, "a binding to a Role not there yet cannot be dry-run"
    assert all(step.dry_run for step in first.applies if step.table is None and step is not binding)
    assert first.status is not None and first.status_changed
    assert first.status.routes is not None and first.status.routes.generation == 1
    assert [event.reason.value for event in first.events][:1] == ["PilotCreated"]
    assert first.delay == INTERVAL
    assert (first.confirm, first.clear_annotations, first.judged, first.flipped) == (None, (), (), ())
    assert first.evidence is not None and not first.evidence.scopes


async def test_what_was_applied_and_observed_is_not_applied_again_until_the_table_needs_refreshing() -> None:
    h = Harness(pilot_doc())
    await h.reconcile()
    await h.reconcile()
    again = plan(snapshot(h))
    assert again.applies == ()
    assert not again.status_changed
    later = plan(snapshot(h, now=h.clock.now + INTERVAL * 0.9))
    assert [step.key for step in later.applies] == [("ConfigMap", "demo-routes")]


async def test_a_child_deleted_after_it_was_applied_is_put_back_with_an_event() -> None:
    h = Harness(pilot_doc())
    await h.reconcile()
    del h.kube.objects[("Service", "team-a", "demo-router")]
    back = plan(snapshot(h))
    assert [step.key for step in back.applies] == [("Service", "demo-router")]
    assert [(e.reason.value, e.message) for e in back.events if e.reason.value == "ChildRestored"] == [
        ("ChildRestored", "Service demo-router was edited or deleted; put back")
    ]


async def test_after_a_restart_nothing_is_known_written_so_deployments_are_applied_again_without_events() -> None:
    h = Harness(pilot_doc())
    await h.reconcile()
    await h.reconcile()
    fresh = plan(snapshot(h, written=Written()))
    assert {step.key[0] for step in fresh.applies} == {"Deployment", "ConfigMap"}
    assert not any(e.reason.value == "ChildRestored" for e in fresh.events)


async def test_due_windows_are_judged_into_scopes_evidence_and_counts() -> None:
    h = await warm()
    taken = await collected(h)
    assert set(windows_due(taken)) == {"chat", "code"}
    judged = plan(taken)
    assert dict(judged.judged) == {"chat": Verdict.PASS, "code": Verdict.PASS}
    assert judged.evidence is not None and set(judged.evidence.scopes) == {"chat", "code"}
    assert judged.status is not None
    assert all(scope.last_window is not None for scope in judged.status.scopes)
    assert judged.flipped == () and judged.confirm is None


async def test_nothing_is_judged_before_the_warm_up_or_without_a_collection() -> None:
    h = Harness(pilot_doc())
    await h.reconcile()
    h.ready_pods = True
    await h.reconcile()
    assert windows_due(await collected(h)) == {}
    h2 = await warm()
    assert windows_due(snapshot(h2, measurements=replace(snapshot(h2).measurements, collected_at=None))) == {}


async def test_a_flip_asks_the_routers_to_confirm_its_generation() -> None:
    h = await warm()
    h.traffic.seconds_per_token[Arm.SPECULATIVE] = 0.05
    for _ in range(6):
        taken = await collected(h)
        step = plan(taken)
        if step.flipped:
            break
        await h.reconcile()
    assert step.flipped and set(step.flipped) <= {"chat", "code"}
    assert step.confirm is not None and step.status is not None and step.status.routes is not None
    assert step.confirm.generation == step.status.routes.generation
    assert step.confirm.scopes == step.flipped
    assert step.confirm.routers == tuple(ip for _, ip in taken.seen.ready("router"))
    table = next(s.table for s in step.applies if s.table is not None)
    assert {route.name for route in table.scopes if route.weights.speculative == 0} >= set(step.flipped)


def test_a_flip_served_says_how_soon_the_routers_took_it_or_which_could_not_be_reached() -> None:
    confirm = Confirm(generation=7, scopes=("chat", "code"), routers=("10.0.0.1", "10.0.0.2"))
    taken = flip_served(confirm, seconds=0.0421)
    assert (taken.type, taken.reason) == (EventType.NORMAL, Reason.ROUTES_TAKEN)
    assert taken.message == "routers took routing generation 7 (chat, code on ordinary decoding) 42 ms after the write"
    missed = flip_served(confirm, seconds=5.0, unconfirmed=("10.0.0.2",))
    assert (missed.type, missed.reason) == (EventType.WARNING, Reason.ROUTES_UNCONFIRMED)
    assert missed.message.startswith(
        "router(s) 10.0.0.2 did not confirm routing generation 7 (chat, code on ordinary decoding) within 5 s"
    )


async def test_manual_actions_act_and_their_annotations_are_cleared() -> None:
    h = await warm()
    h.annotate(**{PROMOTE_ANNOTATION: "chat", ABORT_ANNOTATION: "code", "team/other": "kept"})
    acted = plan(snapshot(h))
    assert set(acted.clear_annotations) == {PROMOTE_ANNOTATION, ABORT_ANNOTATION}
    assert acted.status is not None
    by_name = {scope.name: scope for scope in acted.status.scopes}
    assert by_name["chat"].stage == 1 and by_name["code"].weight == 0
    assert acted.judged == (), "a manual action takes the scope instead of its window"


async def test_an_invalid_spec_keeps_what_runs_and_refreshes_its_table() -> None:
    h = Harness(pilot_doc())
    await h.reconcile()
    body = h.body
    body["spec"]["scopes"][1]["match"] = body["spec"]["scopes"][0]["match"]  # repeats chat's match
    pilot = read_pilot(body)
    assert pilot.spec is None and pilot.problems
    invalid = plan(snapshot(h, pilot=pilot))
    assert invalid.delay == INVALID_SPEC_TICK
    assert invalid.status is not None and invalid.status.phase is not None
    assert invalid.status.phase.value == "Degraded"
    assert invalid.applies == (), "the table was written this tick"
    later = plan(snapshot(h, pilot=pilot, now=h.clock.now + INVALID_SPEC_TICK))
    assert [(step.key, step.dry_run) for step in later.applies] == [(("ConfigMap", "demo-routes"), False)]
    assert later.evidence is None and later.clear_annotations == ()


async def test_a_refused_object_keeps_nothing_this_tick_judged_or_acted_on() -> None:
    h = await warm()
    h.annotate(**{PROMOTE_ANNOTATION: "chat"})
    taken = await collected(h)
    out: Plan = refused(taken, "422: Deployment.apps is invalid")
    assert out.status is not None
    invalid = next(c for c in out.status.conditions if c.type == "InvalidSpec")
    assert invalid.status == "True" and "422: Deployment.apps is invalid" in invalid.message
    assert (out.applies, out.evidence, out.clear_annotations, out.judged, out.confirm) == ((), None, (), (), None)
    assert out.status.scopes == taken.pilot.status.scopes  # type: ignore[union-attr]


async def test_a_pilot_being_deleted_is_left_to_its_teardown() -> None:
    h = Harness(pilot_doc())
    await h.reconcile()
    body = h.body
    body["metadata"]["deletionTimestamp"] = "2026-12-01T12:00:00Z"
    left = plan(snapshot(h, pilot=read_pilot(body)))
    assert left.status is None and left.applies == () and left.delay == INVALID_SPEC_TICK


async def test_teardown_flips_first_then_arms_and_router_then_the_rest_once_the_router_is_gone() -> None:
    h = await warm()
    steps = teardown(h.ref, h.observe(), h.clock.now)
    assert steps.flip is not None and all(route.weights.baseline == 100 for route in steps.flip.scopes)
    assert steps.generation == steps.flip.generation
    assert [e.reason.value for e in steps.events] == ["Teardown"]
    assert [child.name for child in steps.first] == [
        "demo-speculative",
        "demo-control",
        "demo-alternative",
        "demo-router",
    ]
    assert steps.draining
    assert [child.name for child in steps.last][:1] == ["demo-baseline"]
    assert {child.kind for child in steps.last} == {"Deployment", "Service", "ConfigMap", "RoleBinding", "Role",
                                                    "ServiceAccount"}  # fmt: skip


async def test_a_tick_works_out_the_engines_figures_once_for_every_scope_window_load_and_production() -> None:
    h = await warm()
    taken = await collected(h)
    measurements = taken.measurements
    readings = measurements.readings
    calls: list[tuple[object, ...]] = []

    class Counted:
        def engines(self, **span: object) -> object:
            calls.append(tuple(span.values()))
            return readings.engines(**span)  # type: ignore[arg-type]

        def kv_blocks(self) -> dict[Arm, int]:
            return readings.kv_blocks()

        def block_size(self) -> int | None:
            return readings.block_size()

    counted = replace(measurements, readings=Counted())  # type: ignore[arg-type]
    judged = plan(replace(taken, measurements=counted))
    assert dict(judged.judged) == {"chat": Verdict.PASS, "code": Verdict.PASS}
    assert len(calls) == 1, calls


async def test_while_a_scope_off_the_arm_still_finishes_requests_on_it_the_others_start_again() -> None:
    h = await warm()
    h.annotate(**{ABORT_ANNOTATION: "code"})
    await h.step(INTERVAL.total_seconds())  # code leaves the speculative arm
    h.clock.advance(INTERVAL.total_seconds())
    h.send(INTERVAL.total_seconds())
    # one of code's requests, started before the flip, finishes on the speculative arm in this window
    h.samples.samples.append(replace(h.samples.samples[-1], seq=next(h.seq), scope="code", arm=Arm.SPECULATIVE))
    await h.collect()
    taken = snapshot(h)
    before = taken.evidence.scopes["chat"].mix_changed_at if taken.evidence is not None else None
    drained = plan(taken)
    assert ("chat", Verdict.PASS) in drained.judged and drained.evidence is not None
    chat = drained.evidence.scopes["chat"]
    assert chat.mix_changed_at == taken.measurements.collected_at != before
    assert chat.bins == {}, "the window the drain ran in stays out of the load bins"
