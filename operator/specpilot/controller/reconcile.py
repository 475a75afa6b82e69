"""The controller's shell: gather one snapshot of a pilot, call `plan` once, carry the plan out.

Every decision is `core.plan`'s. This module reads what the plan needs (the pilot, its children as
the indices hold them, the last collection, the evidence, the webhooks' answers about the windows
due), then applies in the order the design requires: dry-run every change, apply, wait for the
routers to take a flip, write the status once, clear the manual actions it acted on, then Events
and the evidence. Collection and probe rounds run apart, each on its own schedule, and hand over
frozen measurements and probe results; teardown runs the ordered steps `core.plan.teardown` lists.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import aiohttp
from pydantic import ValidationError

from specpilot.analysis.quality import ProbeResult, accumulated, probe_groups, round_cases
from specpilot.analysis.rollout import Event, EventType
from specpilot.api.pilot import API_VERSION, KIND, PLURAL
from specpilot.api.spec import SpeculationPilotSpec, Webhook
from specpilot.api.status import SpeculationPilotStatus
from specpilot.api.validate import Problem
from specpilot.controller.collect import Collector
from specpilot.controller.core.changes import Apply
from specpilot.controller.core.measurements import Measurements, cadence, compared_arm
from specpilot.controller.core.observe import baseline_pod_view
from specpilot.controller.core.plan import (
    INVALID_SPEC_TICK,
    Confirm,
    Plan,
    flip_served,
    plan,
    refused,
    teardown,
    windows_due,
)
from specpilot.controller.core.policy import DEFAULT, Policy, outbound_urls
from specpilot.controller.core.progress import probe_due, probe_wait, window_due, window_summary
from specpilot.controller.core.render import PilotRef
from specpilot.controller.core.routing import table_hash
from specpilot.controller.core.snapshot import Applied, Observation, Pilot, Snapshot, Written, read_pilot, status_of
from specpilot.controller.core.takeover import ServicePatch, restoring
from specpilot.controller.core.workload import Workload, read_workload, served_model
from specpilot.controller.kube import ApiError
from specpilot.controller.metrics import OperatorMetrics
from specpilot.controller.ports import EvidenceStore, KubeApi, QualityGates, RouteOwner
from specpilot.fetch.outbound import scrub
from specpilot.wire.names import MEASURED_ARMS, REHEARSAL_ROUTER_COMPONENT, ROUTER_COMPONENT, Arm

log = logging.getLogger("specpilot.operator")
EXTERNAL_NAME_HOPS = 4  # ExternalName Services followed in a row, at most

Json = dict[str, Any]


class Wakeup:
    """Why a pilot's loop should look again before its next tick: a change (gathered for a moment,
    as a rollout changes many objects at once), or a window due (at once: its flip should not wait)."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self.urgent = False

    def set(self, *, urgent: bool = False) -> None:
        self.urgent = self.urgent or urgent
        self._event.set()

    def clear(self) -> None:
        self._event.clear()
        self.urgent = False

    async def wait(self) -> None:
        await self._event.wait()


@dataclass
class PilotMemory:
    """What the shell keeps of one pilot between ticks. All of it can be lost: status holds what a
    restart needs. The reconcile reads it once into a snapshot and records what it wrote; the
    collection replaces `measurements`, and a probe round `probe`, with new frozen values."""

    collector: Collector
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    wakeup: Wakeup = field(default_factory=Wakeup)
    written: Written = field(default_factory=Written)
    status: SpeculationPilotStatus | None = None  # the last status written, newer than a lagging watch
    measurements: Measurements = field(default_factory=Measurements)
    probe: tuple[ProbeResult, datetime] | None = None  # the probe rounds so far, and when the latest began
    workload: Workload | None = None  # spec.workloadRef's Deployment as the last reconcile read it
    restored: bool = False  # the taken-over Service was put back by this teardown


def _now() -> datetime:
    return datetime.now(UTC)


def _involved(ref: PilotRef) -> Json:
    return {"apiVersion": API_VERSION, "kind": KIND, "name": ref.name, "namespace": ref.namespace, "uid": ref.uid}


def _pilot_path(ref: PilotRef) -> str:
    return f"/apis/{API_VERSION}/namespaces/{ref.namespace}/{PLURAL}/{ref.name}"


def pilot_ref(body: Mapping[str, Any]) -> PilotRef:
    meta = body["metadata"]
    return PilotRef(name=meta["name"], namespace=meta["namespace"], uid=meta["uid"])


def admitted(policy: Policy, body: Mapping[str, Any], namespace: str) -> SpeculationPilotSpec | None:
    """The pilot's spec when it parses and the operator's policy admits it: nothing is measured or
    called for it otherwise."""
    try:
        spec = policy.admit(SpeculationPilotSpec.from_wire(body["spec"]), namespace)
    except ValidationError:
        return None
    return None if isinstance(spec, list) else spec


async def probe_round(
    quality: QualityGates,
    memory: PilotMemory,
    spec: SpeculationPilotSpec,
    seen: Observation,
    *,
    clock: Callable[[], datetime],
    namespace: str,
) -> float:
    """A probe round if one is due, apart from collection: a round held up by a slow score webhook or a
    cancel case's bound never delays a collection, and shows in the round's own time
    (`ProbeResult.seconds`). Score webhooks' Secrets are read from the pilot's `namespace`. Seconds until
    the probe schedule looks again."""
    probes, now = spec.quality.probes, clock()
    assert probes is not None  # only a spec with probes is probed
    arms = {arm: seen.ready(arm.value) for arm in MEASURED_ARMS}
    # probes compare like with like: the control arm takes the same share of the same traffic
    compared = compared_arm(spec)
    probed_at = memory.probe[1] if memory.probe else None
    if not probe_due(probes, arms, probed_at, now, compared=compared):
        return probe_wait(probes, probed_at, now, poll=cadence(spec.analysis))
    workload = memory.workload
    result = await quality.probe(
        baseline=arms[compared][0][1],
        speculative=arms[Arm.SPECULATIVE][0][1],
        probes=probes,
        cases=round_cases(spec),
        model=served_model(workload) if workload is not None else spec.served_model,
        namespace=namespace,
    )
    latest = replace(result, since=now, seconds=(clock() - now).total_seconds())
    before = memory.probe[0] if memory.probe else None
    memory.probe = (accumulated(before, latest, groups=probe_groups(spec)), now)
    return probe_wait(probes, now, clock(), poll=cadence(spec.analysis))


class Controller:
    """Reconciles, measures and tears down pilots through its ports."""

    def __init__(
        self,
        *,
        kube: KubeApi,
        routes: RouteOwner,
        evidence: EvidenceStore,
        quality: QualityGates,
        collector: Callable[[], Collector],
        metrics: OperatorMetrics,
        router_image: str,
        policy: Policy = DEFAULT,
        clock: Callable[[], datetime] = _now,
    ) -> None:
        self.kube = kube
        self.routes = routes
        self.evidence = evidence
        self.quality = quality
        self.new_collector = collector
        self.metrics = metrics
        self.router_image = router_image
        self.policy = policy
        self.clock = clock
        self.memories: dict[tuple[str, str], PilotMemory] = {}

    def memory(self, ref: PilotRef) -> PilotMemory:
        key = (ref.namespace, ref.name)
        if key not in self.memories:
            self.memories[key] = PilotMemory(collector=self.new_collector())
        return self.memories[key]

    def forget(self, ref: PilotRef) -> None:
        self.memories.pop((ref.namespace, ref.name), None)
        self.evidence.forget(ref)
        self.metrics.forget(ref.namespace, ref.name)

    def wake(self, namespace: str, pilot: str) -> None:
        memory = self.memories.get((namespace, pilot))
        if memory is not None:
            memory.wakeup.set()

    def wake_for_spec(self, namespace: str, pilot: str, generation: int, manual: bool) -> None:
        """Wake a pilot's loop for a generation not reconciled yet, or a manual action."""
        memory = self.memories.get((namespace, pilot))
        stale = memory is not None and (memory.status is None or memory.status.observed_generation != generation)
        if memory is not None and (stale or manual):
            memory.wakeup.set()

    # --- reconcile ---------------------------------------------------------------------------

    async def reconcile(self, body: Mapping[str, Any], seen: Observation) -> float:
        """One tick of one pilot; returns seconds until the next, unless something wakes it."""
        memory = self.memory(pilot_ref(body))
        async with memory.lock, self.metrics.reconciling():
            snapshot = await self._gather(body, seen, memory)
            tick = plan(snapshot)
            try:
                await _apply(self.kube, self.routes, snapshot, tick.applies, memory)
                for child in tick.removes:
                    await self.kube.delete(child.api_version, child.kind, snapshot.pilot.ref.namespace, child.name)
                if tick.patch is not None:
                    await _patch(self.kube, snapshot.pilot.ref, tick.patch)
                confirmed = [await _confirm(self.routes, self.metrics, tick.confirm)] if tick.confirm else []
            except ApiError as error:
                if error.code not in (400, 403, 422):
                    raise
                tick, confirmed = refused(snapshot, str(error)), []
            await _land(
                self.kube,
                self.evidence,
                self.metrics,
                ref=snapshot.pilot.ref,
                memory=memory,
                tick=tick,
                confirmed=confirmed,
            )
            return tick.delay.total_seconds()

    async def _gather(self, body: Mapping[str, Any], seen: Observation, memory: PilotMemory) -> Snapshot:
        """The tick's snapshot: read once, frozen, before anything is decided."""
        read = read_pilot(body, last_written=memory.status, policy=self.policy)
        pilot = await _followed(self.kube, self.policy, read)
        spec = pilot.spec if not pilot.deleting else None
        workload = None
        if spec is not None and spec.workload_ref is not None:
            found = await _workload(self.kube, self.policy, pilot.ref, spec)
            if isinstance(found, list):
                pilot, spec = replace(pilot, spec=None, problems=tuple(found)), None
            else:
                workload, seen = found, await _with_baseline(self.kube, pilot.ref, seen, found)
        memory.workload = workload
        takeover = spec.router.takeover if spec is not None else None
        service = await self.kube.get("v1", "Service", pilot.ref.namespace, takeover.service) if takeover else None
        snapshot = Snapshot(
            pilot=pilot,
            seen=seen,
            workload=workload,
            service=service,
            forecast_config=await _forecast_config(self.kube, pilot.ref, spec) if spec is not None else None,
            now=self.clock(),
            router_image=self.router_image,
            measurements=memory.measurements,
            probe=memory.probe[0] if memory.probe is not None else None,
            evidence=await self.evidence.load(pilot.ref) if spec is not None else None,
            written=memory.written,
        )
        hooks = spec.quality.webhooks if spec is not None else []
        return await _asked(self.quality, snapshot, hooks) if hooks else snapshot

    # --- collection --------------------------------------------------------------------------

    async def collect(self, body: Mapping[str, Any], seen: Observation) -> float:
        """One collection of the pilot's measurements (`collection`); seconds to the next. Probes run
        apart (`probe`)."""
        found = await _measurable(self.kube, self.policy, self.memory(pilot_ref(body)), body, seen)
        if found is None:
            return INVALID_SPEC_TICK.total_seconds()
        return await collection(*found, body, clock=self.clock)

    async def probe(self, body: Mapping[str, Any], seen: Observation) -> float:
        """A probe round when one is due (`probe_round`), on the probes' own schedule; seconds until it
        looks again."""
        found = await _measurable(self.kube, self.policy, self.memory(pilot_ref(body)), body, seen)
        if found is None or found[1].quality.probes is None:
            return INVALID_SPEC_TICK.total_seconds()
        return await probe_round(self.quality, *found, clock=self.clock, namespace=pilot_ref(body).namespace)

    # --- teardown ----------------------------------------------------------------------------

    async def teardown(self, body: Mapping[str, Any], seen: Observation) -> bool:
        """One pass of the ordered teardown (`tear_down`); True when everything the pilot made is gone."""
        ref = pilot_ref(body)
        memory = self.memory(ref)
        async with memory.lock:
            gone = await tear_down(
                self.kube,
                self.routes,
                self.metrics,
                memory=memory,
                ref=ref,
                seen=seen,
                status=status_of(body),
                clock=self.clock,
            )
        if gone:
            self.forget(ref)
        return gone


async def tear_down(
    kube: KubeApi,
    routes: RouteOwner,
    metrics: OperatorMetrics,
    *,
    memory: PilotMemory,
    ref: PilotRef,
    seen: Observation,
    status: SpeculationPilotStatus | None,
    clock: Callable[[], datetime],
) -> bool:
    """One pass of the ordered teardown `core.plan.teardown` lists, after the taken-over Service is put
    back; True when everything the pilot made is gone."""
    taken = restoring(ref.name, status.takeover if status else None, "the pilot is deleted", clock())
    if taken.patch is not None and not memory.restored:
        # first: clients go back to production before anything of the pilot goes
        await _patch(kube, ref, taken.patch)
        await announce(kube, metrics, ref, taken.events)
        memory.restored = True
    steps = teardown(ref, seen, clock())
    if steps.flip is not None:
        await routes.write(ref, steps.flip)
        await announce(kube, metrics, ref, steps.events)
    if steps.generation is not None:
        await routes.served(steps.routers, steps.generation)
    for child in steps.first:
        await kube.delete(child.api_version, child.kind, ref.namespace, child.name)
    if steps.draining:
        return False  # the router still drains; the baseline keeps serving it
    for child in steps.last:
        await kube.delete(child.api_version, child.kind, ref.namespace, child.name)
    return True


async def announce(kube: KubeApi, metrics: OperatorMetrics, ref: PilotRef, events: Iterable[Event]) -> None:
    """The one funnel for what happened: a log line, a Kubernetes Event and a metric; no URL's userinfo in
    either (`scrub`), whatever a reason quotes."""
    for event in events:
        level = logging.WARNING if event.type is EventType.WARNING else logging.INFO
        message = scrub(event.message)
        log.log(level, "%s/%s: %s: %s", ref.namespace, ref.name, event.reason.value, message)
        metrics.events.labels(event.reason.value).inc()
        try:
            await kube.event(_involved(ref), type=event.type.value, reason=event.reason.value, message=message)
        except (ApiError, aiohttp.ClientError) as error:
            log.warning("%s/%s: could not post Event %s: %s", ref.namespace, ref.name, event.reason.value, error)


async def _measurable(
    kube: KubeApi, policy: Policy, memory: PilotMemory, body: Mapping[str, Any], seen: Observation
) -> tuple[PilotMemory, SpeculationPilotSpec, Observation] | None:
    """What collection and probing read: the pilot's memory, its spec when the policy admits it, and
    the observation with production's pods where a workload is piloted; None while there is nothing
    to measure (an invalid spec, a workload not read yet or refused)."""
    spec = admitted(policy, body, body["metadata"]["namespace"])
    if spec is None or (spec.workload_ref is not None and memory.workload is None):
        return None
    if await _external_names(kube, policy, body["metadata"]["namespace"], spec):
        return None  # the reconcile says why
    if memory.workload is not None and spec.workload_ref is not None:
        seen = await _with_baseline(kube, pilot_ref(body), seen, memory.workload)
    return memory, spec, seen


async def collection(
    memory: PilotMemory,
    spec: SpeculationPilotSpec,
    seen: Observation,
    body: Mapping[str, Any],
    *,
    clock: Callable[[], datetime],
) -> float:
    """One collection of the pilot's measurements into `memory`; seconds to the next. A due window wakes
    the reconcile at once, so that it is judged on what was just collected."""
    now = clock()
    memory.measurements = await memory.collector.collect(
        arms={arm: seen.ready(arm.value) for arm in MEASURED_ARMS},
        # the rehearsal router's samples too: its requests are the arms' load while it runs
        routers=[*seen.ready(ROUTER_COMPONENT), *seen.ready(REHEARSAL_ROUTER_COMPONENT)],
        analysis=spec.analysis,
        rehearsal=spec.rehearsal,
        pilot=(body["metadata"]["namespace"], body["metadata"]["name"]),
        now=now,
    )
    if window_due(memory.status or status_of(body), spec, memory.measurements.collected_at, now):
        memory.wakeup.set(urgent=True)
    return cadence(spec.analysis)


async def _workload(
    kube: KubeApi, policy: Policy, ref: PilotRef, spec: SpeculationPilotSpec
) -> Workload | list[Problem]:
    """spec.workloadRef's Deployment as read now, or why it cannot be piloted."""
    assert spec.workload_ref is not None
    obj = await kube.get("apps/v1", "Deployment", ref.namespace, spec.workload_ref.name)
    found = read_workload(obj, spec.workload_ref)
    if isinstance(found, list):
        return found
    return list(policy.image_problems(found.image, "spec.workloadRef.name")) or found


async def _followed(kube: KubeApi, policy: Policy, pilot: Pilot) -> Pilot:
    """The pilot, refused where a URL of its spec leads through ExternalName Services to a host the
    operator may not call (`_external_names`)."""
    spec = pilot.spec if not pilot.deleting else None
    refused = await _external_names(kube, policy, pilot.ref.namespace, spec) if spec is not None else []
    return replace(pilot, spec=None, problems=tuple(refused)) if refused else pilot


async def _external_names(kube: KubeApi, policy: Policy, namespace: str, spec: SpeculationPilotSpec) -> list[Problem]:
    """The spec's URLs that name a Service of the pilot's namespace of type ExternalName, judged by where it
    leads: a pilot may call its own Services, not whatever one of them names."""
    found = [(where, await _leads_to(kube, policy, namespace, url)) for where, url in outbound_urls(spec)]
    return [Problem(where, refused) for where, refused in found if refused is not None]


async def _leads_to(kube: KubeApi, policy: Policy, namespace: str, written: str) -> str | None:
    """Why the operator may not call where `written` leads through ExternalName Services (followed through
    EXTERNAL_NAME_HOPS at most); None where it may."""
    url = written
    for _ in range(EXTERNAL_NAME_HOPS):
        service = policy.own_service(url, namespace)
        obj = await kube.get("v1", "Service", namespace, service.name) if service is not None else None
        target = ((obj or {}).get("spec") or {}).get("externalName")
        if service is None or not isinstance(target, str) or not target:
            return None
        url, refused = policy.followed(url, service, target, namespace)
        if refused is not None:
            return refused
    return f"more than {EXTERNAL_NAME_HOPS} ExternalName Services in a row: name the host they lead to"


async def _with_baseline(kube: KubeApi, ref: PilotRef, seen: Observation, workload: Workload) -> Observation:
    """The observation with the workload's pods, production's baseline, which the index does not hold."""
    pods = await kube.pods(ref.namespace, workload.selector)
    return replace(seen, pods=(*seen.pods, *(baseline_pod_view(pod) for pod in pods)))


async def _forecast_config(kube: KubeApi, ref: PilotRef, spec: SpeculationPilotSpec) -> Json | None:
    """spec.analysis.forecast's ConfigMap; None where none is named, or it is missing or unreadable (which
    the status then says, and the pilot carries on without a forecast)."""
    forecast = spec.analysis.forecast
    if forecast is None or forecast.config_map is None:
        return None
    try:
        return await kube.get("v1", "ConfigMap", ref.namespace, forecast.config_map)
    except ApiError as error:
        log.warning("%s/%s: ConfigMap %s unreadable: %s", ref.namespace, ref.name, forecast.config_map, error)
        return None


async def _asked(quality: QualityGates, snapshot: Snapshot, hooks: Sequence[Webhook]) -> Snapshot:
    """The snapshot with the webhooks' answers about each window due."""
    windows, ref = windows_due(snapshot), snapshot.pilot.ref
    answers = await asyncio.gather(
        *(
            quality.ask(hooks, window_summary(ref.name, ref.namespace, window), namespace=ref.namespace)
            for window in windows.values()
        )
    )
    return replace(snapshot, webhooks=dict(zip(windows, answers, strict=True)))


async def _land(
    kube: KubeApi,
    evidence: EvidenceStore,
    metrics: OperatorMetrics,
    *,
    ref: PilotRef,
    memory: PilotMemory,
    tick: Plan,
    confirmed: list[Event],
) -> None:
    """One status write when it changed, the manual actions it acted on cleared, then the Events
    it implies and the evidence it describes."""
    if tick.status is not None and tick.status_changed:
        await kube.replace_status(_pilot_path(ref), tick.status.to_wire())
        memory.status = tick.status
    if tick.clear_annotations:
        await kube.patch_metadata(_pilot_path(ref), {"annotations": dict.fromkeys(tick.clear_annotations)})
    _count(metrics, ref, tick)
    await announce(kube, metrics, ref, [*tick.events, *confirmed])
    if tick.evidence is not None:
        await evidence.store(ref, tick.evidence)


async def _confirm(routes: RouteOwner, metrics: OperatorMetrics, confirm: Confirm) -> Event:
    """Wait for the routers to take a flip, and say when they did."""
    served = await routes.served(confirm.routers, confirm.generation)
    if not served.unconfirmed:
        metrics.flip_seconds.observe(served.seconds)
    return flip_served(confirm, seconds=served.seconds, unconfirmed=served.unconfirmed)


async def _patch(kube: KubeApi, ref: PilotRef, patch: ServicePatch) -> None:
    """Re-point the taken-over Service, or put it back; a Service deleted meanwhile needs neither."""
    if not await kube.merge_patch("v1", "Service", ref.namespace, patch.service, patch.body):
        log.warning("%s/%s: Service %s is gone; nothing to re-point", ref.namespace, ref.name, patch.service)


async def _apply(
    kube: KubeApi, routes: RouteOwner, snapshot: Snapshot, applies: tuple[Apply, ...], memory: PilotMemory
) -> None:
    """Dry-run every change, then apply them in order; the routing table goes to its owner."""
    for step in applies:
        if step.dry_run:
            await kube.apply(step.obj, dry_run=True)
    ref, now = snapshot.pilot.ref, snapshot.now
    for step in applies:
        out = await (routes.write(ref, step.table) if step.table is not None else kube.apply(step.obj))
        generation = int(out.get("metadata", {}).get("generation") or 0)
        routes_hash = table_hash(step.table) if step.table is not None else None
        memory.written = memory.written.after(
            step.key, Applied(step.digest, generation), routes_hash=routes_hash, at=now
        )


def _count(metrics: OperatorMetrics, ref: PilotRef, tick: Plan) -> None:
    """The tick as metrics: the pilot's phase and scopes, each window judged, each flip."""
    if tick.status is None:
        return
    if tick.status.phase is not None:
        metrics.phase(ref.namespace, ref.name, tick.status.phase)
    for status in tick.status.scopes:
        metrics.scope(ref.namespace, ref.name, status)
    for scope, verdict in tick.judged:
        metrics.verdicts.labels(ref.namespace, ref.name, scope, verdict.value).inc()
    for scope in tick.flipped:
        metrics.flips.labels(ref.namespace, ref.name, scope).inc()
