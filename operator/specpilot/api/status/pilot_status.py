"""The pilot's status as a whole: its phase and conditions, and every part's status."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated

from pydantic import Field, StringConstraints

from specpilot.api.common import ApiModel
from specpilot.api.status.arms_status import (
    ArmsStatus,
    ProductionGuard,
    RouterStatus,
    RoutesStatus,
    TakeoverStatus,
    WorkloadStatus,
)
from specpilot.api.status.decision_status import Decision
from specpilot.api.status.rehearsal_status import RehearsalStatus
from specpilot.api.status.scopes_status import FallbackRecord, ScopeStatus
from specpilot.api.status.status_fields import Count, Sentence

FALLBACK_LIMIT = 20

Reason = Annotated[
    str, StringConstraints(pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$", min_length=1, max_length=1024)
]


class Phase(StrEnum):
    """The pilot's phase, named after the Argo CD health status it maps onto."""

    PROGRESSING = "Progressing"
    """Arms are starting, or at least one scope is still piloting; rollbacks happen within this phase."""
    HEALTHY = "Healthy"
    """Arms ready and every scope settled: speculative at its last stage, held, or rolled back with a
    decision stated."""
    DEGRADED = "Degraded"
    """The spec is invalid, or an arm or the router is unavailable."""
    SUSPENDED = "Suspended"
    """spec.suspend is set."""


class ConditionType(StrEnum):
    """Condition types the operator sets."""

    READY = "Ready"
    ARMS_READY = "ArmsReady"
    PROGRESSING = "Progressing"
    DEGRADED = "Degraded"
    SUSPENDED = "Suspended"
    INVALID_SPEC = "InvalidSpec"
    CONTROLLED = "Controlled"
    PRODUCTION_SATURATED = "ProductionSaturated"
    SPEED_ONLY = "SpeedOnly"


class ConditionStatus(StrEnum):
    """Whether a condition holds."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(ApiModel):
    """One aspect of the pilot's state, shaped as metav1.Condition."""

    type: Annotated[str, StringConstraints(pattern=r"^([a-z0-9.-]+/)?[A-Za-z0-9_.-]+$", max_length=316)]
    """Ready, ArmsReady, Progressing, Degraded, Suspended or InvalidSpec."""
    status: ConditionStatus
    """True, False or Unknown."""
    observed_generation: Count | None = None
    """The spec generation the condition was set for."""
    last_transition_time: datetime
    """When status last changed."""
    reason: Reason
    """Machine-readable CamelCase reason."""
    message: Annotated[str, StringConstraints(max_length=32768)] = ""
    """Human-readable detail."""


class SpeculationPilotStatus(ApiModel):
    """Observed state of a pilot."""

    observed_generation: Count | None = None
    """The spec generation last reconciled."""
    phase: Phase | None = None
    """Progressing, Healthy, Degraded or Suspended (as Argo CD health)."""
    conditions: Annotated[
        list[Condition],
        Field(
            max_length=16,
            json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
        ),
    ] = []
    """Ready, ArmsReady, Progressing, Degraded, Suspended and InvalidSpec."""
    arms: ArmsStatus | None = None
    """The arms' deployments."""
    router: RouterStatus | None = None
    """The router's deployment."""
    routes: RoutesStatus | None = None
    """The routing table last written."""
    scopes: Annotated[list[ScopeStatus], Field(max_length=16)] = []
    """Per-scope progress, in spec order."""
    speculative_scopes: Annotated[str, StringConstraints(pattern=r"^[0-9]+/[0-9]+$", max_length=16)] | None = None
    """Speculative scopes out of all scopes, e.g. 2/5 (shown by kubectl get)."""
    fallbacks: Annotated[list[FallbackRecord], Field(max_length=FALLBACK_LIMIT)] = []
    """The latest rollbacks, newest last, at most 20."""
    fallbacks_dropped: Count = 0
    """Older rollbacks no longer listed in fallbacks, which keeps the newest 20 so that status stays
    bounded however long the pilot runs (each rollback's Event said it too)."""
    decision: Decision | None = None
    """The conclusion, once stated."""
    rehearsal: RehearsalStatus | None = None
    """The peak rehearsal, once due."""
    workload: WorkloadStatus | None = None
    """spec.workloadRef's Deployment as last read."""
    takeover: TakeoverStatus | None = None
    """spec.router.takeover's Service, once taken over (kept until it is restored)."""
    production: ProductionGuard | None = None
    """The production guard's windows, once read."""
    forecast_problem: Sentence | None = None
    """Why spec.analysis.forecast's step costs cannot be read (its ConfigMap missing or unfittable)."""
