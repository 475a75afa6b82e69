"""SpeculationPilot spec: what an SRE asks for.

One frozen engine shared by every arm; a baseline arm (production's ordinary decoding), a speculative arm
(the same engine plus one speculation config), a control arm (the baseline's engine at the speculative
arm's size, taking the same share) and an optional alternative arm on the same GPU budget; traffic
scopes piloted in stages; the analysis, quality and rollback policy that judges them. One module per
part; the models are named here too, since `spec` is the API's one name for what a pilot asks for.

Field docstrings become the CRD's descriptions, so they are written for `kubectl explain`."""

from __future__ import annotations

from specpilot.api.spec.analysis_spec import Analysis, Forecast, KvCacheUsage, QuantileRatio, Thresholds
from specpilot.api.spec.arms_spec import (
    Alternative,
    Baseline,
    BatchScheduleRange,
    Control,
    Draft,
    DraftMethod,
    Saturation,
    Speculative,
)
from specpilot.api.spec.engine_spec import (
    Engine,
    EngineContainerTemplate,
    EnvVar,
    EnvVarSource,
    PodTemplate,
    Resources,
    Sampling,
    TaintEffect,
    Toleration,
    TolerationOperator,
    WorkloadApiVersion,
    WorkloadKind,
    WorkloadRef,
)
from specpilot.api.spec.pilot_spec import SpeculationPilotSpec
from specpilot.api.spec.probes_spec import (
    Better,
    BuiltinScore,
    ProbeCase,
    ProbeKind,
    Probes,
    ProbeScore,
    ProbeTool,
    ScopeProbes,
    ScoreWebhook,
)
from specpilot.api.spec.prometheus_spec import MetricsSource, PrometheusArms, PrometheusSource
from specpilot.api.spec.quality_spec import Quality, Webhook
from specpilot.api.spec.rehearsal_spec import Burst, Peak, Rehearsal
from specpilot.api.spec.rollback_spec import Reentry, Rollback
from specpilot.api.spec.scopes_spec import (
    HeaderMatch,
    HeaderMatchType,
    PathMatch,
    PathMatchType,
    Router,
    Scope,
    ScopeMatch,
    Stage,
    Takeover,
)
from specpilot.api.spec.secretref import SecretHeader, SecretKeySelector

__all__ = [
    "Alternative",
    "Analysis",
    "Baseline",
    "BatchScheduleRange",
    "Better",
    "BuiltinScore",
    "Burst",
    "Control",
    "Draft",
    "DraftMethod",
    "Engine",
    "EngineContainerTemplate",
    "EnvVar",
    "EnvVarSource",
    "Forecast",
    "HeaderMatch",
    "HeaderMatchType",
    "KvCacheUsage",
    "MetricsSource",
    "PathMatch",
    "PathMatchType",
    "Peak",
    "PodTemplate",
    "ProbeCase",
    "ProbeKind",
    "ProbeScore",
    "ProbeTool",
    "Probes",
    "PrometheusArms",
    "PrometheusSource",
    "Quality",
    "QuantileRatio",
    "Reentry",
    "Rehearsal",
    "Resources",
    "Rollback",
    "Router",
    "Sampling",
    "Saturation",
    "Scope",
    "ScopeMatch",
    "ScopeProbes",
    "ScoreWebhook",
    "SecretHeader",
    "SecretKeySelector",
    "SpeculationPilotSpec",
    "Speculative",
    "Stage",
    "TaintEffect",
    "Takeover",
    "Thresholds",
    "Toleration",
    "TolerationOperator",
    "Webhook",
    "WorkloadApiVersion",
    "WorkloadKind",
    "WorkloadRef",
]
