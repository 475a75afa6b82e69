"""Application-behaviour probes: the cases sent to each arm, and how a sampled case's answers are scored."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import ConfigDict, Field, StringConstraints

from specpilot.api.common import ApiModel, Duration, KubeObject, Rule, cel, duration_within
from specpilot.api.spec.secretref import SecretHeader
from specpilot.api.spec.spec_fields import URL_WITHOUT_USERINFO, WebhookMetadata, WebhookTimeout, WebhookUrl


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
