"""The frozen engine every arm shares: the engine itself, its pod template, or a Deployment a team
already runs."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import ConfigDict, Field, StringConstraints

from specpilot.api.common import ApiModel, KubeObject, Quantity, Rule, cel
from specpilot.api.podschema import Probe, SecurityContext, Volume
from specpilot.api.spec.secretref import SecretKeySelector
from specpilot.api.spec.spec_fields import DeploymentName, ExtraArgs, ModelRef, Name, Revision, TensorParallelSize
from specpilot.wire.batchschedule import VllmRelease

GPU_RESOURCE = "nvidia.com/gpu"


class EnvVarSource(ApiModel):
    """Where an environment variable's value comes from."""

    secret_key_ref: SecretKeySelector
    """Take the value from a Secret's key (for example HF_TOKEN for gated models)."""


ENV_VALUE_OR_SOURCE = Rule(
    cel="!(has(self.value) && has(self.valueFrom))",
    message="set either value or valueFrom, not both",
    reason="FieldValueForbidden",
    field_path=".valueFrom",
)


class EnvVar(ApiModel):
    """An environment variable of the engine container."""

    model_config = ConfigDict(json_schema_extra=cel(ENV_VALUE_OR_SOURCE))

    name: Annotated[str, StringConstraints(pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$", max_length=128)]
    """Variable name."""
    value: Annotated[str, StringConstraints(max_length=4096)] | None = None
    """Literal value."""
    value_from: EnvVarSource | None = None
    """Source of the value; mutually exclusive with value."""


class Resources(ApiModel):
    """Compute resources of a container, as in its `resources`."""

    requests: Annotated[dict[str, Quantity], Field(max_length=16)] = {}
    """Minimum resources, e.g. cpu: "8", memory: 64Gi."""
    limits: Annotated[dict[str, Quantity], Field(max_length=16)] = {}
    """Maximum resources. For the engine, `nvidia.com/gpu`, when set, must equal its tensorParallelSize:
    vLLM uses one GPU per tensor-parallel rank, and the GPU budget of every arm is computed that way."""


class TolerationOperator(StrEnum):
    """How a toleration matches a taint's value."""

    EXISTS = "Exists"
    EQUAL = "Equal"


class TaintEffect(StrEnum):
    """The taint effect a toleration matches."""

    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


TOLERATION_EXISTS_WITHOUT_VALUE = Rule(
    cel="self.operator != 'Exists' || !has(self.value)",
    message="value must be empty when operator is Exists",
    reason="FieldValueForbidden",
    field_path=".value",
)


class Toleration(ApiModel):
    """A toleration, as in a Pod's `tolerations`."""

    model_config = ConfigDict(json_schema_extra=cel(TOLERATION_EXISTS_WITHOUT_VALUE))

    key: Annotated[str, StringConstraints(max_length=316)] | None = None
    """Taint key to tolerate; empty with operator Exists tolerates every taint."""
    operator: TolerationOperator = TolerationOperator.EQUAL
    """Exists or Equal."""
    value: Annotated[str, StringConstraints(max_length=63)] | None = None
    """Taint value to match when operator is Equal."""
    effect: TaintEffect | None = None
    """Taint effect to match; empty matches all effects."""
    toleration_seconds: Annotated[int, Field(strict=True, ge=0, le=86400)] | None = None
    """How long a NoExecute taint is tolerated before eviction."""


class EngineContainerTemplate(ApiModel):
    """What the engine container takes from the pod template besides what the operator renders."""

    volume_mounts: Annotated[list[KubeObject], Field(max_length=32)] = []
    """Mounts of the template's volumes, e.g. the model weights at the path spec.engine.model names."""
    security_context: SecurityContext | None = None
    """The container's security context; the operator's hardening (no privilege escalation, no
    capabilities) wins where they differ. Privileged, root, added capabilities and unconfined profiles
    are refused."""
    startup_probe: Probe | None = None
    """A startup probe, e.g. long enough for a large model to load. A host on its httpGet or tcpSocket is
    refused: probes reach the pod's own IP."""
    readiness_probe: Probe | None = None
    """Replaces the operator's readiness probe (GET /health every 2 s)."""
    liveness_probe: Probe | None = None
    """A liveness probe."""


TOKEN_NEEDS_OPT_IN = Rule(
    cel="!has(self.automountServiceAccountToken) || !self.automountServiceAccountToken"
    " || (has(self.allowServiceAccountToken) && self.allowServiceAccountToken)",
    message="automountServiceAccountToken gives the engine image the ServiceAccount's token: set "
    "allowServiceAccountToken: true to confirm it, or leave automountServiceAccountToken unset",
    reason="FieldValueForbidden",
    field_path=".automountServiceAccountToken",
)


class PodTemplate(ApiModel):
    """Fields of the engine pods' template that a vLLM pod may need and the rest of spec.engine does not
    express, merged under what the operator renders: where both set a field, the operator's wins, except
    the probes, which replace its own."""

    model_config = ConfigDict(json_schema_extra=cel(TOKEN_NEEDS_OPT_IN))

    labels: Annotated[dict[str, Annotated[str, StringConstraints(max_length=63)]], Field(max_length=32)] = {}
    """Pod labels, e.g. for a service mesh."""
    annotations: Annotated[dict[str, Annotated[str, StringConstraints(max_length=4096)]], Field(max_length=32)] = {}
    """Pod annotations, e.g. for log shippers."""
    service_account_name: Name | None = None
    """The engine pods' ServiceAccount, e.g. for a workload identity."""
    automount_service_account_token: Annotated[bool, Field(strict=True)] = False
    """Mount the ServiceAccount's token into the engine pods; without it none is (the engine calls no
    Kubernetes API). Needs allowServiceAccountToken."""
    allow_service_account_token: Annotated[bool, Field(strict=True)] = False
    """Confirms automountServiceAccountToken. Whoever may edit this pilot chooses the engine's image and
    command, so a mounted token lets any code they choose call the Kubernetes API as serviceAccountName,
    with everything it is granted: set it only for a ServiceAccount made for the engine and granted no
    more than it needs. The operator's own ServiceAccount is refused whatever this says."""
    image_pull_secrets: Annotated[list[Name], Field(max_length=16)] = []
    """Secrets to pull spec.engine.image with."""
    priority_class_name: Annotated[str, StringConstraints(max_length=253)] | None = None
    """The pods' priority class."""
    affinity: KubeObject | None = None
    """Node and pod (anti-)affinity."""
    topology_spread_constraints: Annotated[list[KubeObject], Field(max_length=8)] = []
    """How the pods spread over zones or nodes."""
    security_context: SecurityContext | None = None
    """The pod's security context. The operator sets runAsNonRoot and the runtime's default seccomp
    profile, and without a runAsUser runs the pods as user 1000 with HOME on an emptyDir; root and
    unconfined profiles are refused."""
    volumes: Annotated[list[Volume], Field(max_length=32)] = []
    """Volumes, e.g. a PersistentVolumeClaim holding the model weights; hostPath and other volumes that
    reach the node are refused."""
    container: EngineContainerTemplate = EngineContainerTemplate()
    """The engine container's part."""


class Sampling(ApiModel):
    """Sampling parameters the pilot's traffic is expected to use.

    Gains from speculation depend on them (greedy decoding accepts more draft tokens than high
    temperatures), so they are part of the frozen engine. They are not imposed on clients: the router
    counts requests that deviate, and the report states the envelope they define."""

    temperature: Annotated[float, Field(strict=True, ge=0, le=2)] | None = None
    """Expected temperature; 0 means greedy decoding."""
    top_p: Annotated[float, Field(strict=True, gt=0, le=1)] | None = None
    """Expected nucleus-sampling probability mass."""
    top_k: Annotated[int, Field(strict=True, ge=-1, le=1000)] | None = None
    """Expected top-k; -1 disables it."""


def _gpus_match(resources: str) -> str:
    gpus = f"self.resources.{resources}['{GPU_RESOURCE}']"
    return (
        f"(!has(self.resources.{resources}) || !('{GPU_RESOURCE}' in self.resources.{resources})"
        f" || {gpus} == self.tensorParallelSize || {gpus} == string(self.tensorParallelSize))"
    )


GPU_PER_RANK = Rule(
    cel=f"!has(self.resources) || ({_gpus_match('limits')} && {_gpus_match('requests')})",
    message=f"{GPU_RESOURCE} in limits and requests must equal tensorParallelSize (one GPU per rank)",
    field_path=".resources",
)


class Engine(ApiModel):
    """The frozen engine every arm shares: one switch changes between arms, nothing else.

    The operator renders `<command> <model> --port 8000` plus the flags below; a change here restarts
    the whole pilot, since earlier measurements no longer compare like with like."""

    model_config = ConfigDict(json_schema_extra=cel(GPU_PER_RANK))

    image: Annotated[str, StringConstraints(min_length=1, max_length=512)]
    """Container image of the engine, e.g. vllm/vllm-openai:v0.33.0."""
    command: Annotated[
        list[Annotated[str, StringConstraints(min_length=1, max_length=256)]],
        Field(min_length=1, max_length=8),
    ] = ["vllm", "serve"]
    """Command that starts the server and accepts `vllm serve` arguments."""
    model: ModelRef
    """Target model: a Hugging Face repository id or a path in the image."""
    revision: Revision | None = None
    """Target model revision (branch, tag or commit); pin a commit for a reproducible pilot."""
    tokenizer: ModelRef | None = None
    """Tokenizer, when it differs from the model."""
    served_model_name: ModelRef | None = None
    """Model name clients send and metrics carry; defaults to the model."""
    max_model_len: Annotated[int, Field(strict=True, ge=1, le=16_777_216)] | None = None
    """Context length limit in tokens; defaults to the model's."""
    tensor_parallel_size: TensorParallelSize = 1
    """GPUs per replica, one per tensor-parallel rank."""
    gpu_memory_utilization: Annotated[float, Field(strict=True, gt=0, le=1)] | None = None
    """Fraction of GPU memory vLLM may use; vLLM's default is 0.92."""
    extra_args: ExtraArgs = []
    """Further `vllm serve` flags shared by every arm, e.g. --max-num-seqs=256. Flags the operator
    renders from the spec are refused here."""
    env: Annotated[list[EnvVar], Field(max_length=32)] = []
    """Environment variables of the engine container."""
    resources: Resources = Resources()
    """Resources of one replica."""
    node_selector: Annotated[dict[str, Annotated[str, StringConstraints(max_length=63)]], Field(max_length=32)] = {}
    """Node labels the engine pods require, e.g. a GPU product label."""
    tolerations: Annotated[list[Toleration], Field(max_length=32)] = []
    """Tolerations of the engine pods."""
    sampling: Sampling = Sampling()
    """Sampling parameters the traffic is expected to use."""
    pod_template: PodTemplate | None = None
    """What else the engine pods need: volumes, pull secrets, a ServiceAccount, placement, probes,
    labels and annotations. Its pod fields are part of the frozen engine: a change to them restarts the
    scopes from ordinary decoding."""
    vllm_version: VllmRelease = VllmRelease.V0_33
    """Which vLLM the engine image runs ("0.33" or "main", quoted), for the name vLLM reads the draft's
    schedule under in `--speculative-config`: "0.33" num_speculative_tokens_per_batch_size, "main" (a build
    from vLLM's main branch) speculative_token_schedule, its later name."""


class WorkloadApiVersion(StrEnum):
    APPS_V1 = "apps/v1"


class WorkloadKind(StrEnum):
    DEPLOYMENT = "Deployment"


class WorkloadRef(ApiModel):
    """The vLLM Deployment a team already runs, piloted as it is: it stays production's baseline and
    is never edited; every other arm runs a copy of its pod template, the speculative arm with the one
    switch `--speculative-config` added to the engine container."""

    api_version: WorkloadApiVersion = WorkloadApiVersion.APPS_V1
    """apps/v1."""
    kind: WorkloadKind = WorkloadKind.DEPLOYMENT
    """Deployment, in the pilot's namespace."""
    name: DeploymentName
    """The Deployment's name."""
    container: Name | None = None
    """The engine container; by default the one running `vllm serve` (or vLLM's OpenAI server module)."""
    sampling: Sampling = Sampling()
    """Sampling parameters the traffic is expected to use."""
    vllm_version: VllmRelease = VllmRelease.V0_33
    """Which vLLM the Deployment's image runs ("0.33" or "main", quoted), as engine.vllmVersion."""
