"""What one tick of a pilot knows: the pilot as read, its children and pods, one frozen copy of the
measurements, the quality gates' latest answers, the evidence so far, what this process last wrote,
and `now`. The shell gathers it once; `plan` decides from it alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from specpilot.analysis.evidence import Evidence
from specpilot.analysis.quality import ProbeResult, WebhookResult
from specpilot.api.spec import SpeculationPilotSpec
from specpilot.api.status import SpeculationPilotStatus
from specpilot.api.validate import Problem, validate
from specpilot.controller.core.measurements import Measurements
from specpilot.controller.core.objects import PilotRef
from specpilot.controller.core.observe import ChildSummary, PodTrouble, PodView
from specpilot.controller.core.policy import DEFAULT, Policy
from specpilot.controller.core.workload_ref import Workload

Key = tuple[str, str]  # (kind, name) of a child


@dataclass(frozen=True)
class Child:
    """A child to delete."""

    api_version: str
    kind: str
    name: str


@dataclass(frozen=True)
class Observation:
    """A pilot's children and pods as the operator's indices hold them, and the pilot's annotations."""

    children: Mapping[Key, ChildSummary]
    pods: Sequence[PodView] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def troubles(self) -> list[PodTrouble]:
        return [trouble for pod in self.pods for trouble in pod.troubles]

    def ready(self, component: str) -> list[tuple[str, str]]:
        """(pod name, IP) of the ready pods of an arm (an Arm value) or of the router."""
        return [(pod.name, pod.ready_ip) for pod in self.pods if pod.component == component and pod.ready_ip]

    def ready_since(self, role: str) -> datetime | None:
        """When the earliest of the ready pods with this component label became Ready."""
        return min((pod.ready_since for pod in self.pods if pod.role == role and pod.ready_since), default=None)

    def count(self, component: str) -> int:
        """Pods of an arm or of the router that exist, ready or not."""
        return sum(1 for pod in self.pods if pod.component == component)


@dataclass(frozen=True)
class Applied:
    """What this process last applied for one child: the desired object's hash, and the generation
    the server gave it (a higher generation seen later means someone else edited it)."""

    digest: str
    generation: int


@dataclass(frozen=True)
class Written:
    """What this process wrote for a pilot. Lost on a restart, which costs one rewrite and no Event."""

    applied: Mapping[Key, Applied] = field(default_factory=dict)
    routes: tuple[str, datetime] | None = None  # (table hash, when) of the last routing table written

    def after(self, key: Key, applied: Applied, *, routes_hash: str | None, at: datetime) -> Written:
        """This record once `key` was applied (and, with `routes_hash`, the routing table written)."""
        return Written(
            applied={**self.applied, key: applied},
            routes=(routes_hash, at) if routes_hash is not None else self.routes,
        )


@dataclass(frozen=True)
class Pilot:
    """The pilot object as read: who it is, its spec (or why it is refused) and its last status."""

    ref: PilotRef
    generation: int
    spec: SpeculationPilotSpec | None  # None while `problems` refuse it
    problems: tuple[Problem, ...]
    status: SpeculationPilotStatus | None  # None when there is none, or none this version can read
    deleting: bool = False


def read_pilot(
    body: Mapping[str, Any], *, last_written: SpeculationPilotStatus | None = None, policy: Policy = DEFAULT
) -> Pilot:
    """The pilot from its body, judged by the API's rules and the operator's policy, its URLs as the
    operator calls them; `last_written` (this process's last status write) wins over a status that a
    lagging watch still shows."""
    meta = body["metadata"]
    ref = PilotRef(name=meta["name"], namespace=meta["namespace"], uid=meta["uid"])
    problems = tuple(validate(body))
    spec = None if problems else policy.admit(SpeculationPilotSpec.from_wire(body["spec"]), ref.namespace)
    if isinstance(spec, list):
        problems, spec = tuple(spec), None
    return Pilot(
        ref=ref,
        generation=int(meta.get("generation") or 0),
        spec=spec,
        problems=problems,
        status=last_written or status_of(body),
        deleting=bool(meta.get("deletionTimestamp")),
    )


def status_of(body: Mapping[str, Any]) -> SpeculationPilotStatus | None:
    try:
        return SpeculationPilotStatus.from_wire(body["status"]) if body.get("status") else None
    except ValidationError:
        return None  # a status this version cannot read is rebuilt from what is observed


@dataclass(frozen=True)
class Snapshot:
    """Everything one tick decides from."""

    pilot: Pilot
    seen: Observation
    now: datetime
    router_image: str
    measurements: Measurements = field(default_factory=Measurements)
    probe: ProbeResult | None = None  # the probe rounds so far
    webhooks: Mapping[str, Sequence[WebhookResult]] = field(default_factory=dict)  # by scope, for due windows
    evidence: Evidence | None = None  # the evidence store as last stored
    workload: Workload | None = None  # spec.workloadRef's Deployment, as read this tick
    service: Mapping[str, Any] | None = None  # spec.router.takeover's Service, as read this tick
    forecast_config: Mapping[str, Any] | None = None  # spec.analysis.forecast's ConfigMap, as read this tick
    written: Written = field(default_factory=Written)
