"""The pilot's spec as a whole, and the rules that hold across its parts."""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field

from specpilot.api.common import ApiModel, Rule, cel
from specpilot.api.spec.analysis_spec import Analysis
from specpilot.api.spec.arms_spec import Alternative, Baseline, Control, Speculative
from specpilot.api.spec.engine_spec import Engine, Sampling, WorkloadRef
from specpilot.api.spec.quality_spec import Quality
from specpilot.api.spec.rehearsal_spec import Rehearsal
from specpilot.api.spec.rollback_spec import Rollback
from specpilot.api.spec.scopes_spec import Router, Scope
from specpilot.wire.batchschedule import VllmRelease

ALTERNATIVE_GPU_BUDGET = Rule(
    cel=(
        "!has(self.alternative) || !has(self.engine)"
        " || self.alternative.replicas * (has(self.alternative.tensorParallelSize)"
        " ? self.alternative.tensorParallelSize : self.engine.tensorParallelSize)"
        " <= self.speculative.replicas * self.engine.tensorParallelSize"
    ),
    message="the alternative arm's GPU budget (replicas x tensorParallelSize) must not exceed the speculative arm's",
    field_path=".alternative",
)
DRAFT_TENSOR_PARALLEL = Rule(
    cel=(
        "!has(self.speculative.draft.tensorParallelSize) || !has(self.engine)"
        " || self.speculative.draft.tensorParallelSize == 1"
        " || self.speculative.draft.tensorParallelSize == self.engine.tensorParallelSize"
    ),
    message="must be 1 or engine.tensorParallelSize",
    field_path=".speculative.draft.tensorParallelSize",
)
ACCEPTANCE_LENGTH_REACHABLE = Rule(
    cel=(
        "!has(self.analysis.thresholds.minAcceptanceLength) || self.analysis.thresholds.minAcceptanceLength"
        " <= 1.0 + double(self.speculative.draft.numSpeculativeTokens)"
    ),
    message="must not exceed 1 + speculative.draft.numSpeculativeTokens",
    field_path=".analysis.thresholds.minAcceptanceLength",
)
DEFAULT_SCOPE_EXISTS = Rule(
    cel="!has(self.router.defaultScope) || self.scopes.exists(s, s.name == self.router.defaultScope)",
    message="must name one of the scopes",
    field_path=".router.defaultScope",
)
DEADLINE_WITHIN_TIMEOUT = Rule(
    cel=("self.scopes.all(s, !has(s.deadline) || duration(s.deadline) <= duration(self.router.requestTimeout))"),
    message="a scope's deadline must not exceed router.requestTimeout",
    field_path=".scopes",
)
STAGE_SPANS_INTERVAL = Rule(
    cel=("self.scopes.all(s, s.stages.all(st, duration(st.minDuration) >= duration(self.analysis.interval)))"),
    message="a stage's minDuration must be at least analysis.interval",
    field_path=".scopes",
)
STAGE_SPANS_SAMPLES = Rule(
    cel="self.scopes.all(s, s.stages.all(st, st.minRequests >= self.analysis.minSamples))",
    message="a stage's minRequests must be at least analysis.minSamples",
    field_path=".scopes",
)
ALTERNATIVE_DIFFERS = Rule(
    cel=(
        "!has(self.alternative) || !has(self.engine)"
        " || (has(self.alternative.extraArgs) && size(self.alternative.extraArgs) > 0)"
        " || self.alternative.replicas != self.baseline.replicas"
        " || (has(self.alternative.tensorParallelSize)"
        " && self.alternative.tensorParallelSize != self.engine.tensorParallelSize)"
    ),
    message="the alternative arm must differ from the baseline (replicas, tensorParallelSize or extraArgs)",
    field_path=".alternative",
)

ALTERNATIVE_NEEDS_CONTROL = Rule(
    cel="!has(self.alternative) || !has(self.control) || self.control.enabled",
    message=(
        "the alternative arm is judged against the control arm at the same share: set control.enabled: true, "
        "or remove alternative"
    ),
    field_path=".alternative",
)
ALTERNATIVE_SHARE_FITS = Rule(
    cel="!has(self.alternative) || self.scopes.all(s, s.stages.all(st, st.weight <= 50))",
    message=(
        "the alternative arm takes the speculative arm's share again, so with an alternative arm a stage's "
        "weight must be at most 50"
    ),
    field_path=".scopes",
)
REHEARSAL_NEEDS_CONTROL = Rule(
    cel="!has(self.rehearsal) || !has(self.control) || self.control.enabled",
    message="the rehearsal compares the speculative arm with the control arm at the same load: "
    "set control.enabled: true, or remove rehearsal",
    field_path=".rehearsal",
)
REHEARSAL_STEP_SPANS_WINDOW = Rule(
    cel="!has(self.rehearsal) || duration(self.rehearsal.stepDuration) >= duration(self.analysis.window)",
    message="a rehearsal step is read over its last analysis window: stepDuration must be at least analysis.window",
    field_path=".rehearsal.stepDuration",
)
REHEARSAL_FITS_CAP = Rule(
    cel=(
        "!has(self.rehearsal) || duration(self.rehearsal.maxDuration).getSeconds() >= "
        "(self.rehearsal.steps + (has(self.rehearsal.restart) && !self.rehearsal.restart ? 1 : 2))"
        " * duration(self.rehearsal.stepDuration).getSeconds()"
        " + (has(self.rehearsal.burst) ? duration(self.rehearsal.burst.duration).getSeconds() : 0)"
    ),
    message="must be at least (steps + 2) x stepDuration (+ burst.duration; steps + 1 without restart): the "
    "planned rehearsal (the ladder, the burst, the routing and the restart fallback at peak) must fit its cap",
    field_path=".rehearsal.maxDuration",
)
CONTROL_LABELS_GIVEN = Rule(
    cel=(
        "(has(self.control) && !self.control.enabled) || !has(self.analysis.metricsSource)"
        " || !has(self.analysis.metricsSource.prometheus.arms)"
        " || has(self.analysis.metricsSource.prometheus.arms.control)"
    ),
    message="must pick out the control arm's series too (or set control.enabled: false)",
    field_path=".analysis.metricsSource.prometheus.arms",
)

ONE_ENGINE_SOURCE = Rule(
    cel="has(self.engine) != has(self.workloadRef)",
    message="set exactly one of spec.engine (an engine described here) and spec.workloadRef (a Deployment "
    "already running vLLM)",
)
WORKLOAD_KEEPS_ITS_SIZE = Rule(
    # baseline is defaulted, and 1 is its replicas' default
    cel="!has(self.workloadRef) || self.baseline.replicas == 1",
    message="with spec.workloadRef the baseline is that Deployment at its own replicas: remove spec.baseline.replicas",
    field_path=".baseline.replicas",
)
WORKLOAD_WITHOUT_ALTERNATIVE = Rule(
    cel="!has(self.workloadRef) || !has(self.alternative)",
    message="an alternative arm changes the engine's flags or size, which spec.workloadRef leaves as the "
    "Deployment has them: remove spec.alternative, or describe the engine in spec.engine",
    field_path=".alternative",
)

PROBES_GIVEN = Rule(
    cel="!has(self.quality) || !has(self.quality.probes)"
    " || (has(self.quality.probes.prompts) ? size(self.quality.probes.prompts) : 0)"
    " + (has(self.quality.probes.cases) ? size(self.quality.probes.cases) : 0) > 0"
    " || self.scopes.all(s, has(s.probes))",
    message="set prompts or cases, unless every scope has its own probes.cases",
    field_path=".quality.probes",
)
SCOPE_PROBES_NEED_PROBES = Rule(
    cel="!self.scopes.exists(s, has(s.probes)) || (has(self.quality) && has(self.quality.probes))",
    message="a scope's probes need quality.probes (its interval and maxTokens apply)",
    field_path=".quality.probes",
)
SPEC_RULES = (
    ONE_ENGINE_SOURCE,
    WORKLOAD_KEEPS_ITS_SIZE,
    WORKLOAD_WITHOUT_ALTERNATIVE,
    CONTROL_LABELS_GIVEN,
    REHEARSAL_NEEDS_CONTROL,
    REHEARSAL_STEP_SPANS_WINDOW,
    REHEARSAL_FITS_CAP,
    ALTERNATIVE_NEEDS_CONTROL,
    ALTERNATIVE_SHARE_FITS,
    ALTERNATIVE_GPU_BUDGET,
    ALTERNATIVE_DIFFERS,
    DRAFT_TENSOR_PARALLEL,
    ACCEPTANCE_LENGTH_REACHABLE,
    DEFAULT_SCOPE_EXISTS,
    DEADLINE_WITHIN_TIMEOUT,
    STAGE_SPANS_INTERVAL,
    STAGE_SPANS_SAMPLES,
    SCOPE_PROBES_NEED_PROBES,
    PROBES_GIVEN,
)


class SpeculationPilotSpec(ApiModel):
    """A staged pilot of speculative decoding for one vLLM service."""

    model_config = ConfigDict(json_schema_extra=cel(*SPEC_RULES))

    engine: Engine | None = None
    """The frozen engine shared by every arm (or spec.workloadRef)."""
    workload_ref: WorkloadRef | None = None
    """A Deployment already running vLLM, piloted as it is (or spec.engine)."""
    baseline: Baseline = Baseline()
    """The arm with ordinary decoding."""
    speculative: Speculative
    """The arm with speculative decoding."""
    control: Control = Control()
    """The arm the speculative arm is compared with: the baseline's engine at the speculative arm's size."""
    alternative: Alternative | None = None
    """An optional third arm on the same GPU budget."""
    router: Router = Router()
    """The scope router in front of the arms."""
    scopes: Annotated[
        list[Scope],
        Field(
            min_length=1,
            max_length=16,
            json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
        ),
    ]
    """Traffic scopes, tried in order; names are unique."""
    analysis: Analysis = Analysis()
    """How windows are judged."""
    quality: Quality = Quality()
    """Quality gates."""
    rollback: Rollback = Rollback()
    """What follows a rollback."""
    rehearsal: Rehearsal | None = None
    """A peak rehearsal after the live stages (none: the pilot runs live stages only)."""
    suspend: Annotated[bool, Field(strict=True)] = False
    """Freeze the pilot: stages stop advancing and no new windows are judged; routing stays as is."""

    @property
    def speed_only(self) -> list[str]:
        """The scopes judged without a quality gate: no probe and no webhook checks their answers."""
        gated = self.quality.probes is not None or bool(self.quality.webhooks)
        return [] if gated else [scope.name for scope in self.scopes]

    @property
    def served_model(self) -> str:
        """The model name clients send to an engine described in spec.engine."""
        assert self.engine is not None, "a workload's is read from its Deployment"
        return self.engine.served_model_name or self.engine.model

    @property
    def sampling(self) -> Sampling:
        """The sampling parameters the traffic is expected to use, wherever the engine is named."""
        source = self.engine or self.workload_ref
        return source.sampling if source is not None else Sampling()

    @property
    def vllm_release(self) -> VllmRelease:
        """The vLLM the engine runs, wherever the engine is named."""
        source = self.engine or self.workload_ref
        return source.vllm_version if source is not None else VllmRelease.V0_33
