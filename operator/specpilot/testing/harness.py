"""A harness that drives one pilot through the operator's real shell (`Controller`) on the fakes of
`specpilot.testing.fakes`, with traffic split between the arms as the routing table says; and the
pilots it is driven with.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import yaml

from specpilot.analysis.evidence import Evidence
from specpilot.analysis.evidence import load as load_evidence
from specpilot.api.pilot import API_VERSION, KIND
from specpilot.controller.collect import Collector
from specpilot.controller.core.objects import PilotRef
from specpilot.controller.core.observe import ROUTER_COMPONENTS, ChildSummary, PodView, summarize
from specpilot.controller.core.snapshot import Observation
from specpilot.controller.evidence_store import ConfigMapEvidence
from specpilot.controller.metrics import OperatorMetrics
from specpilot.controller.reconcile import Controller
from specpilot.router.core.choice import pick_arm
from specpilot.testing.fakes import (
    Clock,
    FakeEngines,
    FakeKube,
    FakeQuality,
    FakeRoutes,
    FakeSamples,
    Json,
    MemoryEvidence,
)
from specpilot.wire.names import (
    ARM_LABEL,
    COMPONENT_LABEL,
    EVIDENCE_KEY,
    PILOT_LABEL,
    REHEARSAL_LOAD_COMPONENT,
    REHEARSAL_RESTART_COMPONENT,
    Arm,
    rehearsal_pilot,
    routes_name,
)
from specpilot.wire.routes import RoutingTable, parse_routes
from specpilot.wire.samples import RequestOutcome, RequestSample

ROOT = Path(__file__).resolve().parents[3]


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
                pods += replica_pods(
                    name,
                    body,
                    ready_pods=self.ready_pods,
                    ips=self.pod_ips,
                    seen=self.pods_seen,
                    restart_seconds=self.restart_seconds,
                    now=self.clock.now,
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
        into += requests(table, self.traffic, rate=rate, seconds=seconds, end=self.clock.now.timestamp(), seq=self.seq)

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


def replica_pods(
    name: str,
    body: Json,
    *,
    ready_pods: bool,
    ips: dict[str, str],
    seen: dict[str, datetime],
    restart_seconds: float,
    now: datetime,
) -> list[PodView]:
    """A pod per replica of the Deployment `name`, each with an IP kept in `ips` and first seen as kept in
    `seen`; all Ready when `ready_pods` (and the Deployment's status says so), a restart fallback's replicas
    only `restart_seconds` after they were first seen."""
    replicas = int(body["spec"].get("replicas", 1))
    if ready_pods:
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
    pods: list[PodView] = []
    for index in range(replicas):
        pod = f"{name}-{index}"
        ip = ips.setdefault(pod, f"198.18.0.{len(ips) + 1}")
        since = seen.setdefault(pod, now) + timedelta(
            seconds=restart_seconds if role == REHEARSAL_RESTART_COMPONENT else 0
        )
        ready = ready_pods and since <= now
        pods.append(PodView(pod, component, (), ip if ready else None, role=role, ready_since=since if ready else None))
    return pods


def requests(
    table: RoutingTable | None,
    traffic: Traffic,
    *,
    rate: float,
    seconds: float,
    end: float,
    seq: Iterator[int],
) -> list[RequestSample]:
    """`seconds` of requests per scope at `rate`, arriving up to `end`, split between the arms as `table` says
    and spread evenly in time, the mirrored arm sent a copy of each speculative one at the same moment; each
    arm as fast as `traffic` says at its load per replica (a request may finish after `end`)."""
    routes = table.scopes if table is not None else ()
    out: list[RequestSample] = []
    per_replica = {arm: 0.0 for arm in Arm}
    for route in routes:
        for arm in Arm:
            per_replica[arm] += rate * route.weights.of(arm) / 100  # one replica per arm here
        if route.mirror is not None:
            per_replica[route.mirror] += rate * route.weights.of(Arm.SPECULATIVE) / 100
    for route in routes:
        count = round(rate * seconds)
        for index in range(count):
            arm = pick_arm(route.weights, (index * GOLDEN) % 1)  # the router's split, spread evenly in time
            arrived = end - seconds + index * seconds / count
            copies = (route.mirror,) if arm is Arm.SPECULATIVE and route.mirror is not None else ()
            for served in (arm, *copies):
                out.append(_sample(traffic, served, per_replica[served], scope=route.name, seq=next(seq), at=arrived))
    return out


def _sample(traffic: Traffic, arm: Arm, load: float, *, scope: str, seq: int, at: float) -> RequestSample:
    """One request of `scope` that arrived at `arm` at `at`, at its offered `load` per replica."""
    curve = traffic.curves.get(arm)
    per_token = curve(load) if curve else traffic.seconds_per_token[arm]
    decode = per_token * (traffic.tokens - 1)
    e2e = 0.05 + decode
    return RequestSample(
        seq=seq,
        at=at,
        scope=scope,
        arm=arm,
        endpoint="198.18.0.9:8000",
        model="demo",
        stream=True,
        status=502 if arm in traffic.failing else 200,
        outcome=RequestOutcome.UPSTREAM_ERROR if arm in traffic.failing else RequestOutcome.OK,
        e2e=e2e,
        ttft=0.05,
        output_tokens=traffic.tokens,
        prompt_tokens=20,
        tokens_from_usage=True,
        decode=decode,
        deadline_met=load <= traffic.capacity.get(arm, float("inf")),
        fallback=None,
    )


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
