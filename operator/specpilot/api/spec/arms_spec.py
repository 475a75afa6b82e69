"""The arms: baseline, speculative (its draft and the draft's schedule), control and alternative."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import ConfigDict, Field

from specpilot.api.common import ApiModel, Rule, cel
from specpilot.api.spec.spec_fields import ExtraArgs, ModelRef, Replicas, Revision, TensorParallelSize
from specpilot.wire.batchschedule import BatchRange


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
