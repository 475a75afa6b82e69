"""What the controller's shell talks to, one small interface per thing that varies.

Each has the implementation the operator runs (named beside it) and a fake the shell's tests use.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from specpilot.analysis.evidence import Evidence
from specpilot.analysis.quality import ProbeResult, WebhookResult
from specpilot.api.spec import Analysis, ProbeCase, Probes, Webhook
from specpilot.controller.core.measurements import EngineReadings
from specpilot.controller.core.objects import PilotRef
from specpilot.fetch.scrape import ReadFailure
from specpilot.wire.names import Arm
from specpilot.wire.routes import RoutingTable
from specpilot.wire.samples import SamplesPage

Json = dict[str, Any]
Pods = Sequence[tuple[str, str]]  # (pod name, IP) of ready pods


class KubeApi(Protocol):
    """The Kubernetes calls the operator makes (`kube.Kube`); each raises `kube.ApiError` on refusal."""

    async def apply(self, obj: Json, *, dry_run: bool = False) -> Json: ...

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> Json | None: ...

    async def pods(self, namespace: str, selector: Mapping[str, str]) -> list[Json]: ...

    async def merge_patch(self, api_version: str, kind: str, namespace: str, name: str, body: Json) -> bool: ...

    async def delete(self, api_version: str, kind: str, namespace: str, name: str) -> bool: ...

    async def replace_status(self, path: str, status: Json) -> Json: ...

    async def patch_metadata(self, path: str, metadata: Json) -> None: ...

    async def event(self, involved: Json, *, type: str, reason: str, message: str) -> None: ...


@dataclass(frozen=True)
class Served:
    """A flip's read-back: the seconds waited, and the routers that never confirmed it."""

    seconds: float
    unconfirmed: tuple[str, ...] = ()


class RouteOwner(Protocol):
    """The routing table's owner (`route_owner.ConfigMapRoutes`): it writes the table and hears from every
    router which generation it serves."""

    async def write(self, ref: PilotRef, table: RoutingTable) -> Json:
        """Write the table; the API server's answer for its ConfigMap."""
        ...

    async def served(self, routers: Sequence[str], generation: int) -> Served:
        """How long until every router (by address) served `generation`, or which had not when it gave up."""
        ...


class EvidenceStore(Protocol):
    """Where a pilot's evidence is kept across restarts (`evidence.ConfigMapEvidence`)."""

    async def load(self, ref: PilotRef) -> Evidence | None: ...

    async def store(self, ref: PilotRef, evidence: Evidence) -> None:
        """Keep the store (written only when it changed)."""
        ...

    def forget(self, ref: PilotRef) -> None: ...


class QualityGates(Protocol):
    """Probe rounds against both arms and business webhooks (`quality_gates.HttpQuality`)."""

    async def probe(
        self,
        *,
        baseline: str,
        speculative: str,
        probes: Probes,
        cases: Sequence[ProbeCase],
        model: str,
        namespace: str,
    ) -> ProbeResult: ...

    async def ask(
        self, webhooks: Sequence[Webhook], summary: Mapping[str, Any], *, namespace: str
    ) -> list[WebhookResult]: ...


class EngineSource(Protocol):
    """Where the engines' figures come from: direct scrapes of the arms' pods (`collect.ScrapeEngines`)
    or a Prometheus (`collect.PrometheusEngines`)."""

    async def read(
        self,
        arms: Mapping[Arm, Pods],
        *,
        pilot: tuple[str, str],
        analysis: Analysis,
        horizon: timedelta,
        now: datetime,
    ) -> EngineReadings:
        """Both judged arms' figures as of `now`, for the pilot (namespace, name), kept as far back as
        `horizon` where the source keeps them."""
        ...


class SampleReader(Protocol):
    """A router's per-request samples after a cursor (`collect.HttpSamples`)."""

    async def read(self, address: str, *, cursor: int, limit: int) -> SamplesPage | ReadFailure: ...
