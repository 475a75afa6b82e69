"""The controller's shell: gather one snapshot of a pilot, call `plan` once, carry the plan out.

Every decision is `core.plan`'s. This module reads what the plan needs (the pilot, its children as
the indices hold them, the last collection, the evidence, and what `gather` reads: the webhooks'
answers about the windows due), then applies in the order the design requires: dry-run every change, apply, wait for the
routers to take a flip, write the status once, clear the manual actions it acted on, then Events
and the evidence. Collection and probe rounds run apart (`rounds`), each on its own schedule, and hand
over frozen measurements and probe results; teardown runs the ordered steps `core.teardown` lists.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import aiohttp

from specpilot.analysis.rollout import Event, EventType
from specpilot.api.pilot import API_VERSION, KIND, PLURAL
from specpilot.api.status import SpeculationPilotStatus
from specpilot.controller.collect import Collector
from specpilot.controller.core.changes import Apply
from specpilot.controller.core.objects import Json, PilotRef
from specpilot.controller.core.plan import INVALID_SPEC_TICK, Confirm, Plan, flip_served, plan, refused
from specpilot.controller.core.policy import DEFAULT, Policy
from specpilot.controller.core.routing import table_hash
from specpilot.controller.core.snapshot import Applied, Observation, Snapshot, read_pilot, status_of
from specpilot.controller.core.takeover import ServicePatch, restoring
from specpilot.controller.core.teardown import teardown
from specpilot.controller.gather import (
    asked,
    followed,
    pilot_ref,
    piloted_workload,
    read_forecast_config,
    with_baseline,
)
from specpilot.controller.kube import ApiError
from specpilot.controller.memory import PilotMemory
from specpilot.controller.metrics import OperatorMetrics
from specpilot.controller.ports import EvidenceStore, KubeApi, QualityGates, RouteOwner
from specpilot.controller.rounds import collection, measurable, probe_round
from specpilot.fetch.outbound import scrub

log = logging.getLogger("specpilot.operator")


def _now() -> datetime:
    return datetime.now(UTC)


def _involved(ref: PilotRef) -> Json:
    return {"apiVersion": API_VERSION, "kind": KIND, "name": ref.name, "namespace": ref.namespace, "uid": ref.uid}


def _pilot_path(ref: PilotRef) -> str:
    return f"/apis/{API_VERSION}/namespaces/{ref.namespace}/{PLURAL}/{ref.name}"


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
        pilot = await followed(self.kube, self.policy, read)
        spec = pilot.spec if not pilot.deleting else None
        workload = None
        if spec is not None and spec.workload_ref is not None:
            found = await piloted_workload(self.kube, self.policy, pilot.ref, spec)
            if isinstance(found, list):
                pilot, spec = replace(pilot, spec=None, problems=tuple(found)), None
            else:
                workload, seen = found, await with_baseline(self.kube, pilot.ref, seen, found)
        memory.workload = workload
        takeover = spec.router.takeover if spec is not None else None
        service = await self.kube.get("v1", "Service", pilot.ref.namespace, takeover.service) if takeover else None
        snapshot = Snapshot(
            pilot=pilot,
            seen=seen,
            workload=workload,
            service=service,
            forecast_config=await read_forecast_config(self.kube, pilot.ref, spec) if spec is not None else None,
            now=self.clock(),
            router_image=self.router_image,
            measurements=memory.measurements,
            probe=memory.probe[0] if memory.probe is not None else None,
            evidence=await self.evidence.load(pilot.ref) if spec is not None else None,
            written=memory.written,
        )
        hooks = spec.quality.webhooks if spec is not None else []
        return await asked(self.quality, snapshot, hooks) if hooks else snapshot

    # --- collection --------------------------------------------------------------------------

    async def collect(self, body: Mapping[str, Any], seen: Observation) -> float:
        """One collection of the pilot's measurements (`collection`); seconds to the next. Probes run
        apart (`probe`)."""
        found = await measurable(self.kube, self.policy, self.memory(pilot_ref(body)), body, seen)
        if found is None:
            return INVALID_SPEC_TICK.total_seconds()
        return await collection(*found, body, clock=self.clock)

    async def probe(self, body: Mapping[str, Any], seen: Observation) -> float:
        """A probe round when one is due (`probe_round`), on the probes' own schedule; seconds until it
        looks again."""
        found = await measurable(self.kube, self.policy, self.memory(pilot_ref(body)), body, seen)
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
    """One pass of the ordered teardown `core.teardown` lists, after the taken-over Service is put
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
