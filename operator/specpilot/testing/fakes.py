"""Fakes of the controller's ports: the API server, the routing table's owner, the evidence store, the
quality checks, the engines' figures and the routers' samples.

The API server is an in-memory store that keeps generations as a real one does (a Deployment's
moves only when its spec changes) and marks what is ready when told to; routers, engines, probes
and webhooks answer from what the test sets. Time is a clock the test moves: nothing sleeps.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from specpilot.analysis.evidence import Evidence
from specpilot.analysis.probes import CaseTally
from specpilot.analysis.quality import ProbeResult, WebhookResult, case_key
from specpilot.analysis.stats import BucketQuantile
from specpilot.analysis.window import ArmEngine
from specpilot.api.pilot import KIND
from specpilot.api.spec import Analysis, ProbeCase, ProbeKind, Probes, Webhook
from specpilot.controller.core.measurements import EngineReadings, Queried
from specpilot.controller.core.objects import PilotRef
from specpilot.controller.core.router_objects import render_routes_configmap
from specpilot.controller.kube import ApiError
from specpilot.controller.ports import Pods, Served
from specpilot.fetch.scrape import ReadFailure
from specpilot.wire.names import (
    MEASURED_ARMS,
    Arm,
)
from specpilot.wire.routes import RoutingTable
from specpilot.wire.samples import RequestSample, SamplesPage

Json = dict[str, Any]
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
