"""One reconcile of one pilot, and its teardown: observe, decide (pure), apply, write status once.

The decisions live in `render`, `routing` and `status`; this module gathers what they need, applies
what they return and emits Events only after the status they describe has landed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
from pydantic import ValidationError

from specpilot.analysis import evidence as ev
from specpilot.analysis.checks import Check
from specpilot.analysis.quality import probe_check, webhook_check
from specpilot.analysis.rollout import Event, EventType
from specpilot.analysis.window import ScopeWindow
from specpilot.api import spec as s
from specpilot.api.pilot import API_VERSION, KIND, PLURAL
from specpilot.api.reasons import Reason
from specpilot.api.status import RoutesStatus, ScopeStatus, SpeculationPilotStatus
from specpilot.api.validate import Problem, validate
from specpilot.controller import render as r
from specpilot.controller.decide import Decided, decide, fresh_for, record
from specpilot.controller.kube import ApiError, Kube
from specpilot.controller.measure import PilotMeasurements, cadence
from specpilot.controller.metrics import OperatorMetrics
from specpilot.controller.observe import MANAGED_FIELDS, ChildSummary, PodView, drifted
from specpilot.controller.progress import (
    MANUAL,
    Measured,
    Progress,
    advance_scopes,
    due,
    manual_actions,
    warm,
    window_due,
    window_summary,
)
from specpilot.controller.quality import ProbeResult, call_webhooks, run_probes
from specpilot.controller.routing import ordinary, routing_table, table_hash
from specpilot.controller.status import (
    Observed,
    PodTrouble,
    StatusPlan,
    carry_scopes,
    invalid_status,
    reconciled_status,
)
from specpilot.wire.names import (
    EVIDENCE_KEY,
    ROUTER_ADMIN_PORT,
    ROUTER_COMPONENT,
    Arm,
    arm_name,
    evidence_name,
    router_name,
    routes_name,
)
from specpilot.wire.routes import RoutingTable, TableError, parse_routes

log = logging.getLogger("specpilot.operator")

Json = dict[str, Any]
Key = tuple[str, str]  # (namespace, name)

# Changes to a pilot or its children wake its reconcile at once; without any, it runs once per analysis
# interval, or this often while the spec is invalid (keeping the running table fresh).
INVALID_SPEC_TICK_SECONDS = 10.0
ROUTER_ACK_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True)
class Applied:
    """What this process last applied for one child: the desired object's hash, and the generation
    the server gave it (a higher generation seen later means someone else edited it)."""

    digest: str
    generation: int


@dataclass
class PilotMemory:
    """In-process state of one pilot. All of it can be lost: status holds what a restart needs."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    window_due: bool = False  # the wake is a collection's: a window is due, with nothing to gather
    applied: dict[Key, Applied] = field(default_factory=dict)
    routes_written: tuple[str, datetime] | None = None  # (table hash, when) of the last table written
    status: SpeculationPilotStatus | None = None  # the last status written, newer than a lagging watch
    measurements: PilotMeasurements = field(default_factory=PilotMeasurements)
    probe: ProbeResult | None = None
    probed_at: datetime | None = None
    manual_keys: frozenset[str] = frozenset()  # manual-action annotations acted on, to remove once landed
    judged: dict[str, Measured] = field(default_factory=dict)  # this reconcile's judged windows
    evidence: ev.Evidence | None = None  # the evidence store, loaded from its ConfigMap on first use
    evidence_written: str | None = None  # the store's text as last read or written


@dataclass(frozen=True)
class Observation:
    """A pilot's children and pods as the operator's indices hold them."""

    children: Mapping[Key, ChildSummary]  # (kind, name) -> summary
    pods: Sequence[PodView] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def troubles(self) -> list[PodTrouble]:
        return [trouble for pod in self.pods for trouble in pod.troubles]

    def ready(self, component: str) -> list[tuple[str, str]]:
        """(pod name, IP) of the ready pods of an arm (an Arm value) or of the router."""
        return [(pod.name, pod.ready_ip) for pod in self.pods if pod.component == component and pod.ready_ip]

    def count(self, component: str) -> int:
        """Pods of an arm or of the router that exist, ready or not."""
        return sum(1 for pod in self.pods if pod.component == component)


def pilot_ref(body: Mapping[str, Any]) -> r.PilotRef:
    meta = body["metadata"]
    return r.PilotRef(name=meta["name"], namespace=meta["namespace"], uid=meta["uid"])


def _involved(ref: r.PilotRef) -> Json:
    return {"apiVersion": API_VERSION, "kind": KIND, "name": ref.name, "namespace": ref.namespace, "uid": ref.uid}


def _pilot_path(ref: r.PilotRef) -> str:
    return f"/apis/{API_VERSION}/namespaces/{ref.namespace}/{PLURAL}/{ref.name}"


def _previous_status(body: Mapping[str, Any]) -> SpeculationPilotStatus | None:
    try:
        return SpeculationPilotStatus.from_wire(body["status"]) if body.get("status") else None
    except ValidationError:
        return None  # a status this version cannot read is rebuilt from what is observed


def _now() -> datetime:
    return datetime.now(UTC)


class Controller:
    """Reconciles pilots: the imperative shell around the pure renderer and status logic."""

    def __init__(
        self,
        *,
        kube: Kube,
        http: aiohttp.ClientSession,
        metrics: OperatorMetrics,
        router_image: str,
        clock: Callable[[], datetime] = _now,
    ) -> None:
        self.kube = kube
        self.http = http
        self.metrics = metrics
        self.router_image = router_image
        self.clock = clock
        self.memories: dict[Key, PilotMemory] = {}

    def memory(self, ref: r.PilotRef) -> PilotMemory:
        return self.memories.setdefault((ref.namespace, ref.name), PilotMemory())

    def forget(self, ref: r.PilotRef) -> None:
        self.memories.pop((ref.namespace, ref.name), None)
        self.metrics.forget(ref.namespace, ref.name)

    def wake(self, namespace: str, pilot: str) -> None:
        memory = self.memories.get((namespace, pilot))
        if memory is not None:
            memory.wake.set()

    def wake_for_spec(self, namespace: str, pilot: str, generation: int, manual: bool) -> None:
        """Wake a pilot's reconcile for a generation not reconciled yet, or a manual action."""
        memory = self.memories.get((namespace, pilot))
        stale = memory is not None and (memory.status is None or memory.status.observed_generation != generation)
        if memory is not None and (stale or manual):
            memory.wake.set()

    # --- reconcile ---------------------------------------------------------------------------

    async def reconcile(self, body: Mapping[str, Any], seen: Observation) -> float:
        """Bring one pilot's children and status up to date; returns seconds until the next look."""
        ref = pilot_ref(body)
        memory = self.memory(ref)
        async with memory.lock, self.metrics.reconciling():
            if body["metadata"].get("deletionTimestamp"):
                return INVALID_SPEC_TICK_SECONDS
            now = self.clock()
            generation = int(body["metadata"].get("generation") or 0)
            previous = memory.status or _previous_status(body)
            problems = validate(body)
            if problems:
                plan = invalid_status(previous, problems=problems, generation=generation, now=now)
                await self._refresh_table(ref, seen, memory, now)
                delay = INVALID_SPEC_TICK_SECONDS
            else:
                spec = s.SpeculationPilotSpec.from_wire(body["spec"])
                delay = spec.analysis.interval.total_seconds()
                plan = await self._reconcile_valid(
                    ref=ref, spec=spec, generation=generation, previous=previous, seen=seen, memory=memory, now=now
                )
            await self._land(ref, memory, previous, plan)
            await self._write_evidence(ref, memory)
            return delay

    async def _reconcile_valid(
        self,
        *,
        ref: r.PilotRef,
        spec: s.SpeculationPilotSpec,
        generation: int,
        previous: SpeculationPilotStatus | None,
        seen: Observation,
        memory: PilotMemory,
        now: datetime,
    ) -> StatusPlan:
        arms = tuple(r.render_arm(ref, spec, arm) for arm in r.arms_of(spec))
        scopes, scope_events = carry_scopes(previous, spec, arms, now=now)
        progress = await self._progress(
            ref, spec=spec, previous=previous, scopes=scopes, seen=seen, memory=memory, now=now
        )
        decided = await self._decide(
            ref, spec=spec, arms=arms, progress=progress, previous=previous, seen=seen, memory=memory, now=now
        )
        scopes = decided.scopes
        weights = {scope.name: scope.weight for scope in scopes}
        digest = table_hash(routing_table(ref.name, spec, weights, generation=0, now=now))
        routes = previous.routes if previous is not None else None
        if routes is None or routes.hash != digest:
            routes = RoutesStatus(generation=(routes.generation if routes is not None else 0) + 1, hash=digest)
        table = routing_table(ref.name, spec, weights, generation=routes.generation, now=now)
        rendered = r.render(ref, spec, table=table, router_image=self.router_image)
        try:
            refresh = spec.analysis.interval * 0.9  # reconciles land a little after the interval
            restored = await self._apply(ref, rendered, seen, memory, routes=routes, now=now, refresh=refresh)
            if progress.flipped:
                restored.append(await self._confirm_flip(ref, seen, progress.flipped, routes.generation))
        except ApiError as error:
            if error.code not in (400, 403, 422):
                raise
            # The API server refused an object (e.g. a label value or a quantity it cannot take):
            # nothing was applied, since every change is dry-run first.
            problem = Problem("spec", f"the API server refused a rendered object: {error}")
            return invalid_status(previous, problems=[problem], generation=generation, now=now)
        observed = Observed(
            deployments={
                name: child.deployment for (_, name), child in seen.children.items() if child.deployment is not None
            },
            troubles=seen.troubles,
        )
        plan = reconciled_status(
            previous,
            spec=spec,
            generation=generation,
            arms=arms,
            router_deployment=router_name(ref.name),
            observed=observed,
            routes=routes,
            scopes=scopes,
            scope_events=[*scope_events, *progress.events, *restored, *decided.events],
            fallbacks=progress.fallbacks,
            now=now,
        )
        return replace(plan, status=plan.status.model_copy(update={"decision": decided.decision}))

    async def _decide(
        self,
        ref: r.PilotRef,
        *,
        spec: s.SpeculationPilotSpec,
        arms: Sequence[r.ArmPlan],
        progress: Progress,
        previous: SpeculationPilotStatus | None,
        seen: Observation,
        memory: PilotMemory,
        now: datetime,
    ) -> Decided:
        """This reconcile's windows into the evidence store, and the decisions when they are due."""
        replicas = {plan.arm: len(seen.ready(plan.arm.value)) or plan.replicas for plan in arms}
        loads = {name: memory.measurements.load(item.window, replicas=replicas) for name, item in memory.judged.items()}
        evidence = record(
            fresh_for(await self._evidence(ref, memory), {plan.arm: plan.config_hash for plan in arms}),
            spec=spec,
            measured=memory.judged,
            loads=loads,
            scopes=progress.scopes,
            kv_blocks=memory.measurements.kv_blocks(),
            gpus={plan.arm: plan.gpus for plan in arms},
            replicas=replicas,
        )
        memory.evidence = evidence
        return decide(
            evidence,
            spec=spec,
            scopes=progress.scopes,
            fallbacks=progress.fallbacks,
            annotations=seen.annotations,
            previous=previous.decision if previous is not None else None,
            now=now,
        )

    async def _evidence(self, ref: r.PilotRef, memory: PilotMemory) -> ev.Evidence | None:
        """The pilot's evidence store: in memory, else read back from its ConfigMap (after a restart)."""
        if memory.evidence is not None:
            return memory.evidence
        found = await self.kube.get("v1", "ConfigMap", ref.namespace, evidence_name(ref.name))
        text = ((found or {}).get("data") or {}).get(EVIDENCE_KEY)
        if text is None:
            return None
        try:
            memory.evidence = ev.load(text)
        except ValueError as error:
            log.warning("%s/%s: evidence store unreadable, starting a new one: %s", ref.namespace, ref.name, error)
            return None
        memory.evidence_written = text
        return memory.evidence

    async def _write_evidence(self, ref: r.PilotRef, memory: PilotMemory) -> None:
        """Server-side apply the evidence store when it changed (after the status describing it landed)."""
        if memory.evidence is None:
            return
        text = ev.dump(memory.evidence)
        if text != memory.evidence_written:
            await self.kube.apply(r.render_evidence_configmap(ref, text))
            memory.evidence_written = text

    async def _progress(
        self,
        ref: r.PilotRef,
        *,
        spec: s.SpeculationPilotSpec,
        previous: SpeculationPilotStatus | None,
        scopes: list[ScopeStatus],
        seen: Observation,
        memory: PilotMemory,
        now: datetime,
    ) -> Progress:
        """Judge the scopes whose window is due, apply manual actions, and move each scope."""
        is_warm = warm(previous, spec.analysis, now)
        end = memory.measurements.collected_at
        measured: dict[str, Measured] = {}
        kv_loads: dict[str, float] = {}
        if is_warm and end is not None and not spec.suspend:
            for scope in scopes:
                if due(scope, spec.analysis, end):
                    window = memory.measurements.window(scope.name, analysis=spec.analysis, end=end)
                    since = max(scope.last_window.end if scope.last_window else window.start, window.start)
                    new = memory.measurements.new_requests(scope.name, since=since, end=end)
                    checks = await self._quality_checks(ref, spec, window, memory)
                    measured[scope.name] = Measured(window, new, checks)
            if measured:
                # every scope: a flipped one's requests in flight hold the cache until they drain
                kv_loads = memory.measurements.kv_loads(
                    [scope.name for scope in scopes], analysis=spec.analysis, end=end
                )
        memory.judged = measured
        manual = manual_actions(seen.annotations, [scope.name for scope in scopes])
        memory.manual_keys = frozenset(key for key in MANUAL if key in seen.annotations)
        progress = advance_scopes(
            scopes,
            spec,
            measured=measured,
            manual=manual,
            fallbacks=previous.fallbacks if previous is not None else [],
            warm=is_warm,
            now=now,
            kv_loads=kv_loads,
        )
        for status in progress.scopes:
            self.metrics.scope(ref.namespace, ref.name, status)
            if status.name in measured and status.name not in manual and status.last_window is not None:
                self.metrics.verdicts.labels(
                    ref.namespace, ref.name, status.name, status.last_window.verdict.value
                ).inc()
        for name in progress.flipped:
            self.metrics.flips.labels(ref.namespace, ref.name, name).inc()
        return progress

    async def _quality_checks(
        self, ref: r.PilotRef, spec: s.SpeculationPilotSpec, window: ScopeWindow, memory: PilotMemory
    ) -> tuple[Check, ...]:
        """The quality gates' checks for a window: the latest probe round, and each webhook's answer."""
        checks: list[Check] = []
        if spec.quality.probes is not None:
            probe = memory.probe
            checks.append(
                probe_check(
                    probe.agreement if probe else None, quality=spec.quality, probes=probe.pairs if probe else None
                )
            )
        if spec.quality.webhooks:
            summary = window_summary(ref.name, ref.namespace, window)
            for result in await call_webhooks(self.http, spec.quality.webhooks, summary):
                checks.append(webhook_check(result.name, result.ok, critical=result.critical, detail=result.detail))
        return tuple(checks)

    async def _confirm_flip(self, ref: r.PilotRef, seen: Observation, scopes: Sequence[str], generation: int) -> Event:
        """Read the routers' /routes back after a flip, and say when they took it."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        await self._await_routers([ip for _, ip in seen.ready(ROUTER_COMPONENT)], generation)
        took = loop.time() - started
        self.metrics.flip_seconds.observe(took)
        names = ", ".join(scopes)
        return Event(
            EventType.NORMAL,
            Reason.ROUTES_TAKEN,
            f"routers took routing generation {generation} ({names} on ordinary decoding) {took * 1000:.0f} ms "
            "after the write",
        )

    async def collect(self, body: Mapping[str, Any], seen: Observation) -> float:
        """One collection of the pilot's measurements (and its probes, when due); seconds to the next."""
        ref = pilot_ref(body)
        memory = self.memory(ref)
        try:
            spec = s.SpeculationPilotSpec.from_wire(body["spec"])
        except ValidationError:
            return INVALID_SPEC_TICK_SECONDS
        now = self.clock()
        arms = {arm: seen.ready(arm.value) for arm in (Arm.BASELINE, Arm.SPECULATIVE)}
        await memory.measurements.collect(
            self.http,
            arms=arms,
            routers=seen.ready(ROUTER_COMPONENT),
            analysis=spec.analysis,
            pilot=(ref.namespace, ref.name),
            now=now,
        )
        if window_due(memory.status or _previous_status(body), spec, memory.measurements.collected_at, now):
            memory.window_due = True  # judge it on what was just collected, not at the next scheduled reconcile
            memory.wake.set()
        probes = spec.quality.probes
        ready = arms[Arm.BASELINE] and arms[Arm.SPECULATIVE]
        if probes is not None and ready and (memory.probed_at is None or now - memory.probed_at >= probes.interval):
            memory.probed_at = now
            memory.probe = await run_probes(
                self.http,
                baseline=arms[Arm.BASELINE][0][1],
                speculative=arms[Arm.SPECULATIVE][0][1],
                probes=probes,
                model=spec.engine.served_model_name or spec.engine.model,
            )
        return cadence(spec.analysis)

    async def _apply(
        self,
        ref: r.PilotRef,
        rendered: r.Rendered,
        seen: Observation,
        memory: PilotMemory,
        *,
        routes: RoutesStatus,
        now: datetime,
        refresh: timedelta,
    ) -> list[Event]:
        """Apply what is missing, changed or drifted; dry-run all of it first, so that an object the
        server refuses leaves everything as it was. The routing table is also rewritten once per
        `refresh`, so that the router never finds it stale."""
        due: list[tuple[Json, str, bool]] = []  # (object, digest, restoring)
        for obj in rendered.objects:
            kind, name = obj["kind"], obj["metadata"]["name"]
            digest, child, record = (
                r.content_hash(obj),
                seen.children.get((kind, name)),
                memory.applied.get((kind, name)),
            )
            unchanged = record is not None and record.digest == digest
            if obj is rendered.routes:
                written = memory.routes_written
                if child is None or written is None or written[0] != routes.hash or now - written[1] >= refresh:
                    due.append((obj, digest, child is None and written is not None))
            elif child is None:
                due.append((obj, digest, unchanged))
            elif kind == "Deployment":
                edited = record is not None and child.generation > record.generation
                if not unchanged or edited:
                    due.append((obj, digest, unchanged and edited))
            else:
                desired = {f: obj.get(f) for f in MANAGED_FIELDS[kind]} | {"labels": obj["metadata"]["labels"]}
                if drifted(desired, child.managed):
                    due.append((obj, digest, unchanged))
        changes = [item for item in due if item[0] is not rendered.routes]
        for obj, _, _ in changes:
            if not _binds_absent_role(obj, seen):
                await self.kube.apply(obj, dry_run=True)
        events = []
        for obj, digest, restoring in due:
            out = await self.kube.apply(obj)
            kind, name = obj["kind"], obj["metadata"]["name"]
            memory.applied[(kind, name)] = Applied(digest, int(out.get("metadata", {}).get("generation") or 0))
            if obj is rendered.routes and routes.hash is not None:
                memory.routes_written = (routes.hash, now)
            if restoring:
                events.append(
                    Event(EventType.WARNING, Reason.CHILD_RESTORED, f"{kind} {name} was edited or deleted; put back")
                )
        return events

    async def _refresh_table(self, ref: r.PilotRef, seen: Observation, memory: PilotMemory, now: datetime) -> None:
        """Keep the table that runs current while the spec is invalid, so routing stays as it was."""
        table = self._observed_table(ref, seen)
        written = memory.routes_written
        if table is not None and (written is None or now - written[1] >= timedelta(seconds=INVALID_SPEC_TICK_SECONDS)):
            fresh = table.model_copy(update={"updated_at": now})
            await self.kube.apply(r.render_routes_configmap(ref, fresh))
            memory.routes_written = (table_hash(table), now)

    @staticmethod
    def _observed_table(ref: r.PilotRef, seen: Observation) -> RoutingTable | None:
        child = seen.children.get(("ConfigMap", routes_name(ref.name)))
        try:
            return parse_routes(child.managed.get("data") if child else None, pilot=ref.name)
        except TableError:
            return None

    async def _land(
        self, ref: r.PilotRef, memory: PilotMemory, previous: SpeculationPilotStatus | None, plan: StatusPlan
    ) -> None:
        """One status write when something changed, then the Events it implies."""
        if plan.status != previous:
            await self.kube.replace_status(_pilot_path(ref), plan.status.to_wire())
            memory.status = plan.status
        if memory.manual_keys:
            # The status that acted on the manual actions has landed: the annotations are done.
            await self.kube.patch_metadata(_pilot_path(ref), {"annotations": dict.fromkeys(memory.manual_keys)})
            memory.manual_keys = frozenset()
        if plan.status.phase is not None:
            self.metrics.phase(ref.namespace, ref.name, plan.status.phase)
        await self.announce(ref, plan.events)

    async def announce(self, ref: r.PilotRef, events: Iterable[Event]) -> None:
        """The one funnel for what happened: a log line, a Kubernetes Event and a metric."""
        for event in events:
            level = logging.WARNING if event.type is EventType.WARNING else logging.INFO
            log.log(level, "%s/%s: %s: %s", ref.namespace, ref.name, event.reason.value, event.message)
            self.metrics.events.labels(event.reason.value).inc()
            try:
                await self.kube.event(
                    _involved(ref), type=event.type.value, reason=event.reason.value, message=event.message
                )
            except (ApiError, aiohttp.ClientError) as error:
                log.warning("%s/%s: could not post Event %s: %s", ref.namespace, ref.name, event.reason.value, error)

    # --- teardown ----------------------------------------------------------------------------

    async def teardown(self, body: Mapping[str, Any], seen: Observation) -> bool:
        """One pass of the ordered teardown; True when everything the pilot made is gone.

        Scopes are flipped to ordinary decoding first and the routers are given time to take it;
        then the speculative and alternative arms go, then the router (draining in-flight requests),
        and the baseline, which serves until the router is gone, goes last."""
        ref = pilot_ref(body)
        async with self.memory(ref).lock:
            table = self._observed_table(ref, seen)
            if table is not None:
                if any(route.weights.baseline != 100 for route in table.scopes):
                    flipped = ordinary(table, generation=table.generation + 1, now=self.clock())
                    await self.kube.apply(r.render_routes_configmap(ref, flipped))
                    await self.announce(
                        ref, [Event(EventType.NORMAL, Reason.TEARDOWN, "every scope flipped to ordinary decoding")]
                    )
                    table = flipped
                await self._await_routers([ip for _, ip in seen.ready(ROUTER_COMPONENT)], table.generation)
            for arm in (Arm.SPECULATIVE, Arm.ALTERNATIVE):
                await self.kube.delete("apps/v1", "Deployment", ref.namespace, arm_name(ref.name, arm))
            await self.kube.delete("apps/v1", "Deployment", ref.namespace, router_name(ref.name))
            if seen.count(ROUTER_COMPONENT):
                return False  # the router still drains; the baseline keeps serving it
            await self.kube.delete("apps/v1", "Deployment", ref.namespace, arm_name(ref.name, Arm.BASELINE))
            for api_version, kind, name in (
                *(("v1", "Service", arm_name(ref.name, arm)) for arm in Arm),
                ("v1", "Service", router_name(ref.name)),
                ("v1", "ConfigMap", routes_name(ref.name)),
                ("rbac.authorization.k8s.io/v1", "RoleBinding", router_name(ref.name)),
                ("rbac.authorization.k8s.io/v1", "Role", router_name(ref.name)),
                ("v1", "ServiceAccount", router_name(ref.name)),
            ):
                await self.kube.delete(api_version, kind, ref.namespace, name)
        self.forget(ref)
        return True

    async def _await_routers(self, addresses: Sequence[str], generation: int) -> None:
        """Until every ready router serves `generation` of the table (or a timeout: a router that
        cannot be reached cannot be waited for, and stale tables fail safe to the baseline anyway)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ROUTER_ACK_TIMEOUT_SECONDS
        pending = set(addresses)
        while pending and loop.time() < deadline:
            for address in list(pending):
                if await self._router_generation(address) >= generation:
                    pending.discard(address)
            if pending:
                await asyncio.sleep(0.2)
        if pending:
            log.warning("routers %s did not confirm routing generation %d", sorted(pending), generation)

    async def _router_generation(self, address: str) -> int:
        try:
            async with self.http.get(
                f"http://{address}:{ROUTER_ADMIN_PORT}/routes", timeout=aiohttp.ClientTimeout(total=2)
            ) as resp:
                doc = await resp.json()
            return int(doc.get("generation") or -1)
        except (aiohttp.ClientError, TimeoutError, ValueError, TypeError):
            return -1


def _binds_absent_role(obj: Json, seen: Observation) -> bool:
    """A RoleBinding to a Role that does not exist yet, which a dry run cannot admit: without the
    `bind` verb, the API server admits a binding only once it can check that the operator holds
    every permission of the Role, and a dry-run Role is never there to check. Its real apply comes
    after the Role's (render order)."""
    if obj["kind"] != "RoleBinding":
        return False
    ref = obj["roleRef"]
    return ref["kind"] == "Role" and ("Role", ref["name"]) not in seen.children
