"""SpeculationPilot status: everything the operator knows, so that a restarted operator resumes exactly.

The operator writes it through the status subresource, once per tick. Phases map one to one onto Argo
CD health; conditions follow metav1.Condition, so `kubectl wait --for=condition=Ready` works. One module
per part; the models are named here too, since `status` is the API's one name for what a pilot reports."""

from __future__ import annotations

from specpilot.api.status.arms_status import (
    ArmsStatus,
    ArmStatus,
    ProductionGuard,
    RouterStatus,
    RoutesStatus,
    TakeoverPhase,
    TakeoverStatus,
    WorkloadStatus,
)
from specpilot.api.status.decision_status import (
    AdoptionBound,
    AlternativeDecision,
    AlternativeVerdict,
    Bound,
    Decision,
    DecisionOutcome,
    DecisionTrigger,
    DeferReason,
    Envelope,
    LimitFailure,
    LoadSpan,
    ScopeDecision,
)
from specpilot.api.status.pilot_status import Condition, ConditionStatus, ConditionType, Phase, SpeculationPilotStatus
from specpilot.api.status.rehearsal_status import (
    ArmStepFigures,
    CrossoverBracket,
    RehearsalPhase,
    RehearsalStatus,
    RehearsalStep,
    RestartFallback,
    RoutingFlip,
    ScopeStepFigures,
)
from specpilot.api.status.scopes_status import (
    FallbackRecord,
    ScopeForecast,
    ScopeState,
    ScopeStatus,
    Verdict,
    Window,
    WindowSummary,
)

__all__ = [
    "AdoptionBound",
    "AlternativeDecision",
    "AlternativeVerdict",
    "ArmStatus",
    "ArmStepFigures",
    "ArmsStatus",
    "Bound",
    "Condition",
    "ConditionStatus",
    "ConditionType",
    "CrossoverBracket",
    "Decision",
    "DecisionOutcome",
    "DecisionTrigger",
    "DeferReason",
    "Envelope",
    "FallbackRecord",
    "LimitFailure",
    "LoadSpan",
    "Phase",
    "ProductionGuard",
    "RehearsalPhase",
    "RehearsalStatus",
    "RehearsalStep",
    "RestartFallback",
    "RouterStatus",
    "RoutesStatus",
    "RoutingFlip",
    "ScopeDecision",
    "ScopeForecast",
    "ScopeState",
    "ScopeStatus",
    "ScopeStepFigures",
    "SpeculationPilotStatus",
    "TakeoverPhase",
    "TakeoverStatus",
    "Verdict",
    "Window",
    "WindowSummary",
    "WorkloadStatus",
]
