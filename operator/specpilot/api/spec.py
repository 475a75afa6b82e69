"""SpeculationPilot spec: what an SRE asks for.

One frozen engine shared by every arm; a baseline arm (production's ordinary decoding), a speculative arm
(the same engine plus one speculation config), a control arm (the baseline's engine at the speculative
arm's size, taking the same share) and an optional alternative arm on the same GPU budget; traffic
scopes piloted in stages; the analysis, quality and rollback policy that judges them.

Field docstrings become the CRD's descriptions, so they are written for `kubectl explain`.
"""

from __future__ import annotations

import re
from datetime import timedelta
from enum import StrEnum
from itertools import pairwise
from typing import Annotated

from pydantic import ConfigDict, Field, StringConstraints

from specpilot.api.common import (
    DNS_LABEL_PATTERN,
    DNS_SUBDOMAIN_PATTERN,
    ApiModel,
    Check,
    Duration,
    KubeObject,
    Quantity,
    Rule,
    cel,
    duration_within,
)
from specpilot.api.podschema import Probe, SecurityContext, Volume
from specpilot.wire.batchschedule import BatchRange, VllmRelease
from specpilot.wire.names import SCOPE_HEADER
from specpilot.wire.profiles import CalibratedProfile

GPU_RESOURCE = "nvidia.com/gpu"

# Flags the operator renders from the spec; setting them in extraArgs would break the frozen engine,
# the speculation config or the metrics the analysis reads.
OWNED_FLAGS = (
    "--model",
    "--host",
    "--port",
    "--served-model-name",
    "--revision",
    "--tokenizer",
    "--max-model-len",
    "--tensor-parallel-size",
    "-tp",
    "--pipeline-parallel-size",
    "-pp",
    "--data-parallel-size",
    "-dp",
    "--gpu-memory-utilization",
    "--device-memory-utilization",
    "--speculative-config",
    "-sc",
    "--spec-method",
    "--spec-model",
    "--spec-tokens",
    "--disable-log-stats",
)
OWNED_FLAG_PATTERN = "^(" + "|".join(OWNED_FLAGS) + ")(=.*)?$"  # plain text: it also sits in a CEL string

ExtraArgs = Annotated[
    list[Annotated[str, StringConstraints(min_length=1, max_length=1024)]],
    Field(max_length=64),
    Check(
        Rule(
            cel=f"self.all(arg, !arg.matches('{OWNED_FLAG_PATTERN}'))",
            message="must not set flags the operator renders from the spec: " + ", ".join(OWNED_FLAGS),
        ),
        holds=lambda args: not any(re.fullmatch(OWNED_FLAG_PATTERN, arg) for arg in args),
    ),
]
Replicas = Annotated[int, Field(strict=True, ge=1, le=64)]
TensorParallelSize = Annotated[int, Field(strict=True, ge=1, le=16)]
Fraction = Annotated[float, Field(strict=True, ge=0, le=1)]
Ratio = Annotated[float, Field(strict=True, ge=0.1, le=10)]
Quantile = Annotated[float, Field(strict=True, ge=0.5, lt=1)]
Name = Annotated[str, StringConstraints(pattern=DNS_LABEL_PATTERN, min_length=1, max_length=63)]
HeaderName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$", min_length=1, max_length=128)]
ModelRef = Annotated[str, StringConstraints(min_length=1, max_length=256)]
Revision = Annotated[str, StringConstraints(min_length=1, max_length=128)]
WebhookUrl = Annotated[str, StringConstraints(pattern=r"^https?://[^\s/?#]+([/?#]\S*)?$", max_length=2048)]
WebhookTimeout = Annotated[Duration, duration_within("1s", "5m")]
WebhookMetadata = Annotated[dict[str, Annotated[str, StringConstraints(max_length=1024)]], Field(max_length=16)]
URL_WITHOUT_USERINFO = Rule(
    cel="!has(self.url) || !self.url.matches('^https?://[^/?#]*@')",
    message="a URL carries no credentials (user:password@host), which would show wherever it is printed: a "
    "webhook takes them from a Secret (secretHeader), a Prometheus from an endpoint the operator holds (endpoint)",
    reason="FieldValueForbidden",
    field_path=".url",
)
RESERVED_HEADERS = ("host", "content-type", "content-length", "transfer-encoding", "connection")
HEADER_NOT_RESERVED = Rule(
    cel=f"!(self.name.lowerAscii() in {list(RESERVED_HEADERS)})",
    message=f"the operator sets {', '.join(RESERVED_HEADERS)} itself: name another header, e.g. Authorization",
    reason="FieldValueForbidden",
    field_path=".name",
)


# --- engine -------------------------------------------------------------------------------------


class SecretKeySelector(ApiModel):
    """A key of a Secret in the pilot's namespace."""

    name: Annotated[str, StringConstraints(min_length=1, max_length=253)]
    """Name of the Secret."""
    key: Annotated[str, StringConstraints(pattern=r"^[-._a-zA-Z0-9]+$", max_length=253)]
    """Key within the Secret."""


class SecretHeader(ApiModel):
    """A header sent with each call, its value read from a Secret in the pilot's namespace as the call is
    made (a rotated value is sent from the next call on). The value never appears in status, Events or
    the operator's logs. The operator reads the Secret itself, so its installer must let it: the chart's
    rbac.webhookSecrets lists the Secrets' names."""

    model_config = ConfigDict(json_schema_extra=cel(HEADER_NOT_RESERVED))

    name: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9-]+$", max_length=64)] = "Authorization"
    """The header's name; its value is the Secret's value whole (for Authorization: `Bearer <token>`)."""
    secret_key_ref: SecretKeySelector
    """The Secret and key that hold the header's value."""


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


DeploymentName = Annotated[str, StringConstraints(pattern=DNS_SUBDOMAIN_PATTERN, max_length=253)]


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


# --- arms ---------------------------------------------------------------------------------------


class Saturation(ApiModel):
    """When production's baseline counts as saturated (the ProductionSaturated condition, which pauses
    promotion and the rehearsal): a hysteresis over consecutive analysis windows, so that a baseline at
    the edge does not toggle the condition every window."""

    enter_after: Annotated[int, Field(strict=True, ge=1, le=100)] = 2
    """Consecutive saturated windows before the condition turns True."""
    leave_after: Annotated[int, Field(strict=True, ge=1, le=100)] = 3
    """Consecutive windows with headroom before it turns False again."""


class Baseline(ApiModel):
    """The baseline arm: the engine with ordinary decoding."""

    replicas: Replicas = 1
    """Engine replicas of the baseline arm."""
    saturation: Saturation = Saturation()
    """How many windows in a row saturate production's baseline, or give it headroom, before the
    ProductionSaturated condition changes."""


class DraftMethod(StrEnum):
    """How draft tokens are proposed (vLLM `--speculative-config` method)."""

    DRAFT_MODEL = "draft_model"
    EAGLE = "eagle"
    EAGLE3 = "eagle3"
    MTP = "mtp"
    NGRAM = "ngram"
    SUFFIX = "suffix"


METHODS_WITH_DRAFT_MODEL = (DraftMethod.DRAFT_MODEL, DraftMethod.EAGLE, DraftMethod.EAGLE3)
METHODS_WITHOUT_DRAFT_MODEL = (DraftMethod.NGRAM, DraftMethod.SUFFIX)


def _cel_list(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{value}'" for value in values) + "]"


DRAFT_MODEL_REQUIRED = Rule(
    cel=f"!(self.method in {_cel_list(METHODS_WITH_DRAFT_MODEL)}) || has(self.model)",
    message="model is required for methods " + ", ".join(METHODS_WITH_DRAFT_MODEL),
    reason="FieldValueRequired",
    field_path=".model",
)
DRAFT_MODEL_FORBIDDEN = Rule(
    cel=f"!(self.method in {_cel_list(METHODS_WITHOUT_DRAFT_MODEL)}) || !has(self.model)",
    message="model must not be set for methods "
    + ", ".join(METHODS_WITHOUT_DRAFT_MODEL)
    + " (they draft from the prompt and the output so far)",
    reason="FieldValueForbidden",
    field_path=".model",
)
DRAFT_REVISION_NEEDS_MODEL = Rule(
    cel="!has(self.revision) || has(self.model)",
    message="revision needs model",
    reason="FieldValueForbidden",
    field_path=".revision",
)
# vLLM reads a schedule over batch size alone; a range this wide is past any engine's max_num_seqs.
MAX_BATCH = 65_536
SCHEDULE_RANGE_ENDS_AFTER_START = Rule(
    cel="self.end >= self.start",
    message="must be at least start (a range covers the batch sizes from start to end, both included)",
    field_path=".end",
)
SCHEDULE_STARTS_AT_ONE = Rule(
    cel="!has(self.schedule) || size(self.schedule) == 0 || self.schedule[0].start == 1",
    message="the first range must start at 1, so that every batch size has a k (vLLM refuses the schedule otherwise)",
    field_path=".schedule",
)
SCHEDULE_ASCENDS = Rule(
    # Sorted by start, and no range meets another: together, each range starts after the previous one ends.
    cel="!has(self.schedule) || (self.schedule.map(r, r.start).isSorted() && self.schedule.all(a,"
    " self.schedule.filter(b, b.start <= a.end && a.start <= b.end).size() <= 1))",
    message="ranges must ascend without overlap: each range's start must be greater than the previous range's "
    "end (vLLM refuses overlapping ranges)",
    field_path=".schedule",
)
SCHEDULE_WITHIN_DRAFT = Rule(
    cel="!has(self.schedule) || self.schedule.all(r, r.numSpeculativeTokens <= self.numSpeculativeTokens)",
    message="a range's numSpeculativeTokens must not exceed the draft's numSpeculativeTokens (vLLM would cut "
    "it to that): lower the range's, or raise the draft's",
    field_path=".schedule",
)


class BatchScheduleRange(ApiModel):
    """One range of the draft's schedule: steps of a batch of start to end running sequences (both
    included) propose numSpeculativeTokens draft tokens."""

    model_config = ConfigDict(json_schema_extra=cel(SCHEDULE_RANGE_ENDS_AFTER_START))

    start: Annotated[int, Field(strict=True, ge=1, le=MAX_BATCH)]
    """Smallest batch size (running sequences) of the range, from 1."""
    end: Annotated[int, Field(strict=True, ge=1, le=MAX_BATCH)]
    """Largest batch size of the range, at least start."""
    num_speculative_tokens: Annotated[int, Field(strict=True, ge=0, le=16)]
    """Draft tokens a step of such a batch proposes (k), at most the draft's numSpeculativeTokens; 0 decodes
    those steps without drafting."""

    @property
    def batch_range(self) -> BatchRange:
        """The range as vLLM's schedule holds it."""
        return BatchRange(self.start, self.end, self.num_speculative_tokens)


class Draft(ApiModel):
    """The one speculation config the speculative arm adds (vLLM `--speculative-config`)."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            DRAFT_MODEL_REQUIRED,
            DRAFT_MODEL_FORBIDDEN,
            DRAFT_REVISION_NEEDS_MODEL,
            SCHEDULE_STARTS_AT_ONE,
            SCHEDULE_ASCENDS,
            SCHEDULE_WITHIN_DRAFT,
        )
    )

    method: DraftMethod = DraftMethod.DRAFT_MODEL
    """draft_model, eagle, eagle3, mtp, ngram or suffix."""
    model: ModelRef | None = None
    """Draft model (Hugging Face id or path); required for draft_model, eagle and eagle3, absent for
    ngram and suffix, optional for mtp."""
    revision: Revision | None = None
    """Draft model revision."""
    num_speculative_tokens: Annotated[int, Field(strict=True, ge=1, le=16)] = 3
    """Tokens proposed per round (k); a round commits between 1 and k+1 tokens."""
    tensor_parallel_size: TensorParallelSize | None = None
    """Tensor parallel size of the draft: 1 or the engine's tensorParallelSize (what vLLM 0.33
    accepts). Defaults to the engine's."""
    schedule: Annotated[list[BatchScheduleRange], Field(min_length=1, max_length=16)] | None = None
    """Draft tokens per step by batch size (vLLM's num_speculative_tokens_per_batch_size, named as
    engine.vllmVersion says): each step, the range holding the running batch size gives the draft tokens
    proposed, 0 meaning ordinary decoding for that step, so speculation can run in low-load windows alone.
    Batch sizes in a gap between ranges, and past the last, take the previous range's. vLLM refuses a
    schedule unless it starts at 1 and its ranges ascend without overlap. Unset, every step proposes
    numSpeculativeTokens."""


class Speculative(ApiModel):
    """The speculative arm: the engine plus exactly one speculation config."""

    replicas: Replicas = 1
    """Engine replicas of the speculative arm; the draft runs on the same GPUs as the target."""
    draft: Draft
    """The speculation config."""


class Control(ApiModel):
    """The control arm: a fresh deployment of exactly the baseline's engine, with the speculative arm's
    replicas and GPUs, to which the router sends exactly the speculative arm's share of every scope. The
    speculative arm is judged against it, at the same load; the production baseline is only watched."""

    enabled: Annotated[bool, Field(strict=True)] = True
    """false saves the control arm's GPUs: the speculative arm is then compared with the production
    baseline, only at loads both have been measured at, and status says the pilot runs without a control."""


class Alternative(ApiModel):
    """An optional third arm that spends the speculative arm's GPU budget another way, e.g. more replicas
    with a smaller tensor parallel size, or different batching. The router sends it exactly the
    speculative arm's share of every scope, and it is judged against the control arm at that share: its
    decision says whether the same GPUs do better without speculation. It needs the control arm."""

    replicas: Replicas = 1
    """Engine replicas of the alternative arm."""
    tensor_parallel_size: TensorParallelSize | None = None
    """Tensor parallel size of the alternative arm; defaults to the engine's."""
    extra_args: ExtraArgs = []
    """`vllm serve` flags appended after the engine's extraArgs (the last occurrence of a flag wins)."""


# --- router and scopes --------------------------------------------------------------------------


class HeaderMatchType(StrEnum):
    """How a header value is compared."""

    EXACT = "Exact"
    REGULAR_EXPRESSION = "RegularExpression"


class PathMatchType(StrEnum):
    """How a request path is compared."""

    EXACT = "Exact"
    PATH_PREFIX = "PathPrefix"


class HeaderMatch(ApiModel):
    """A request header condition."""

    type: HeaderMatchType = HeaderMatchType.EXACT
    """Exact or RegularExpression (Python `re` syntax, matched in full)."""
    name: HeaderName
    """Header name, case-insensitive."""
    value: Annotated[str, StringConstraints(min_length=1, max_length=256)]
    """Value or regular expression to match."""


class PathMatch(ApiModel):
    """A request path condition."""

    type: PathMatchType = PathMatchType.PATH_PREFIX
    """Exact or PathPrefix."""
    value: Annotated[str, StringConstraints(pattern=r"^/", max_length=256)]
    """Path, e.g. /v1/chat/completions."""


class ScopeMatch(ApiModel):
    """Which requests a scope takes. Every condition given must hold. A request naming a scope in the
    router's scopeHeader goes to that scope regardless; otherwise scopes are tried in order."""

    headers: Annotated[list[HeaderMatch], Field(max_length=8)] = []
    """Header conditions, all of which must hold."""
    paths: Annotated[list[PathMatch], Field(max_length=8)] = []
    """Path conditions, one of which must hold."""


class Stage(ApiModel):
    """One step of a scope's rollout."""

    weight: Annotated[int, Field(strict=True, gt=0, le=100)]
    """Percent of the scope's requests routed to the speculative arm, in (0, 100]. The control arm takes
    the same share again, so with it at most 50."""
    min_requests: Annotated[int, Field(strict=True, ge=1, le=10_000_000)] = 200
    """Requests the scope must complete at this weight before promotion; at least analysis.minSamples."""
    min_duration: Annotated[Duration, duration_within("5s", "168h")] = Duration("10m")
    """Time the scope must spend at this weight before promotion; at least analysis.interval."""


# --- probes --------------------------------------------------------------------------------------


class ProbeKind(StrEnum):
    """What a probe case checks."""

    GREEDY = "greedy"
    STOP = "stop"
    TOOL_CALL = "toolCall"
    STRUCTURED = "structured"
    CANCEL = "cancel"
    SAMPLED = "sampled"


FUNCTION_NAME_PATTERN = r"^[a-zA-Z0-9_-]{1,64}$"


class ProbeTool(ApiModel):
    """A function a toolCall case offers the model."""

    name: Annotated[str, StringConstraints(pattern=FUNCTION_NAME_PATTERN, max_length=64)]
    """Function name, as OpenAI's API allows it (letters, digits, _ and -, at most 64)."""
    description: Annotated[str, StringConstraints(max_length=1024)] = ""
    """What the function does, as the model reads it."""
    parameters: KubeObject = {}
    """JSON schema of the function's arguments; every returned call's arguments must validate against it."""


TOOL_CASE_HAS_TOOLS = Rule(
    cel="self.kind != 'toolCall' || (has(self.tools) && size(self.tools) > 0)",
    message="a toolCall case needs tools",
    field_path=".tools",
)
TOOL_CHOICE_KNOWN = Rule(
    cel="self.kind != 'toolCall' || self.toolChoice == 'auto' || self.toolChoice == 'required' || "
    "(has(self.tools) && self.tools.exists(t, t.name == self.toolChoice))",
    message="toolChoice must be auto, required or the name of one of the case's tools",
    field_path=".toolChoice",
)
STRUCTURED_CASE_HAS_SCHEMA = Rule(
    cel="self.kind != 'structured' || has(self.jsonSchema)",
    message="a structured case needs jsonSchema",
    field_path=".jsonSchema",
)
MIN_TOKENS_WITHIN_MAX = Rule(
    cel="!has(self.maxTokens) || !has(self.minTokens) || self.minTokens <= self.maxTokens",
    message="minTokens must not exceed maxTokens",
    field_path=".minTokens",
)
SAMPLED_CASE_HAS_TEMPERATURE = Rule(
    cel="self.kind != 'sampled' || has(self.temperature)",
    message="a sampled case needs temperature (above 0, as the scope's traffic samples)",
    reason="FieldValueRequired",
    field_path=".temperature",
)
TEMPERATURE_ONLY_SAMPLED = Rule(
    cel="self.kind == 'sampled' || !has(self.temperature)",
    message="temperature is for sampled cases: the other kinds are sent at temperature 0",
    reason="FieldValueForbidden",
    field_path=".temperature",
)
SAMPLED_CASE_HAS_SCORE = Rule(
    cel="self.kind != 'sampled' || has(self.score)",
    message="a sampled case needs score (builtin: length or finishReason, or webhook)",
    reason="FieldValueRequired",
    field_path=".score",
)
SCORE_ONLY_SAMPLED = Rule(
    cel="self.kind == 'sampled' || !has(self.score)",
    message="score is for sampled cases: the other kinds are judged by their own contract",
    reason="FieldValueForbidden",
    field_path=".score",
)


class BuiltinScore(StrEnum):
    """A scalar the operator reads off a sampled answer itself."""

    LENGTH = "length"
    FINISH_REASON = "finishReason"


class Better(StrEnum):
    """Which way a score improves."""

    HIGHER = "Higher"
    LOWER = "Lower"


class ScoreWebhook(ApiModel):
    """A business evaluation that scores one answer at a time: the same URL, timeout and metadata as a
    quality webhook, another contract. It receives a POST of the case (kind, prompt, chat, temperature,
    maxTokens), one answer (text, finish reason, completion tokens) and the metadata, never which arm gave it;
    it replies 2xx with a JSON object whose `score` is a finite number. Anything else leaves the answer
    unscored; the reply itself is never stored or logged."""

    model_config = ConfigDict(json_schema_extra=cel(URL_WITHOUT_USERINFO))

    url: WebhookUrl
    """http or https URL that receives each answer as JSON."""
    secret_header: SecretHeader | None = None
    """A header whose value comes from a Secret, e.g. the webhook's token: URLs carry no credentials."""
    timeout: WebhookTimeout = Duration("10s")
    """How long to wait for a score; no score in time leaves the answer unscored."""
    metadata: WebhookMetadata = {}
    """Extra key/value pairs passed along, e.g. the rubric to score by."""


ONE_SCORE_SOURCE = Rule(
    cel="has(self.builtin) != has(self.webhook)",
    message="set exactly one of builtin (length or finishReason) and webhook",
)


class ProbeScore(ApiModel):
    """How each answer of a sampled case is scored."""

    model_config = ConfigDict(json_schema_extra=cel(ONE_SCORE_SOURCE))

    builtin: BuiltinScore | None = None
    """length: the answer's completion tokens. finishReason: 1 when the answer ended by itself (stop or
    tool_calls), 0 when it was cut (length) or aborted."""
    webhook: ScoreWebhook | None = None
    """The scope's own evaluation, called once per answer with the case and that answer alone (never which
    arm gave it); a 2xx reply with a JSON object whose `score` is a finite number scores it."""
    better: Better = Better.HIGHER
    """Higher or Lower: which way the score improves. The case fails only when the speculative arm's
    scores are shown worse than the baseline's."""


class ProbeCase(ApiModel):
    """One application-behaviour probe, sent to one pod of each arm directly (never through the router)."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            TOOL_CASE_HAS_TOOLS,
            TOOL_CHOICE_KNOWN,
            STRUCTURED_CASE_HAS_SCHEMA,
            MIN_TOKENS_WITHIN_MAX,
            SAMPLED_CASE_HAS_TEMPERATURE,
            TEMPERATURE_ONLY_SAMPLED,
            SAMPLED_CASE_HAS_SCORE,
            SCORE_ONLY_SAMPLED,
        )
    )

    kind: ProbeKind
    """greedy: temperature-0 text against the baseline's, judged against the baseline's own variation.
    stop: stop strings, maxTokens and minTokens end the answer as on the baseline. toolCall: the calls
    parse, validate against their function's schema and stream as they answer whole. structured: the
    answer validates against jsonSchema. cancel: a stream dropped after afterChunks chunks frees its slot.
    sampled: `repeats` answers of each arm at `temperature`, each scored; fails only when the speculative
    arm's scores are shown worse than the baseline's at analysis.confidence."""
    prompt: Annotated[str, StringConstraints(min_length=1, max_length=4096)]
    """The user message (chat) or the prompt (completion)."""
    chat: Annotated[bool, Field(strict=True)] = True
    """Send a chat completion; false sends a text completion (toolCall and structured are always chat)."""
    max_tokens: Annotated[int, Field(strict=True, ge=1, le=4096)] | None = None
    """Tokens generated at most; defaults to the probes' maxTokens."""
    min_tokens: Annotated[int, Field(strict=True, ge=0, le=4096)] = 0
    """stop: tokens generated before a stop string or EOS may end the answer."""
    stop: Annotated[
        list[Annotated[str, StringConstraints(min_length=1, max_length=64)]],
        Field(max_length=8),
    ] = []
    """stop: strings that end the answer; the text must never contain one."""
    tools: Annotated[list[ProbeTool], Field(max_length=16)] = []
    """toolCall: the functions offered."""
    tool_choice: Annotated[str, StringConstraints(min_length=1, max_length=64)] = "auto"
    """toolCall: auto, required, or the name of one of tools (a named call)."""
    json_schema: KubeObject | None = None
    """structured: the JSON schema the answer is constrained to (response_format json_schema)."""
    after_chunks: Annotated[int, Field(strict=True, ge=1, le=100)] = 2
    """cancel: streamed chunks read before the request is dropped."""
    settle: Annotated[Duration, duration_within("1s", "5m")] = Duration("10s")
    """cancel: how long the arm may take to give the dropped request's slot back (the pod's
    vllm:num_requests_running back to where it was)."""
    temperature: Annotated[float, Field(strict=True, gt=0, le=2)] | None = None
    """sampled: the temperature the answers are sampled at, as the scope's traffic is; required there."""
    repeats: Annotated[int, Field(strict=True, ge=2, le=16)] = 8
    """sampled: answers asked of each arm per round (whole, not streamed)."""
    score: ProbeScore | None = None
    """sampled: how each answer is scored; required there."""


ProbeCases = Annotated[list[ProbeCase], Field(max_length=32)]


class Probes(ApiModel):
    """Application-behaviour probes sent to one pod of each arm; every scope without its own cases runs
    these."""

    prompts: Annotated[
        list[Annotated[str, StringConstraints(min_length=1, max_length=4096)]],
        Field(max_length=32),
    ] = []
    """Prompts probed as greedy text completions (shorthand for greedy cases with chat false)."""
    cases: ProbeCases = []
    """Probe cases; with neither these nor prompts, every scope must have its own."""
    max_tokens: Annotated[int, Field(strict=True, ge=1, le=1024)] = 64
    """Tokens generated per probe, unless a case sets its own."""
    interval: Annotated[Duration, duration_within("10s", "24h")] = Duration("10m")
    """How often the probes run."""
    per_round: Annotated[int, Field(strict=True, ge=1, le=16)] = 2
    """Times a round asks each case (every kind but sampled, which asks `repeats`), one ask after the
    other so that each answer is batched as a lone probe's: more per round reaches a probe check's
    decision in fewer rounds, at that many times the requests."""

    @property
    def all_cases(self) -> tuple[ProbeCase, ...]:
        """The prompts as greedy completion cases, then the cases."""
        greedy = (ProbeCase(kind=ProbeKind.GREEDY, prompt=prompt, chat=False) for prompt in self.prompts)
        return (*greedy, *self.cases)


class ScopeProbes(ApiModel):
    """A scope's own probe cases; quality.probes' interval and maxTokens still apply."""

    cases: Annotated[list[ProbeCase], Field(min_length=1, max_length=32)]
    """Cases run for this scope instead of quality.probes'."""


STAGES_INCREASING = Check(
    Rule(
        cel="self.map(s, s.weight).isSorted() && self.all(a, self.exists_one(b, b.weight == a.weight))",
        message="stage weights must be strictly increasing",
    ),
    holds=lambda stages: all(a.weight < b.weight for a, b in pairwise(stages)),
)


class Scope(ApiModel):
    """A traffic scope (task group): requests the router classifies together and that are piloted, judged
    and rolled back together."""

    name: Name
    """Scope name, unique within the pilot (an RFC 1123 label)."""
    match: ScopeMatch = ScopeMatch()
    """Which requests belong to the scope; empty takes only requests that name it in the scope header."""
    deadline: Annotated[Duration, duration_within("100ms", "1h")] | None = None
    """Latency budget of one request; a request that has not finished by then counts as a timeout.
    Defaults to router.requestTimeout, which it must not exceed."""
    stages: Annotated[list[Stage], Field(min_length=1, max_length=10), STAGES_INCREASING] = [
        Stage(weight=10),
        Stage(weight=25),
        Stage(weight=33),
    ]
    """Stages with strictly increasing weights. The last stage's weight is where the scope stays once
    speculative; below 100 it keeps measuring both arms on the same traffic."""
    probes: ScopeProbes | None = None
    """Probe cases for this scope instead of quality.probes' (which must be set)."""


class Takeover(ApiModel):
    """A Service clients already use, re-pointed at the routers once they are ready and put back as it
    was when the pilot ends (its original selector and ports are recorded in status first)."""

    service: Name
    """The Service, in the pilot's namespace."""


class Router(ApiModel):
    """The per-pilot router that classifies requests into scopes and splits them between arms."""

    replicas: Annotated[int, Field(strict=True, ge=1, le=16)] = 2
    """Router replicas."""
    scope_header: HeaderName = SCOPE_HEADER
    """Request header that names a scope explicitly."""
    default_scope: Name | None = None
    """Scope for requests that match no scope; without it they go to the baseline and are not piloted."""
    request_timeout: Annotated[Duration, duration_within("1s", "1h")] = Duration("10m")
    """Upper bound on one proxied request."""
    image_pull_secrets: Annotated[list[Name], Field(max_length=16)] = []
    """Secrets in the pilot's namespace to pull the router's image with (the operator's --router-image);
    the rehearsal's load Jobs run that image too."""
    node_selector: Annotated[dict[str, Annotated[str, StringConstraints(max_length=63)]], Field(max_length=32)] = {}
    """Node labels the router pods (and the rehearsal's load Jobs) require."""
    tolerations: Annotated[list[Toleration], Field(max_length=32)] = []
    """Tolerations of the router pods (and the rehearsal's load Jobs)."""
    resources: Resources | None = None
    """Resources of a router container; by default it requests 100m CPU and 128Mi, limited to 512Mi."""
    takeover: Takeover | None = None
    """Serve through a Service clients already use (none: clients are pointed at `<pilot>-router`)."""


# --- analysis -----------------------------------------------------------------------------------


class QuantileRatio(ApiModel):
    """A latency quantile of the speculative arm relative to the baseline's."""

    quantile: Quantile
    """Quantile compared, in [0.5, 1)."""
    max_ratio: Ratio
    """Highest acceptable speculative / baseline ratio of that quantile."""


class KvCacheUsage(ApiModel):
    """A hard limit on the speculative arm's KV-cache usage (vllm:kv_cache_usage_perc)."""

    max: Annotated[float, Field(strict=True, gt=0, le=1)] = 0.95
    """Usage fraction (0 to 1) the speculative arm must not stay above for sustainedFor."""
    sustained_for: Annotated[Duration, duration_within("5s", "1h")] = Duration("2m")
    """How long usage above max is tolerated; at most analysis.window."""


ITL_QUANTILE = 0.99  # the inter-token-latency quantile measured when interTokenLatency is not judged
MIN_SAMPLES = 50  # requests each arm needs in a window, unless analysis.minSamples says otherwise


class Thresholds(ApiModel):
    """When a window fails. Ratios compare the speculative arm with the baseline on the same scope."""

    max_time_per_committed_token_ratio: Ratio = 1.0
    """Highest speculative / baseline ratio of decode time per committed token: the measure that decides
    whether speculation pays. 1.0 fails any window where speculation is slower."""
    ttft: QuantileRatio = QuantileRatio(quantile=0.99, max_ratio=1.2)
    """Time to first token."""
    inter_token_latency: QuantileRatio | None = None
    """Opt-in, for teams that care about stream cadence: the gap between streamed chunks (vLLM's
    inter-token latency). A speculative step streams several tokens per chunk, so its gaps are longer
    by nature although each token comes sooner; speed per token is what
    maxTimePerCommittedTokenRatio judges. Unset, the gap is measured but not judged."""
    end_to_end: QuantileRatio = QuantileRatio(quantile=0.95, max_ratio=1.05)
    """End-to-end request latency."""
    kv_cache_usage: KvCacheUsage = KvCacheUsage()
    """Sustained KV-cache usage of the speculative arm; fires directly."""
    max_error_rate: Fraction = 0.01
    """Highest share of the speculative arm's requests that fail (5xx other than 503, errors); fires
    directly."""
    max_timeout_rate: Fraction = 0.01
    """Highest share that exceeds the scope's deadline; fires directly."""
    max_rejection_rate: Fraction = 0.01
    """Highest share rejected by the engine (429, 503); fires directly."""
    min_acceptance_length: Annotated[float, Field(strict=True, ge=1, le=17)] | None = None
    """Lowest mean committed tokens per speculative round (1 + accepted / drafts); at most
    1 + numSpeculativeTokens. Unset, acceptance is reported but not judged."""

    @property
    def itl_quantile(self) -> float:
        """The inter-token-latency quantile the engines' figures are read at."""
        return self.inter_token_latency.quantile if self.inter_token_latency is not None else ITL_QUANTILE


LABEL_NAME_PATTERN = "^[a-zA-Z_][a-zA-Z0-9_]*$"  # plain text: it also sits in a CEL string
LabelName = Annotated[str, StringConstraints(pattern=LABEL_NAME_PATTERN, max_length=128)]
LabelValue = Annotated[str, StringConstraints(min_length=1, max_length=1024)]
Labels = Annotated[
    dict[Annotated[str, StringConstraints(max_length=128)], LabelValue],
    Field(max_length=16),
    Check(
        Rule(
            cel=f"self.all(name, name.matches('{LABEL_NAME_PATTERN}') && !name.startsWith('__'))",
            message="label names must match [a-zA-Z_][a-zA-Z0-9_]* and not start with __ (reserved: the operator "
            "picks the metric name)",
        ),
        holds=lambda labels: all(re.fullmatch(LABEL_NAME_PATTERN, n) and not n.startswith("__") for n in labels),
    ),
]
ArmLabelSet = Annotated[Labels, Field(min_length=1)]

ARM_LABELS_DIFFER = Rule(
    cel="self.baseline != self.speculative",
    message="baseline and speculative must select different series",
    field_path=".speculative",
)


class PrometheusArms(ApiModel):
    """Labels that pick out each arm's engine series: every label must hold, values match exactly. They
    must be target labels (on `up` too), since a failed scrape is read from `up`."""

    model_config = ConfigDict(json_schema_extra=cel(ARM_LABELS_DIFFER))

    baseline: ArmLabelSet
    """Labels of the baseline arm's series, e.g. {namespace: team-a, specpilot_io_arm: baseline}."""
    speculative: ArmLabelSet
    """Labels of the speculative arm's series."""
    control: ArmLabelSet | None = None
    """Labels of the control arm's series; required unless control.enabled is false."""

    def of(self, arm: str) -> ArmLabelSet | None:
        """The labels of an arm by its name (baseline, speculative or control)."""
        found: ArmLabelSet | None = getattr(self, arm, None)
        return found


ONE_PROMETHEUS = Rule(
    cel="has(self.url) != has(self.endpoint)",
    message="set exactly one of url (a Prometheus the pilot names) and endpoint (one the operator holds "
    "credentials for)",
    field_path=".url",
)


class PrometheusSource(ApiModel):
    """A Prometheus server that already scrapes the arms' engine pods (every few seconds, so that a
    window holds several scrapes). The same window figures as direct scraping, as PromQL: counter
    increases over the window, quantiles from bucket increases, gauges over the window."""

    model_config = ConfigDict(json_schema_extra=cel(ONE_PROMETHEUS, URL_WITHOUT_USERINFO))

    url: Annotated[str, StringConstraints(pattern=r"^https?://[^\s/?#]+(/[^\s?#]*)?$", max_length=2048)] | None = None
    """Base URL of its HTTP API, without /api/v1, e.g. http://prometheus-operated.monitoring:9090 (a path
    prefix such as /prometheus is kept). Set this or endpoint."""
    endpoint: Name | None = None
    """A Prometheus the operator holds credentials for, by the name its installer gave it (the chart's
    prometheusEndpoints): its URL, token, password or client certificate, and headers such as a tenant's
    X-Scope-OrgID stay with the operator, and the pilot sees none of them. Set this or url."""
    timeout: Annotated[Duration, duration_within("1s", "5m")] = Duration("10s")
    """How long one query may take; a query that does not answer makes the window inconclusive."""
    labels: Labels = {}
    """Labels every query matches besides the arm's, e.g. {cluster: prod, job: vllm}."""
    namespace_label: LabelName = "namespace"
    """Label that names a series' Kubernetes namespace (`namespace` with kube-prometheus and the usual
    kubernetes_sd relabelling)."""
    pod_label: LabelName = "pod"
    """Label that names a series' pod: the default arm selection matches it, and reasons name pods by it."""
    arms: PrometheusArms | None = None
    """Labels that pick out each arm; by default the pilot's namespace (namespaceLabel) and the names of
    the arm's pods (podLabel matching `<pilot>-<arm>-<hash>-<suffix>`)."""


class MetricsSource(ApiModel):
    """Where the engines' metrics come from instead of scraping every pod directly."""

    prometheus: PrometheusSource
    """Query a Prometheus server's HTTP API."""


WINDOW_COVERS_INTERVAL = Rule(
    cel="duration(self.window) >= duration(self.interval)",
    message="window must be at least interval",
    field_path=".window",
)
WINDOW_COVERS_KV_CACHE = Rule(
    cel="duration(self.thresholds.kvCacheUsage.sustainedFor) <= duration(self.window)",
    message="thresholds.kvCacheUsage.sustainedFor must not exceed window",
    field_path=".thresholds.kvCacheUsage.sustainedFor",
)


ONE_FORECAST_PROFILE = Rule(
    cel="has(self.profile) != has(self.configMap)",
    message="set exactly one of profile (a calibrated profile the operator carries) and configMap (one "
    "`kubectl specpilot calibrate NAME` wrote in the pilot's namespace)",
    field_path=".profile",
)


class Forecast(ApiModel):
    """The step costs the operator forecasts each scope's crossover from, once its windows measured its
    acceptance per draft position and its lengths: where speculation should stop paying, before the pilot
    runs there. Measured bands outside the forecast's interval say the profile does not describe the pods."""

    model_config = ConfigDict(json_schema_extra=cel(ONE_FORECAST_PROFILE))

    profile: CalibratedProfile | None = None
    """A calibrated profile by name: h200-llama-3.1-8b-draft-1b, h200-llama-3.1-8b-eagle or h200-qwen2.5-32b
    (step costs measured on an NVIDIA H200). Set this or configMap."""
    config_map: DeploymentName | None = None
    """A ConfigMap in the pilot's namespace whose stepcost.json `kubectl specpilot calibrate NAME` wrote
    (the larger model measured is the target, the smaller the draft); the operator fits its step costs.
    Set this or profile."""


class Analysis(ApiModel):
    """How windows are closed and judged, per scope, speculative arm against baseline."""

    model_config = ConfigDict(json_schema_extra=cel(WINDOW_COVERS_INTERVAL, WINDOW_COVERS_KV_CACHE))

    interval: Annotated[Duration, duration_within("5s", "1h")] = Duration("1m")
    """How often each scope's window is closed and judged."""
    window: Annotated[Duration, duration_within("5s", "24h")] = Duration("5m")
    """How far back a window reaches; at least interval."""
    warmup: Annotated[Duration, duration_within("0s", "1h")] = Duration("1m")
    """How long both arms must have been ready before a window is judged, so that cold starts (weights
    loading, graph capture, empty caches) are kept apart from steady operation."""
    min_samples: Annotated[int, Field(strict=True, ge=1, le=1_000_000)] = MIN_SAMPLES
    """Requests each arm needs in a window; fewer make the window inconclusive, never a pass."""
    failure_limit: Annotated[int, Field(strict=True, ge=1, le=100)] = 3
    """Consecutive failing windows that flip a scope back to ordinary decoding."""
    confidence: Annotated[float, Field(strict=True, ge=0.5, lt=1)] = 0.95
    """Confidence level of the statistical comparisons of latency-type metrics."""
    thresholds: Thresholds = Thresholds()
    """Limits that make a window fail."""
    metrics_source: MetricsSource | None = None
    """Where the engines' metrics come from. Unset, the operator scrapes every ready engine pod's /metrics
    itself; the routers' per-request samples are read from the routers either way."""
    forecast: Forecast | None = None
    """The step-cost profile each scope's crossover is forecast from; unset, no forecast."""


# --- quality and rollback -----------------------------------------------------------------------


class Webhook(ApiModel):
    """A business regression check called once per window and scope; a non-2xx answer fails it."""

    model_config = ConfigDict(json_schema_extra=cel(URL_WITHOUT_USERINFO))

    name: Name
    """Webhook name, unique within the pilot."""
    url: WebhookUrl
    """http or https URL that receives the scope, window and both compared arms as JSON."""
    secret_header: SecretHeader | None = None
    """A header whose value comes from a Secret, e.g. the webhook's token: URLs carry no credentials."""
    critical: Annotated[bool, Field(strict=True)] = False
    """A failing critical webhook flips the scope back at once; others count as a failed check."""
    timeout: WebhookTimeout = Duration("10s")
    """How long to wait for an answer; no answer fails the check."""
    metadata: WebhookMetadata = {}
    """Extra key/value pairs passed along."""


class Quality(ApiModel):
    """Quality gates, separate from speed: verification is probability computation, not fact checking."""

    probes: Probes | None = None
    """Agreement probes; none run unless set."""
    min_agreement: Fraction = 0.95
    """Lowest share of the speculative arm's stop, toolCall, structured and cancel probe answers that must
    pass where the baseline's pass (accumulated over rounds). Greedy text and sampled scores are judged
    against the baseline's own variation at analysis.confidence instead."""
    webhooks: Annotated[
        list[Webhook],
        Field(
            max_length=8,
            json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
        ),
    ] = []
    """Business regression webhooks."""


class Reentry(StrEnum):
    """How a rolled-back scope may pilot again."""

    MANUAL = "Manual"
    AUTOMATIC = "Automatic"


class Rollback(ApiModel):
    """What happens after a scope is flipped back to ordinary decoding."""

    cooldown: Annotated[Duration, duration_within("1m", "168h")] = Duration("30m")
    """A rolled-back scope stays ordinary at least this long."""
    reentry: Reentry = Reentry.MANUAL
    """Manual: it stays RolledBack until an SRE intervenes. Automatic: it restarts at the first stage
    once the cooldown ends."""


# --- rehearsal ----------------------------------------------------------------------------------

PEAK_ONE_SOURCE = Rule(
    cel="has(self.perReplica) != has(self.productionFactor)",
    message="set exactly one of perReplica (requests per second per replica) or productionFactor "
    "(x production's highest observed load per replica)",
)


class Peak(ApiModel):
    """The load the rehearsal climbs to, as offered requests per second per replica of each rehearsed arm."""

    model_config = ConfigDict(json_schema_extra=cel(PEAK_ONE_SOURCE))

    per_replica: Annotated[float, Field(strict=True, gt=0, le=4096)] | None = None
    """The peak itself."""
    production_factor: Annotated[float, Field(strict=True, ge=1, le=10)] | None = None
    """The peak as this many times the highest load per replica production's baseline ran at during the
    live stages."""


class Burst(ApiModel):
    """A short burst above the peak, rehearsed after the ladder."""

    factor: Annotated[float, Field(strict=True, gt=1, le=10)] = 1.5
    """The burst's load as a multiple of the peak."""
    duration: Annotated[Duration, duration_within("10s", "1h")] = Duration("1m")
    """How long the burst lasts."""


class Rehearsal(ApiModel):
    """A load ladder replayed against the speculative and control arms after the live stages, through a
    router of its own that reaches no production pod, with the scopes' own mix of traffic."""

    peak: Peak = Peak(production_factor=1.5)
    """The highest step's load."""
    steps: Annotated[int, Field(strict=True, ge=2, le=16)] = 4
    """Steps from production's median load per replica (observed live) to the peak, evenly spaced."""
    step_duration: Annotated[Duration, duration_within("30s", "2h")] = Duration("5m")
    """How long each step runs; its figures are read over its last analysis window. At least 4 x
    analysis.window for a step to form a load band of its own in the decision. The routing fallback at
    peak runs one more step: halfway through it, the speculative share goes to the control arm."""
    restart: bool = True
    """Rehearse the restart fallback too, in one more step at the peak: at its start one speculative
    replica is replaced by one running ordinary decoding, as falling back means where the service's own
    pods run the speculative config. Measures its time to Ready and the remaining replicas' on-time
    completions meanwhile."""
    burst: Burst | None = None
    """A burst after the ladder (none unless set)."""
    crossover_steps: Annotated[int, Field(strict=True, ge=0, le=3)] = 2
    """Steps per rehearsed scope after the ladder, each twice stepDuration, at the load where its
    speculation stops winning (its crossover, read from the live and rehearsed windows as the step
    before ends). Near the crossover the arms differ by a few percent while a window's figures swing with
    each burst of arrivals: the ladder alone places it roughly and, read between coarse load bands across
    a convex curve, low; each step at the crossover as it then stands narrows it. None for a scope whose
    arms never cross, and none that would not fit within maxDuration with the steps still to run."""
    max_duration: Annotated[Duration, duration_within("1m", "24h")] = Duration("1h")
    """A hard cap on the whole rehearsal, waiting included: reached, it stops at once."""
    on_time_target: Annotated[float, Field(strict=True, gt=0, le=1)] = 0.99
    """An arm's capacity is the highest step load at which at least this share of the scopes' requests
    complete within their deadlines."""

    @property
    def crossover_step_duration(self) -> timedelta:
        """A crossover step runs twice a ladder step: near the crossover the arms differ by little."""
        return self.step_duration * 2


# --- spec ---------------------------------------------------------------------------------------


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

CONTROL_SHARE_FITS = Rule(
    cel="(has(self.control) && !self.control.enabled) || self.scopes.all(s, s.stages.all(st, st.weight <= 50))",
    message=(
        "the control arm takes the speculative arm's share again, so a stage's weight must be at most 50 "
        "(or set control.enabled: false)"
    ),
    field_path=".scopes",
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
    cel="!has(self.alternative) || self.scopes.all(s, s.stages.all(st, st.weight <= 33))",
    message=(
        "the control and alternative arms each take the speculative arm's share again, so with an alternative "
        "arm a stage's weight must be at most 33"
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
    CONTROL_SHARE_FITS,
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
