"""The deployments a pilot runs or borrows: its arms, router and routing table, spec.workloadRef's
Deployment, the Service it takes over, and the guard on production's baseline."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated

from pydantic import Field, StringConstraints

from specpilot.api.common import ApiModel, KubeObject
from specpilot.api.status.status_fields import Count, Sentence


class ArmStatus(ApiModel):
    """One arm's deployment."""

    replicas: Count = 0
    """Desired engine replicas."""
    ready_replicas: Count = 0
    """Engine replicas that pass their readiness check."""
    gpus: Count = 0
    """GPUs the arm holds (replicas x tensor parallel size)."""
    config_hash: Annotated[str, StringConstraints(max_length=64)] | None = None
    """Hash of the rendered engine configuration; equal hashes mean identical arms."""
    speculative_config: Annotated[str, StringConstraints(max_length=4096)] | None = None
    """The `--speculative-config` the arm runs with, as rendered (the speculative arm's alone), a schedule
    under the key that engine.vllmVersion names."""


class RouterStatus(ApiModel):
    """The router's deployment."""

    replicas: Count = 0
    """Desired router replicas."""
    ready_replicas: Count = 0
    """Router replicas that pass their readiness check."""


class RoutesStatus(ApiModel):
    """The routing table last written to the `<pilot>-routes` ConfigMap."""

    generation: Count = 0
    """Increases whenever the table's content changes; the router reports the generation it uses."""
    hash: Annotated[str, StringConstraints(max_length=64)] | None = None
    """Hash of the table's content (scopes, matches, weights, deadlines)."""


class ArmsStatus(ApiModel):
    """The arms' deployments."""

    baseline: ArmStatus = ArmStatus()
    """The production baseline: serves what the pilot does not take; watched, not compared."""
    speculative: ArmStatus = ArmStatus()
    """The speculative arm."""
    control: ArmStatus | None = None
    """The control arm the speculative arm is compared with; absent when the pilot runs without one."""
    alternative: ArmStatus | None = None
    """The alternative arm, when the spec has one."""


class TakeoverPhase(StrEnum):
    WAITING = "Waiting"
    RECORDED = "Recorded"
    TAKEN = "Taken"
    RESTORED = "Restored"


class TakeoverStatus(ApiModel):
    """spec.router.takeover's Service: what it selected before, and where it stands."""

    service: Annotated[str, StringConstraints(max_length=63)]
    """The Service."""
    phase: TakeoverPhase
    """Waiting (for the Service or the routers), Recorded (its original is kept here; it is re-pointed next),
    Taken (it selects the routers) or Restored (put back as it was)."""
    selector: Annotated[dict[str, Annotated[str, StringConstraints(max_length=63)]], Field(max_length=32)] = {}
    """Its original selector."""
    ports: Annotated[list[KubeObject], Field(max_length=32)] = []
    """Its original ports."""
    at: datetime | None = None
    """When the phase last changed."""
    message: Annotated[str, StringConstraints(max_length=1024)] = ""
    """Why it stands where it does."""


class WorkloadStatus(ApiModel):
    """spec.workloadRef's Deployment as the arms last copied it: what a change to it is named by."""

    name: Annotated[str, StringConstraints(max_length=253)]
    """The Deployment."""
    image: Annotated[str, StringConstraints(max_length=512)] = ""
    """Its engine container's image."""
    args: Annotated[list[Annotated[str, StringConstraints(max_length=1024)]], Field(max_length=128)] = []
    """Its engine container's command line."""


class ProductionGuard(ApiModel):
    """The production guard's hysteresis: the state it holds and the windows read against it."""

    saturated: Annotated[bool, Field(strict=True)] = False
    """Whether ProductionSaturated holds."""
    streak: Count = 0
    """Consecutive windows, up to the last, that read the other way (saturated while it has headroom,
    headroom while saturated); at spec.baseline.saturation's count the state changes."""
    read_at: datetime | None = None
    """The end of the last window read."""
    reason: Sentence = ""
    """Why the last saturated window was saturated."""
