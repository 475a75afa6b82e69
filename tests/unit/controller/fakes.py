"""Fakes of the controller's ports, and a harness that drives one pilot through the real shell.

The API server is an in-memory store that keeps generations as a real one does (a Deployment's
moves only when its spec changes) and marks what is ready when told to; routers, engines, probes
and webhooks answer from what the test sets. Time is a clock the test moves: nothing sleeps.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from specpilot.analysis.evidence import Evidence
from specpilot.analysis.evidence import load as load_evidence
from specpilot.analysis.probes import CaseTally
from specpilot.analysis.quality import ProbeResult, WebhookResult, case_key
from specpilot.analysis.stats import BucketQuantile
from specpilot.analysis.window import ArmEngine
from specpilot.api.pilot import API_VERSION, KIND
from specpilot.api.spec import Analysis, ProbeCase, ProbeKind, Probes, Webhook
from specpilot.controller.collect import Collector
from specpilot.controller.core.measurements import EngineReadings, Queried
from specpilot.controller.core.objects import PilotRef
from specpilot.controller.core.observe import ROUTER_COMPONENTS, ChildSummary, PodView, summarize
from specpilot.controller.core.router_objects import render_routes_configmap
from specpilot.controller.core.snapshot import Observation
from specpilot.controller.evidence_store import ConfigMapEvidence
from specpilot.controller.kube import ApiError
from specpilot.controller.metrics import OperatorMetrics
from specpilot.controller.ports import Pods, Served
from specpilot.controller.reconcile import Controller
from specpilot.fetch.scrape import ReadFailure
from specpilot.router.core.choice import pick_arm
from specpilot.wire.names import (
    ARM_LABEL,
    COMPONENT_LABEL,
    EVIDENCE_KEY,
    MEASURED_ARMS,
    PILOT_LABEL,
    REHEARSAL_LOAD_COMPONENT,
    REHEARSAL_RESTART_COMPONENT,
    Arm,
    rehearsal_pilot,
    routes_name,
)
from specpilot.wire.routes import RoutingTable, parse_routes
from specpilot.wire.samples import RequestOutcome, RequestSample, SamplesPage

Json = dict[str, Any]
ROOT = Path(__file__).resolve().parents[3]
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


class Clock:
    """The controller's clock, moved by the test."""

    def __init__(self, start: datetime = T0) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def _merged(target: Any, patch: Any) -> Any:
    """RFC 7386: a JSON merge patch applied to `target`."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merged(out.get(key), value)
    return out


class FakeKube:
    """An API server in memory: objects by (kind, namespace, name), every call recorded in order."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], Json] = {}
        self.calls: list[tuple[str, str, str]] = []  # (verb, kind, name)
        self.events: list[Json] = []
        self.refuse: dict[str, ApiError] = {}  # kind -> the error its applies get

    def verbs(self, verb: str) -> list[tuple[str, str]]:
        return [(kind, name) for v, kind, name in self.calls if v == verb]

    async def apply(self, obj: Json, *, dry_run: bool = False) -> Json:
        kind, meta = obj["kind"], obj["metadata"]
        self.calls.append(("dry-run" if dry_run else "apply", kind, meta["name"]))
        if kind in self.refuse:
            raise self.refuse[kind]
        if dry_run:
            return copy.deepcopy(obj)
        key = (kind, meta["namespace"], meta["name"])
        old = self.objects.get(key)
        body = copy.deepcopy(obj)
        generation = int(old["metadata"].get("generation", 0)) if old else 0
        if kind == "Deployment" and (old is None or old.get("spec") != body.get("spec")):
            generation += 1
        body["metadata"]["generation"] = generation
        if old is not None and "status" in old:
            body["status"] = old["status"]
        self.objects[key] = body
        return copy.deepcopy(body)

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> Json | None:
        found = self.objects.get((kind, namespace, name))
        return copy.deepcopy(found) if found is not None else None

    async def merge_patch(self, api_version: str, kind: str, namespace: str, name: str, body: Json) -> bool:
        self.calls.append(("patch", kind, name))
        found = self.objects.get((kind, namespace, name))
        if found is None:
            return False
        self.objects[(kind, namespace, name)] = _merged(found, body)
        return True

    async def pods(self, namespace: str, selector: Mapping[str, str]) -> list[Json]:
        return [
            copy.deepcopy(obj)
            for (kind, where, _), obj in self.objects.items()
            if kind == "Pod" and where == namespace and selector.items() <= obj["metadata"].get("labels", {}).items()
        ]

    async def delete(self, api_version: str, kind: str, namespace: str, name: str) -> bool:
        self.calls.append(("delete", kind, name))
        return self.objects.pop((kind, namespace, name), None) is not None

    async def replace_status(self, path: str, status: Json) -> Json:
        pilot = self._pilot(path)
        pilot["status"] = copy.deepcopy(status)
        self.calls.append(("status", KIND, pilot["metadata"]["name"]))
        return copy.deepcopy(pilot)

    async def patch_metadata(self, path: str, metadata: Json) -> None:
        pilot = self._pilot(path)
        annotations = pilot["metadata"].setdefault("annotations", {})
        for key, value in metadata.get("annotations", {}).items():
            if value is None:
                annotations.pop(key, None)
            else:
                annotations[key] = value
        self.calls.append(("annotate", KIND, pilot["metadata"]["name"]))

    async def event(self, involved: Json, *, type: str, reason: str, message: str) -> None:
        self.events.append({"type": type, "reason": reason, "message": message})
        self.calls.append(("event", reason, involved["name"]))

    def _pilot(self, path: str) -> Json:
        *_, namespace, _, name = path.strip("/").split("/")
        return self.objects[(KIND, namespace, name)]


class FakeRoutes:
    """The routing table's owner: the table goes into the fake API's ConfigMap; each router has
    served a generation as soon as it asks, after `lag` seconds of the clock."""

    def __init__(self, kube: FakeKube, clock: Clock, *, lag: float = 0.04) -> None:
        self.kube, self.clock, self.lag = kube, clock, lag
        self.written: list[RoutingTable] = []
        self.awaited: list[tuple[tuple[str, ...], int]] = []
        self.unreachable = False  # when set, no router confirms a generation

    async def write(self, ref: PilotRef, table: RoutingTable) -> Json:
        self.written.append(table)
        return await self.kube.apply(render_routes_configmap(ref, table))

    async def served(self, routers: Sequence[str], generation: int) -> Served:
        self.awaited.append((tuple(routers), generation))
        self.clock.advance(self.lag)
        return Served(self.lag, tuple(sorted(routers)) if self.unreachable else ())


class MemoryEvidence:
    """The evidence store in a dict; each store is recorded in `calls` (the fake API's, to see the
    order of everything the shell did)."""

    def __init__(self, calls: list[tuple[str, str, str]]) -> None:
        self.kept: dict[tuple[str, str], Evidence] = {}
        self.calls = calls

    async def load(self, ref: PilotRef) -> Evidence | None:
        return self.kept.get((ref.namespace, ref.name))

    async def store(self, ref: PilotRef, evidence: Evidence) -> None:
        self.kept[(ref.namespace, ref.name)] = evidence
        self.calls.append(("store", "Evidence", ref.name))

    def forget(self, ref: PilotRef) -> None:
        self.kept.pop((ref.namespace, ref.name), None)


class FakeQuality:
    """Greedy probes agree as `agreement` says, each round `hang` seconds long (a score webhook that
    answers only at its timeout, say); every webhook answers `ok`, after `gate` opens when set."""

    def __init__(self, *, agreement: float = 1.0, ok: bool = True) -> None:
        self.agreement, self.ok = agreement, ok
        self.hang = 0.0
        self.gate: asyncio.Event | None = None
        self.asked: list[Mapping[str, Any]] = []
        self.probed = 0
        self.probed_pods: tuple[str, str] | None = None  # the compared arm's pod and the speculative arm's
        self._asking = asyncio.Condition()

    async def probe(
        self,
        *,
        baseline: str,
        speculative: str,
        probes: Probes,
        cases: Sequence[ProbeCase],
        model: str,
        namespace: str,
    ) -> ProbeResult:
        """Each case as a round of 100 greedy comparisons: `agreement` of them equal on the speculative
        arm, all of them on the baseline."""
        self.probed += 1
        self.probed_pods = (baseline, speculative)
        if self.hang:
            await asyncio.sleep(self.hang)  # a round held up this long: a slow score webhook, a cancel case's bound
        equal = round(self.agreement * 100)
        tally = CaseTally(ProbeKind.GREEDY, baseline_passed=100, baseline_trials=100, speculative_passed=equal)
        return ProbeResult({case_key(case): replace(tally, speculative_trials=100) for case in cases})

    async def ask(
        self, webhooks: Sequence[Webhook], summary: Mapping[str, Any], *, namespace: str
    ) -> list[WebhookResult]:
        async with self._asking:
            self.asked.append(summary)
            self._asking.notify_all()
        if self.gate is not None:
            await self.gate.wait()
        return [
            WebhookResult(hook.name, self.ok, hook.critical, "200 ok" if self.ok else "500 no") for hook in webhooks
        ]

    async def until_asked(self, count: int) -> None:
        """Until `count` windows in all have been sent to the webhooks."""
        async with self._asking:
            await self._asking.wait_for(lambda: len(self.asked) >= count)


# Engine steps 20 ms apart at the quantile, in vLLM's (10, 25] ms inter-token-latency bucket.
ITL = BucketQuantile(value=0.02, low=0.01, high=0.025)


class FakeEngines:
    """Engine figures per arm as the test sets them, for the window ending at each collection."""

    def __init__(self) -> None:
        self.figures = {arm: ArmEngine(acceptance_length=2.0, inter_token_latency=ITL) for arm in MEASURED_ARMS}

    async def read(
        self,
        arms: Mapping[Arm, Pods],
        *,
        pilot: tuple[str, str],
        analysis: Analysis,
        horizon: timedelta,
        now: datetime,
    ) -> EngineReadings:
        usage = {arm: tuple((now - timedelta(seconds=s), 0.3) for s in (20, 10, 0)) for arm in self.figures}
        return Queried(now, {arm: ArmEngine(**{**vars(f), "kv_usage": usage[arm]}) for arm, f in self.figures.items()})


class FakeSamples:
    """Each router's samples, served after a cursor as the router's `/samples` does."""

    def __init__(self) -> None:
        self.samples: list[RequestSample] = []
        self.rehearsal: list[RequestSample] = []  # the rehearsal router's, at `rehearsal_address`
        self.rehearsal_address: str | None = None
        self.failing = False

    async def read(self, address: str, *, cursor: int, limit: int) -> SamplesPage | ReadFailure:
        if self.failing:
            return ReadFailure(f"GET http://{address}/samples: refused")
        served = self.rehearsal if address == self.rehearsal_address else self.samples
        after = [sample for sample in served if sample.seq > cursor][:limit]
        return SamplesPage(epoch="e1", samples=tuple(after), next_cursor=after[-1].seq if after else cursor, dropped=0)


@dataclass
class Traffic:
    """Requests per scope and second, and how long each arm takes per committed token."""

    rate: float = 6.0
    seconds_per_token: dict[Arm, float] = field(
        default_factory=lambda: {Arm.BASELINE: 0.02, Arm.CONTROL: 0.02, Arm.SPECULATIVE: 0.01, Arm.ALTERNATIVE: 0.018}
    )
    tokens: int = 100
    # Offered requests per second per replica above which an arm's requests miss their deadline.
    capacity: dict[Arm, float] = field(default_factory=dict)
    # An arm's seconds per committed token at its offered load per replica, where it depends on load.
    curves: dict[Arm, Callable[[float], float]] = field(default_factory=dict)
    failing: frozenset[Arm] = frozenset()  # arms whose engines answer every request with an error


GOLDEN = (5**0.5 - 1) / 2  # successive multiples cover [0, 1) evenly


class Harness:
    """One pilot driven through a real `Controller` on the fakes: apply, make ready, send traffic,
    collect, reconcile, restart, delete."""

    def __init__(self, doc: Json, *, evidence_in_memory: bool = False) -> None:
        self.clock = Clock()
        self.kube = FakeKube()
        self.routes = FakeRoutes(self.kube, self.clock)
        self.quality = FakeQuality()
        self.engines = FakeEngines()
        self.samples = FakeSamples()
        self.traffic = Traffic()
        self.seq = itertools.count(1)
        self.ready_pods = False
        self.pod_ips: dict[str, str] = {}
        self.pods_seen: dict[str, datetime] = {}  # when each pod was first observed
        self.restart_seconds = 0.0  # how long a replica the restart fallback brings up takes to be Ready
        self.evidence: ConfigMapEvidence | MemoryEvidence = (
            MemoryEvidence(self.kube.calls) if evidence_in_memory else ConfigMapEvidence(self.kube)
        )
        self.controller = self._controller()
        meta = doc["metadata"]
        self.ref = PilotRef(name=meta["name"], namespace=meta.get("namespace", "team-a"), uid="uid-1")
        body = {
            **copy.deepcopy(doc),
            "metadata": {"name": self.ref.name, "namespace": self.ref.namespace, "uid": self.ref.uid, "generation": 1},
        }
        self.kube.objects[(KIND, self.ref.namespace, self.ref.name)] = body

    def _controller(self) -> Controller:
        return Controller(
            kube=self.kube,
            routes=self.routes,
            evidence=self.evidence,
            quality=self.quality,
            collector=lambda: Collector(samples=self.samples, direct=self.engines, prometheus=self.engines),
            metrics=OperatorMetrics(),
            router_image="specpilot/specpilot:test",
            clock=self.clock,
        )

    @property
    def stored_evidence(self) -> Evidence | None:
        """The evidence store as the pilot's ConfigMap holds it."""
        found = self.kube.objects.get(("ConfigMap", self.ref.namespace, f"{self.ref.name}-evidence"))
        return load_evidence(found["data"][EVIDENCE_KEY]) if found is not None else None

    def restart(self) -> None:
        """A SIGKILLed operator's successor: nothing in memory, the cluster as it was."""
        self.evidence = ConfigMapEvidence(self.kube)
        self.controller = self._controller()

    @property
    def body(self) -> Json:
        return copy.deepcopy(self.kube.objects[(KIND, self.ref.namespace, self.ref.name)])

    def annotate(self, **annotations: str) -> None:
        self.kube.objects[(KIND, self.ref.namespace, self.ref.name)]["metadata"].setdefault("annotations", {}).update(
            annotations
        )

    def children(self) -> dict[tuple[str, str], Json]:
        return {
            (kind, name): body
            for (kind, namespace, name), body in self.kube.objects.items()
            if namespace == self.ref.namespace and (body["metadata"].get("labels") or {}).get(PILOT_LABEL)
        }

    def observe(self) -> Observation:
        """What the operator's indices would hold: the children, and a pod per Deployment replica."""
        children: dict[tuple[str, str], ChildSummary] = {}
        pods: list[PodView] = []
        for (kind, name), body in self.children().items():
            if kind == "Deployment":
                replicas = int(body["spec"].get("replicas", 1))
                if self.ready_pods:
                    body["status"] = {
                        "observedGeneration": body["metadata"]["generation"],
                        "replicas": replicas,
                        "updatedReplicas": replicas,
                        "readyReplicas": replicas,
                        "availableReplicas": replicas,
                    }
                labels = body["spec"]["template"]["metadata"]["labels"]
                component = labels.get(ARM_LABEL) or (
                    labels[COMPONENT_LABEL] if labels.get(COMPONENT_LABEL) in ROUTER_COMPONENTS else ""
                )
                role = labels.get(COMPONENT_LABEL, "")
                for index in range(replicas):
                    pod = f"{name}-{index}"
                    ip = self.pod_ips.setdefault(pod, f"198.18.0.{len(self.pod_ips) + 1}")
                    since = self.pods_seen.setdefault(pod, self.clock.now) + timedelta(
                        seconds=self.restart_seconds if role == REHEARSAL_RESTART_COMPONENT else 0
                    )
                    ready = self.ready_pods and since <= self.clock.now
                    pods.append(
                        PodView(
                            pod, component, (), ip if ready else None, role=role, ready_since=since if ready else None
                        )
                    )
            children[(kind, name)] = summarize(body)
        annotations = dict(self.body["metadata"].get("annotations") or {})
        return Observation(children=children, pods=tuple(pods), annotations=annotations)

    def send(self, seconds: float) -> None:
        """`seconds` of traffic per scope, split between the arms as the routing table says, ending now;
        and a rehearsal step's load, where its Job runs, as the rehearsal router's table splits it."""
        self._send(self.table(), self.traffic.rate, seconds, self.samples.samples)
        load = self.rehearsal_load()
        found = self.kube.objects.get(("ConfigMap", self.ref.namespace, routes_name(rehearsal_pilot(self.ref.name))))
        if load is not None and found is not None:
            args = load["spec"]["template"]["spec"]["containers"][0]["args"]
            rate = float(next(arg for arg in args if arg.startswith("--rate=")).partition("=")[2])
            table = parse_routes(found["data"], pilot=rehearsal_pilot(self.ref.name))
            router = next(ip for pod, ip in self.pod_ips.items() if pod.startswith(f"{self.ref.name}-rehearsal-router"))
            self.samples.rehearsal_address = router
            self._send(table, rate / len(table.scopes), seconds, self.samples.rehearsal)

    def rehearsal_load(self) -> Json | None:
        """The running rehearsal step's Job, if any."""
        return next(
            (
                body
                for (kind, _), body in self.children().items()
                if kind == "Job" and body["metadata"]["labels"].get(COMPONENT_LABEL) == REHEARSAL_LOAD_COMPONENT
            ),
            None,
        )

    def _send(self, table: RoutingTable | None, rate: float, seconds: float, into: list[RequestSample]) -> None:
        end = self.clock.now.timestamp()
        routes = table.scopes if table is not None else ()
        per_replica = {arm: 0.0 for arm in Arm}
        for route in routes:
            for arm in Arm:
                per_replica[arm] += rate * route.weights.of(arm) / 100  # one replica per arm here
        for route in routes:
            count = round(rate * seconds)
            for index in range(count):
                arm = pick_arm(route.weights, (index * GOLDEN) % 1)  # the router's split, spread evenly in time
                curve = self.traffic.curves.get(arm)
                per_token = curve(per_replica[arm]) if curve else self.traffic.seconds_per_token[arm]
                decode = per_token * (self.traffic.tokens - 1)
                e2e = 0.05 + decode
                finished = end - seconds + (index + 1) * seconds / count
                into.append(
                    RequestSample(
                        seq=next(self.seq),
                        at=finished - e2e,
                        scope=route.name,
                        arm=arm,
                        endpoint="198.18.0.9:8000",
                        model="demo",
                        stream=True,
                        status=502 if arm in self.traffic.failing else 200,
                        outcome=RequestOutcome.UPSTREAM_ERROR if arm in self.traffic.failing else RequestOutcome.OK,
                        e2e=e2e,
                        ttft=0.05,
                        output_tokens=self.traffic.tokens,
                        prompt_tokens=20,
                        tokens_from_usage=True,
                        decode=decode,
                        deadline_met=per_replica[arm] <= self.traffic.capacity.get(arm, float("inf")),
                        fallback=None,
                    )
                )

    def table(self) -> RoutingTable | None:
        return self.routes.written[-1] if self.routes.written else None

    async def reconcile(self) -> float:
        return await self.controller.reconcile(self.body, self.observe())

    async def collect(self) -> None:
        await self.controller.collect(self.body, self.observe())

    async def probe(self) -> None:
        await self.controller.probe(self.body, self.observe())

    async def step(self, seconds: float = 10.0) -> float:
        """Time passes with traffic, then a collection, a probe round if one is due, and a reconcile, as
        the operator's loops do."""
        self.clock.advance(seconds)
        self.send(seconds)
        await self.collect()
        await self.probe()
        return await self.reconcile()

    async def delete(self) -> bool:
        return await self.controller.teardown(self.body, self.observe())

    def status(self) -> Json:
        return self.body.get("status") or {}

    def scope(self, name: str) -> Json:
        return next(scope for scope in self.status()["scopes"] if scope["name"] == name)

    def reasons(self) -> list[str]:
        return [event["reason"] for event in self.kube.events]


def pilot_doc(*, probes: bool = False, webhooks: Sequence[str] = ()) -> Json:
    """The local demo's pilot (interval 10 s, window 30 s, warm-up 20 s), probes off unless asked."""
    doc: Json = yaml.safe_load((ROOT / "manifests/examples/local-demo.yaml").read_text())
    doc["metadata"]["namespace"] = "team-a"
    doc["apiVersion"] = API_VERSION
    if not probes:
        doc["spec"]["quality"].pop("probes", None)
    if webhooks:
        doc["spec"]["quality"]["webhooks"] = [
            {"name": name, "url": f"http://checks.team-a.svc:8080/{name}"} for name in webhooks
        ]
    return doc


def staged_climb_doc() -> Json:
    """Scope code alone, its arms' load its own, at 10% then 50% with the control arm taking the other
    half (no alternative arm), re-entered only by hand: at `climbing` traffic its arms run at 2 requests
    per second per replica at the first stage and 10 at the second."""
    doc = pilot_doc()
    spec = doc["spec"]
    spec["scopes"] = [spec["scopes"][1]]
    spec["scopes"][0]["stages"] = [
        {"weight": 10, "minRequests": 50, "minDuration": "2m"},  # a band's worth of windows at the first stage
        {"weight": 50, "minRequests": 100, "minDuration": "1m"},
    ]
    spec["rollback"]["reentry"] = "Manual"
    spec.pop("alternative")
    return doc


def climbing(traffic: Traffic) -> None:
    """20 requests per second, speculation's time per committed token rising with its load and the control
    arm's flat: they cross at 4 requests per second per replica."""
    traffic.rate = 20.0
    traffic.curves = {Arm.SPECULATIVE: lambda load: 0.01 * (1 + load / 4), Arm.CONTROL: lambda load: 0.02}
