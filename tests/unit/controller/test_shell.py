"""The controller's shell on fake ports and a moved clock: a pilot from creation to teardown.

Each scenario drives the real `Controller` (gather, plan, apply, land) against the fakes in
`specpilot.testing.fakes`; nothing sleeps and nothing listens on a socket.
"""

from __future__ import annotations

import asyncio
import copy
import json
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pytest

from specpilot.analysis.evidence import ProbeArm, ProbeCounts
from specpilot.analysis.proportions import Sequential
from specpilot.analysis.quality import scope_cases
from specpilot.api.pilot import ABORT_ANNOTATION, KIND, PROMOTE_ANNOTATION, RESUME_ANNOTATION
from specpilot.api.spec import ProbeKind, SpeculationPilotSpec
from specpilot.controller.kube import ApiError
from specpilot.testing.fakes import Json
from specpilot.testing.harness import Harness, climbing, pilot_doc, staged_climb_doc
from specpilot.wire.names import STEPCOST_KEY, Arm
from specpilot.wire.routes import ArmWeights

INTERVAL = 10.0  # the local demo's analysis interval
MEASURED = Path(__file__).resolve().parents[3] / "operator/specpilot/mockvllm/profiles/h200-stepcost.json"


async def warm(h: Harness) -> None:
    """Created, arms ready, and warmed up: both scopes piloting at their first stage."""
    await h.reconcile()
    h.ready_pods = True
    await h.reconcile()
    for _ in range(3):
        await h.step(INTERVAL)


def weights(h: Harness) -> dict[str, int]:
    table = h.table()
    assert table is not None
    return {route.name: route.weights.speculative for route in table.scopes}


async def test_creation_dry_runs_every_change_first_then_applies_and_writes_status_once() -> None:
    h = Harness(pilot_doc())
    assert await h.reconcile() == INTERVAL
    calls = h.kube.calls
    first_apply = next(i for i, (verb, _, _) in enumerate(calls) if verb == "apply")
    assert all(verb == "dry-run" for verb, _, _ in calls[:first_apply])
    applied = set(h.kube.verbs("apply"))
    # Everything but the routing table (its owner writes it), a binding to a Role not there yet, and
    # the evidence store (written after the status).
    unchecked = {("ConfigMap", "demo-routes"), ("RoleBinding", "demo-router"), ("ConfigMap", "demo-evidence")}
    assert set(h.kube.verbs("dry-run")) == applied - unchecked
    assert h.kube.calls[-1] == ("apply", "ConfigMap", "demo-evidence")
    assert {kind for kind, _ in applied} == {
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "Service",
        "Deployment",
    }
    assert h.kube.verbs("status") == [("SpeculationPilot", "demo")]
    assert h.reasons()[0] == "PilotCreated"
    assert h.status()["phase"] == "Progressing"
    assert h.status()["routes"]["generation"] == 1
    assert weights(h) == {"chat": 0, "code": 0}

    await h.reconcile()  # the Deployments are observed now: the conditions say how far they are
    before = len(h.kube.calls)
    await h.reconcile()
    assert h.kube.calls[before:] == [], "a tick with nothing new applies and writes nothing"


async def test_arms_ready_warm_up_then_windows_judged_and_a_scope_promoted() -> None:
    h = Harness(pilot_doc())
    await h.reconcile()
    h.ready_pods = True
    await h.reconcile()
    ready = {c["type"]: c["status"] for c in h.status()["conditions"]}
    assert ready["ArmsReady"] == "True" and ready["Ready"] == "True"
    assert weights(h) == {"chat": 0, "code": 0}, "no traffic moves before the warm-up"

    await h.step(INTERVAL)
    await h.step(INTERVAL)
    assert weights(h) == {"chat": 25, "code": 25}
    assert h.scope("chat")["state"] == "Piloting"

    for _ in range(6):
        await h.step(INTERVAL)
    chat = h.scope("chat")
    assert chat["lastWindow"]["verdict"] == "Pass", chat
    assert chat["stage"] == 1 and weights(h)["chat"] == 33
    assert "ScopePromoted" in h.reasons()
    verdicts = h.controller.metrics.verdicts.labels("team-a", "demo", "chat", "Pass")
    assert verdicts._value.get() >= 3


async def test_the_alternative_arm_takes_the_same_share_and_its_windows_are_kept_beside_the_control_arms() -> None:
    h = Harness(pilot_doc())
    await warm(h)
    table = h.table()
    assert table is not None
    chat = table.scope("chat")
    assert chat is not None and chat.weights == ArmWeights(baseline=50, speculative=25, alternative=25)
    assert chat.mirror is Arm.CONTROL  # the control arm serves a copy of each speculative request
    for _ in range(4):
        await h.step(INTERVAL)
    assert h.stored_evidence is not None
    scope = h.stored_evidence.scopes["chat"]
    # The same share on the same GPUs: its windows are binned where the compared pair's are.
    assert set(scope.bins[Arm.ALTERNATIVE]) == set(scope.bins[Arm.CONTROL]) != set()
    assert scope.totals[Arm.ALTERNATIVE].routed > 0


async def test_a_failing_scope_is_flipped_and_the_routers_are_waited_for() -> None:
    h = Harness(pilot_doc())
    await warm(h)
    h.traffic.seconds_per_token[Arm.SPECULATIVE] = 0.05  # 2.5x slower per committed token than the baseline
    for _ in range(8):
        await h.step(INTERVAL)
        if h.scope("code")["weight"] == 0:
            break
    assert h.scope("code")["state"] == "RolledBack"
    assert weights(h)["code"] == 0
    generation = h.status()["routes"]["generation"]
    assert h.routes.awaited[-1][1] == generation
    assert "RoutesTaken" in h.reasons() and "ScopeRolledBack" in h.reasons()
    assert h.status()["fallbacks"][-1]["scope"] == "code"


async def test_a_flip_a_router_never_confirms_is_a_warning_naming_it_and_the_flip_stands() -> None:
    h = Harness(pilot_doc())
    await warm(h)
    h.routes.unreachable = True
    h.traffic.seconds_per_token[Arm.SPECULATIVE] = 0.05
    for _ in range(8):
        await h.step(INTERVAL)
        if h.scope("code")["weight"] == 0:
            break
    assert h.scope("code")["state"] == "RolledBack"
    assert "RoutesTaken" not in h.reasons()
    (router,), _ = h.routes.awaited[-1]
    unconfirmed = [e for e in h.kube.events if e["reason"] == "RoutesUnconfirmed"]
    assert unconfirmed and all(e["type"] == "Warning" for e in unconfirmed)
    assert router in unconfirmed[-1]["message"] and "--max-table-age" in unconfirmed[-1]["message"]
    assert sorted(f["scope"] for f in h.status()["fallbacks"]) == ["chat", "code"]  # one record per flip


async def test_a_restart_from_status_alone_rolls_nothing_out_and_repeats_no_event() -> None:
    h = Harness(pilot_doc())
    await warm(h)
    for _ in range(3):
        await h.step(INTERVAL)
    generations = {key: body["metadata"]["generation"] for key, body in h.children().items()}
    status, events = h.status(), len(h.kube.events)

    h.restart()
    await h.reconcile()
    assert {key: body["metadata"]["generation"] for key, body in h.children().items()} == generations
    assert h.kube.events[events:] == []
    assert h.status()["scopes"] == status["scopes"]
    assert h.status()["routes"] == status["routes"]


async def test_after_a_restart_a_judged_scope_keeps_its_state_until_the_engines_figures_span_a_window() -> None:
    h = Harness(pilot_doc())
    await warm(h)
    for _ in range(3):
        await h.step(INTERVAL)
    judged = {name: h.scope(name)["lastWindow"]["end"] for name in ("chat", "code")}
    states, events = {name: h.scope(name)["state"] for name in judged}, len(h.kube.events)

    h.restart()
    window = SpeculationPilotSpec.model_validate(h.body["spec"]).analysis.window.total_seconds()
    for _ in range(int(window // INTERVAL)):  # the new process's scrapes do not reach back a window yet
        await h.step(INTERVAL)
        assert {name: h.scope(name)["lastWindow"]["end"] for name in judged} == judged
        assert {name: h.scope(name)["state"] for name in judged} == states
    assert "ScopeHeld" not in [event["reason"] for event in h.kube.events[events:]]
    for _ in range(2):
        await h.step(INTERVAL)
    assert all(h.scope(name)["lastWindow"]["end"] > judged[name] for name in judged)  # judged again


async def test_a_manual_action_is_cleared_once_the_status_acting_on_it_landed() -> None:
    h = Harness(pilot_doc())
    await warm(h)
    h.annotate(**{PROMOTE_ANNOTATION: "chat", ABORT_ANNOTATION: "code"})
    await h.reconcile()
    assert h.scope("chat")["stage"] == 1 and h.scope("code")["weight"] == 0
    assert not set(h.body["metadata"].get("annotations") or {}) & {PROMOTE_ANNOTATION, ABORT_ANNOTATION}
    calls = [verb for verb, _, _ in h.kube.calls]
    assert calls.index("annotate") > len(calls) - 1 - calls[::-1].index("status")


async def test_a_refused_object_deploys_nothing_and_keeps_the_manual_action() -> None:
    h = Harness(pilot_doc())
    await warm(h)
    h.kube.refuse["Deployment"] = ApiError(422, "Deployment.apps is invalid: spec.template: bad")
    h.annotate(**{PROMOTE_ANNOTATION: "chat"})
    doc = h.body
    doc["spec"]["engine"]["maxModelLen"] = 8192  # a change that rerenders every arm
    doc["metadata"]["generation"] = 2
    h.kube.objects[("SpeculationPilot", "team-a", "demo")] = doc
    applied = len(h.kube.verbs("apply"))
    await h.reconcile()
    assert len(h.kube.verbs("apply")) == applied
    invalid = next(c for c in h.status()["conditions"] if c["type"] == "InvalidSpec")
    assert invalid["status"] == "True" and "refused a rendered object" in invalid["message"]
    assert PROMOTE_ANNOTATION in h.body["metadata"]["annotations"]


async def test_a_probe_round_runs_once_the_arms_are_ready_and_a_disagreeing_one_flips_every_scope() -> None:
    h = Harness(pilot_doc(probes=True))
    await warm(h)
    assert h.quality.probed == 1, "a round starts once both arms have a ready pod"
    # like with like: the speculative pod against the control arm's, which serves a copy of its requests
    ips = {pod.rsplit("-", 1)[0]: ip for pod, ip in h.pod_ips.items()}
    assert h.quality.probed_pods == (ips["demo-control"], ips["demo-speculative"])
    await h.step(INTERVAL)
    assert h.quality.probed == 2, "the next one a probe interval (30 s) later"
    await h.step(INTERVAL)
    assert h.quality.probed == 2
    h.quality.agreement = 0.5  # below quality.minAgreement (95%)
    for _ in range(4):
        await h.step(INTERVAL)
    for name in ("chat", "code"):
        assert h.scope(name)["state"] == "RolledBack", h.scope(name)
    assert {record["reason"] for record in h.status()["fallbacks"]} == {"QualityRegression"}


async def test_probe_counts_reach_the_evidence_store_and_survive_a_restart() -> None:
    h = Harness(pilot_doc(probes=True))
    await warm(h)
    await h.step(INTERVAL)  # the second round
    cases = len(scope_cases(SpeculationPilotSpec.from_wire(h.body["spec"]))["chat"])

    def greedy() -> ProbeCounts:
        stored = h.stored_evidence
        assert stored is not None
        return stored.scopes["chat"].probes.counts()[ProbeKind.GREEDY]

    assert greedy().model_copy(update={"test": Sequential()}) == ProbeCounts(
        rounds=2,
        baseline=ProbeArm(checks=200 * cases, passed=200 * cases),
        speculative=ProbeArm(checks=200 * cases, passed=200 * cases),
    )
    assert greedy().test.rounds == 2
    h.restart()  # the rounds so far were in the old process's memory; the ConfigMap kept their counts
    h.quality.agreement = 0.99
    for _ in range(4):
        await h.step(INTERVAL)  # two more rounds, 30 s apart
    assert greedy().rounds == 4 and greedy().speculative == ProbeArm(checks=400 * cases, passed=398 * cases)
    assert greedy().test.rounds == 4  # the probe tests go on from the rounds before the restart


async def test_status_then_events_then_the_evidence_they_describe() -> None:
    h = Harness(pilot_doc(), evidence_in_memory=True)
    await h.reconcile()
    h.ready_pods = True
    await h.reconcile()
    start = len(h.kube.calls)
    await h.step(INTERVAL)
    await h.step(INTERVAL)  # warm: the scopes start piloting, with an Event each
    verbs = [verb for verb, _, _ in h.kube.calls[start:]]
    assert verbs.count("event") >= 2, verbs
    last = len(verbs) - 1 - verbs[::-1].index("status")
    assert verbs[last:] == ["status", *["event"] * (len(verbs) - last - 2), "store"], verbs
    for _ in range(2):
        await h.step(INTERVAL)
    assert h.scope("chat")["lastWindow"] is not None
    stored = h.evidence.kept[("team-a", "demo")]
    assert "chat" in stored.scopes and "code" in stored.scopes


async def test_a_pilot_calling_a_host_outside_the_policy_deploys_nothing_and_calls_nothing() -> None:
    doc = pilot_doc(webhooks=["business"])
    doc["spec"]["quality"]["webhooks"][0]["url"] = "http://169.254.169.254/latest/meta-data"
    h = Harness(doc)
    assert await h.reconcile() == 10.0  # the invalid spec's tick
    invalid = next(c for c in h.status()["conditions"] if c["type"] == "InvalidSpec")
    assert invalid["status"] == "True"
    assert "spec.quality.webhooks[0].url: the operator may not call 169.254.169.254" in invalid["message"]
    assert h.kube.verbs("apply") == [] and h.kube.verbs("dry-run") == []
    await h.collect()
    assert h.quality.asked == [] and h.controller.memory(h.ref).measurements.collected_at is None


async def judged_tick(*, interleave: bool) -> Harness:
    """A tick whose windows are due and whose webhook answers only once `interleave` let another
    collection land: one that reads the samples the tick's own collection missed."""
    h = Harness(pilot_doc(webhooks=["business"]))
    await warm(h)
    h.clock.advance(INTERVAL)
    h.send(INTERVAL)
    h.samples.failing = True  # this collection cannot read the routers' samples...
    await h.collect()
    h.samples.failing = False
    h.quality.gate = asyncio.Event()
    asked = len(h.quality.asked)
    tick = asyncio.create_task(h.reconcile())
    await h.quality.until_asked(asked + 2)  # both scopes' windows are out to the webhook
    if interleave:
        await h.collect()  # ...which this one, landing while the webhook is out, reads
    h.quality.gate.set()
    await tick
    return h


async def test_a_collection_landing_while_a_judged_window_awaits_a_webhook_changes_nothing_judged() -> None:
    alone, interleaved = await judged_tick(interleave=False), await judged_tick(interleave=True)
    for h in (alone, interleaved):
        for name in ("chat", "code"):
            window = h.scope(name)["lastWindow"]
            asked = h.quality.asked[-1]["window"]["end"]
            assert datetime.fromisoformat(window["end"]) == datetime.fromisoformat(asked)
            assert window["verdict"] == "Inconclusive", window  # the samples it was judged on had a gap
    assert interleaved.status() == alone.status()
    assert interleaved.children()[("ConfigMap", "demo-routes")] == alone.children()[("ConfigMap", "demo-routes")]
    evidence = ("ConfigMap", "team-a", "demo-evidence")
    assert interleaved.kube.objects[evidence] == alone.kube.objects[evidence]


async def test_teardown_flips_waits_for_the_routers_then_removes_the_arms_router_and_baseline_in_order() -> None:
    h = Harness(pilot_doc())
    await warm(h)
    assert await h.delete() is False, "the router's pods still drain"
    assert weights(h) == {"chat": 0, "code": 0}
    assert h.routes.awaited[-1][1] == h.table().generation  # type: ignore[union-attr]
    assert "Teardown" in h.reasons()
    deleted = [name for _, name in h.kube.verbs("delete")]
    assert deleted == ["demo-speculative", "demo-control", "demo-alternative", "demo-router"]

    assert await h.delete() is True
    deleted = [name for _, name in h.kube.verbs("delete")]
    assert deleted[4:9] == ["demo-speculative", "demo-control", "demo-alternative", "demo-router", "demo-baseline"]
    assert not h.children()
    assert h.controller.memories == {}


async def test_promotion_pauses_while_production_is_saturated_and_the_status_says_so() -> None:
    h = Harness(pilot_doc())
    await warm(h)
    conditions = {c["type"]: c for c in h.status()["conditions"]}
    assert conditions["Controlled"]["status"] == "True" and conditions["Controlled"]["reason"] == "ControlArm"
    queued = h.engines.figures[Arm.BASELINE]
    h.engines.figures[Arm.BASELINE] = replace(queued, waiting=3.0)  # three requests queued on its one replica
    for _ in range(8):
        await h.step(INTERVAL)
    saturated = {c["type"]: c for c in h.status()["conditions"]}["ProductionSaturated"]
    assert saturated["status"] == "True" and "3.0 requests waiting per replica" in saturated["message"]
    assert "ProductionSaturated" in h.reasons()
    assert h.scope("chat")["stage"] == 0 and weights(h)["chat"] == 25, "no promotion while production queues"
    assert h.scope("chat")["lastWindow"]["verdict"] == "Pass"

    h.engines.figures[Arm.BASELINE] = queued
    for _ in range(4):
        await h.step(INTERVAL)
    assert {c["type"]: c["status"] for c in h.status()["conditions"]}["ProductionSaturated"] == "False"
    assert "ProductionHeadroom" in h.reasons()
    assert h.scope("chat")["stage"] == 1 and weights(h)["chat"] == 33


async def test_a_baseline_at_the_edge_of_saturation_leaves_the_condition_and_its_events_alone() -> None:
    h = Harness(pilot_doc())
    await warm(h)
    calm = h.engines.figures[Arm.BASELINE]
    edge = replace(calm, waiting=1.0)  # "1.0 requests waiting per replica": saturated by a hair
    for i in range(12):
        h.engines.figures[Arm.BASELINE] = edge if i % 2 == 0 else calm
        await h.step(INTERVAL)
    saturated = {c["type"]: c for c in h.status()["conditions"]}["ProductionSaturated"]
    assert saturated["status"] == "False", saturated
    assert "ProductionSaturated" not in h.reasons() and "ProductionHeadroom" not in h.reasons()
    assert h.status()["production"]["streak"] == 0, "the last window had headroom"

    h.engines.figures[Arm.BASELINE] = edge
    for _ in range(2):  # spec.baseline.saturation.enterAfter: 2
        await h.step(INTERVAL)
    assert h.reasons().count("ProductionSaturated") == 1
    h.engines.figures[Arm.BASELINE] = calm
    for _ in range(2):
        await h.step(INTERVAL)
    assert "ProductionHeadroom" not in h.reasons(), "two windows of headroom are not yet three"
    await h.step(INTERVAL)
    assert h.reasons().count("ProductionHeadroom") == 1


async def test_without_a_control_arm_status_says_so_and_the_baseline_is_compared() -> None:
    doc = pilot_doc()
    doc["spec"]["control"] = {"enabled": False}
    del doc["spec"]["alternative"]  # judged against the control arm only
    h = Harness(doc)
    await warm(h)
    for _ in range(6):
        await h.step(INTERVAL)
    conditions = {c["type"]: c for c in h.status()["conditions"]}
    assert conditions["Controlled"]["status"] == "False" and conditions["Controlled"]["reason"] == "NoControlArm"
    assert "demo-control" not in {name for _, name in h.children()}
    assert h.scope("chat")["stage"] == 1, "judged against the production baseline, and promoted"
    assert h.stored_evidence is not None and h.stored_evidence.compared is Arm.BASELINE


def workload_pilot() -> tuple[Harness, Json]:
    """The demo's pilot on a Deployment the team runs (two replicas, a sidecar beside the engine)."""
    doc = pilot_doc()
    spec = doc["spec"]
    engine = spec.pop("engine")
    spec.pop("alternative")
    spec["workloadRef"] = {"name": "vllm"}
    labels = {"app": "vllm", "tier": "serving"}
    deployment: Json = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "vllm", "namespace": "team-a", "generation": 3},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "vllm"}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {"name": "shipper", "image": "fluent-bit:3"},
                        {
                            "name": "vllm",
                            "image": engine["image"],
                            "command": engine["command"],
                            "args": [engine["model"], "--served-model-name", engine["servedModelName"]],
                        },
                    ]
                },
            },
        },
        "status": {
            "observedGeneration": 3,
            "replicas": 2,
            "updatedReplicas": 2,
            "readyReplicas": 2,
            "availableReplicas": 2,
        },
    }
    h = Harness(doc)
    h.kube.objects[("Deployment", "team-a", "vllm")] = deployment
    for index in range(2):
        ready = {"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-01T00:00:00Z"}
        h.kube.objects[("Pod", "team-a", f"vllm-{index}")] = {
            "metadata": {"name": f"vllm-{index}", "namespace": "team-a", "labels": labels},
            "status": {"podIP": f"198.18.1.{index + 1}", "conditions": [ready]},
        }
    return h, copy.deepcopy(deployment)


async def test_a_workload_is_copied_never_edited_and_its_own_pods_are_the_baseline() -> None:
    h, before = workload_pilot()
    await warm(h)
    assert weights(h) == {"chat": 25, "code": 25}, "its pods are production's ready baseline"
    deployments = {name for kind, name in h.kube.verbs("apply") if kind == "Deployment"}
    assert deployments == {"demo-speculative", "demo-control", "demo-router"}
    assert ("Service", "demo-baseline") in h.kube.verbs("apply")
    assert h.kube.objects[("Deployment", "team-a", "vllm")] == before, "the team's Deployment is never edited"
    status = h.status()
    assert status["workload"]["name"] == "vllm" and status["arms"]["baseline"]["readyReplicas"] == 2
    speculative = h.kube.objects[("Deployment", "team-a", "demo-speculative")]["spec"]["template"]
    assert "app" not in speculative["metadata"]["labels"], "a copy never joins the team's Deployment"
    assert speculative["metadata"]["labels"]["tier"] == "serving"
    assert [c["name"] for c in speculative["spec"]["containers"]] == ["shipper", "vllm"]

    # The Deployment goes: the pilot says so naming the field, and applies nothing more.
    del h.kube.objects[("Deployment", "team-a", "vllm")]
    applied = len(h.kube.verbs("apply"))
    await h.step(INTERVAL)
    invalid = next(c for c in h.status()["conditions"] if c["type"] == "InvalidSpec")
    assert invalid["status"] == "True" and "spec.workloadRef.name" in invalid["message"]
    assert [v for v in h.kube.verbs("apply")[applied:] if v[0] != "ConfigMap"] == []

    h.kube.objects[("Deployment", "team-a", "vllm")] = copy.deepcopy(before)
    await h.step(INTERVAL)
    while not await h.delete():
        h.clock.advance(1)
    assert h.kube.objects[("Deployment", "team-a", "vllm")] == before, "teardown leaves production as it was"


def with_service(h: Harness) -> Json:
    """The Service clients already use, selecting the baseline's pods on a port of its own."""
    service: Json = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "llm", "namespace": "team-a"},
        "spec": {
            "selector": {"specpilot.io/arm": "baseline", "specpilot.io/pilot": "demo"},
            "ports": [{"name": "web", "port": 80, "targetPort": 8000, "protocol": "TCP"}],
            "type": "ClusterIP",
        },
    }
    h.kube.objects[("Service", "team-a", "llm")] = copy.deepcopy(service)
    return service


def takeover_doc() -> Json:
    doc = pilot_doc()
    doc["spec"]["router"]["takeover"] = {"service": "llm"}
    return doc


async def test_a_taken_over_service_is_recorded_first_re_pointed_next_and_put_back_exactly_on_deletion() -> None:
    h = Harness(takeover_doc())
    original = with_service(h)
    await h.reconcile()
    assert h.status()["takeover"]["phase"] == "Waiting", "not before the routers are ready"
    assert h.kube.objects[("Service", "team-a", "llm")] == original
    h.ready_pods = True
    await h.reconcile()
    recorded = h.status()["takeover"]
    assert recorded["phase"] == "Recorded" and recorded["selector"] == original["spec"]["selector"]
    assert h.kube.objects[("Service", "team-a", "llm")] == original, "recorded in status before any change"
    await h.reconcile()
    taken = h.kube.objects[("Service", "team-a", "llm")]["spec"]
    assert taken["selector"] == {"specpilot.io/pilot": "demo", "app.kubernetes.io/component": "router"}
    assert taken["ports"] == [{"name": "web", "port": 80, "targetPort": 8080, "protocol": "TCP"}]
    assert h.status()["takeover"]["phase"] == "Taken" and "ServiceTakenOver" in h.reasons()

    # A restarted operator puts it back too, before the routers go, and says so once.
    h.restart()
    await h.delete()
    assert h.kube.objects[("Service", "team-a", "llm")] == original
    patches = h.kube.verbs("patch")
    first_delete = next(i for i, (verb, _, _) in enumerate(h.kube.calls) if verb == "delete")
    assert h.kube.calls.index(("patch", "Service", "llm")) < first_delete
    while not await h.delete():
        h.clock.advance(1)
    assert h.kube.verbs("patch") == patches and h.reasons().count("ServiceRestored") == 1


async def test_a_taken_over_service_goes_back_on_an_invalid_spec_and_on_abort_until_a_resume() -> None:
    h = Harness(takeover_doc())
    original = with_service(h)
    h.ready_pods = True
    await warm(h)
    assert h.status()["takeover"]["phase"] == "Taken"
    h.annotate(**{ABORT_ANNOTATION: "*"})
    await h.step(INTERVAL)
    assert h.kube.objects[("Service", "team-a", "llm")] == original and h.status()["takeover"]["phase"] == "Restored"
    await h.step(INTERVAL)
    assert h.status()["takeover"]["phase"] == "Restored", "every scope aborted: it stays with production"
    h.annotate(**{RESUME_ANNOTATION: "chat"})
    for _ in range(3):
        await h.step(INTERVAL)
    assert h.status()["takeover"]["phase"] == "Taken"
    # a spec only the operator can refuse (a draft tensor parallel size the engine cannot run) puts it back
    body = h.kube.objects[(KIND, "team-a", "demo")]
    body["spec"]["speculative"]["draft"]["tensorParallelSize"] = 3
    await h.step(INTERVAL)
    assert any(c["type"] == "InvalidSpec" and c["status"] == "True" for c in h.status()["conditions"])
    assert h.kube.objects[("Service", "team-a", "llm")] == original and h.status()["takeover"]["phase"] == "Restored"


async def test_a_staged_climb_past_the_crossover_is_adopted_below_its_win_with_the_crossover_bracketed() -> None:
    """Speculation's time per committed token rises with its load, the control arm's does not: they cross
    at 4 requests per second per replica. The first stage runs the arms at 2 (a win), the second at 10,
    where the scope flips back; the flip's load is recorded, and the decision adopts below the win with
    the crossover between the two."""
    h = Harness(staged_climb_doc())
    climbing(h.traffic)
    await warm(h)
    for _ in range(40):
        await h.step(INTERVAL)
        if h.status().get("decision"):
            break
    scope = h.scope("code")
    assert scope["state"] == "RolledBack", scope
    (flip,) = h.status()["fallbacks"]
    assert flip["metric"] == "timePerCommittedTokenRatio"
    assert flip["loads"] == {"speculative": pytest.approx(10, rel=0.05), "control": pytest.approx(10, rel=0.05)}
    # and the batch each ran at there: the slower speculative arm held more of the same requests in flight
    assert flip["inFlight"]["speculative"] > flip["inFlight"]["control"] > 0, flip
    decision = scope["decision"]
    assert decision["outcome"] == "AdoptInLowLoadWindows", decision["reasons"]
    assert decision["maxLoad"] == pytest.approx(2, rel=0.05)
    assert decision["crossoverLow"] <= 4 <= decision["crossoverHigh"] <= 10 * 1.05, decision
    assert h.status()["decision"]["outcome"] == "AdoptInLowLoadWindows"


def with_forecast(doc: Json, **forecast: str) -> Json:
    doc["spec"]["analysis"]["forecast"] = forecast
    return doc


def drafting(h: Harness) -> None:
    """The speculative engines accept each of 4 drafts with 0.7 when all before it were, and their committed
    tokens per round vary from window to window (the acceptance's uncertainty)."""
    figures = h.engines.figures[Arm.SPECULATIVE]
    h.engines.figures[Arm.SPECULATIVE] = replace(figures, per_position_acceptance=(0.7, 0.49, 0.343, 0.2401))


async def test_a_pilot_with_a_forecast_profile_gets_each_scopes_forecast_in_status_once_measured() -> None:
    h = Harness(with_forecast(pilot_doc(), profile="h200-llama-3.1-8b-draft-1b"))
    drafting(h)
    await warm(h)
    for index in range(6):
        figures = h.engines.figures[Arm.SPECULATIVE]
        h.engines.figures[Arm.SPECULATIVE] = replace(figures, acceptance_length=2.6 + 0.1 * (index % 3))
        await h.step(INTERVAL)
    forecast = h.scope("chat")["forecast"]
    assert forecast["profile"] == "h200-llama-3.1-8b-draft-1b" and forecast["windows"] >= 3
    assert forecast["crossoverLow"] < forecast["crossoverLoad"] < forecast["crossoverHigh"] < forecast["reach"]
    assert forecast["committed"] == pytest.approx(1 + 0.7 + 0.49 + 0.343 + 0.2401, rel=1e-3)  # four digits
    assert "speculation stops paying near" in forecast["message"] and not forecast["disagrees"]
    assert "ForecastDisagrees" not in h.reasons() and "forecastProblem" not in h.status()


async def test_bands_that_contradict_the_forecast_raise_one_event_and_status_says_so() -> None:
    """The climb crosses at 4 requests per second per replica; the 8B profile forecasts tens."""
    h = Harness(with_forecast(staged_climb_doc(), profile="h200-llama-3.1-8b-draft-1b"))
    climbing(h.traffic)
    drafting(h)
    await warm(h)
    for _ in range(40):
        await h.step(INTERVAL)
        if h.status().get("decision"):
            break
    for _ in range(3):
        await h.step(INTERVAL)
    forecast = h.scope("code")["forecast"]
    assert forecast["disagrees"] and forecast["measuredLow"] <= 4 <= forecast["measuredHigh"] < forecast["crossoverLow"]
    assert "the profile does not describe these pods" in forecast["message"]
    assert h.reasons().count("ForecastDisagrees") == 1


async def test_a_missing_calibration_config_map_is_named_once_and_its_measurements_are_fitted_once_written() -> None:
    h = Harness(with_forecast(pilot_doc(), configMap="calibration"))
    drafting(h)
    await warm(h)
    await h.step(INTERVAL)
    assert "ConfigMap calibration not found" in h.status()["forecastProblem"]
    assert h.reasons().count("ForecastProfileUnavailable") == 1
    assert "forecast" not in h.scope("chat")
    data = json.loads(MEASURED.read_text())
    pair = {"llama-3.1-8b", "llama-3.2-1b"}
    rows = [row for row in data["rows"] if row["model"] in pair]
    text = json.dumps({**data, "params": {m: data["params"][m] for m in pair}, "rows": rows})
    h.kube.objects[("ConfigMap", "team-a", "calibration")] = {
        "metadata": {"name": "calibration", "namespace": "team-a"},
        "data": {STEPCOST_KEY: text},
    }
    for _ in range(3):
        await h.step(INTERVAL)
    assert "forecastProblem" not in h.status()
    assert h.scope("chat")["forecast"]["profile"] == "configmap/calibration"
    assert h.reasons().count("ForecastProfileUnavailable") == 1
