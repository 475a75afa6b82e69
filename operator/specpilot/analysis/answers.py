"""Judging one probe answer of each arm: parse, validate, compare. Pure.

The shell sends a probe case to one pod of each arm and hands the answers here; each function says
whether an arm's answer keeps the behaviour the case checks (vLLM 0.33's contracts for stop
conditions, tool calls and structured outputs), and when not, which field broke, with short
excerpts; a sampled answer gets a score instead (a built-in scalar, or a webhook's reply read here).
An answer's body is never kept beyond an excerpt.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from specpilot.api.spec import BuiltinScore, ProbeCase

EXCERPT = 80  # characters of an answer a finding keeps
SCORE_REPLY_LIMIT = 4096  # bytes of a score webhook's reply that are read; a longer reply gives no score


def excerpt(text: str, start: int = 0) -> str:
    """At most EXCERPT characters of `text`, from a little before `start`, marked where cut."""
    begin = max(0, start - EXCERPT // 4)
    cut = text[begin : begin + EXCERPT - 2]
    return ("…" if begin else "") + cut + ("…" if begin + len(cut) < len(text) else "")


@dataclass(frozen=True)
class ToolCall:
    """One returned call: the function's name and its arguments' JSON text."""

    name: str | None
    arguments: str


@dataclass(frozen=True)
class Answer:
    """What an arm answered to one request, whole or reassembled from its stream."""

    text: str
    finish_reason: str | None
    stop_reason: str | int | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    status: int = 200
    tokens: int | None = None  # completion tokens, as the whole answer's usage gives them


@dataclass(frozen=True)
class Fault:
    """Why an answer fails its case: the field and a short excerpt of what it held."""

    field: str
    got: str


@dataclass(frozen=True)
class Divergence:
    """Where two greedy texts part: None when equal; `common` is their longest common prefix."""

    position: int | None
    common: int


def divergence(one: str, other: str) -> Divergence:
    """The first position at which the texts differ, and the longest common prefix."""
    common = next((i for i, (a, b) in enumerate(zip(one, other, strict=False)) if a != b), min(len(one), len(other)))
    return Divergence(None if one == other else common, common)


def _status(answer: Answer) -> Fault | None:
    return None if answer.status == 200 else Fault("status", f"HTTP {answer.status}")


def stop_fault(answer: Answer, baseline: Answer | None, *, stop: Sequence[str]) -> Fault | None:
    """A stop case: the text never contains a stop string, and where the text agrees with the
    baseline's as far as both go (no greedy divergence in between), finish_reason and stop_reason
    equal the baseline's. `baseline` is None when judging the baseline itself."""
    if (fault := _status(answer)) is not None:
        return fault
    hit = next((s for s in stop if s in answer.text), None)
    if hit is not None:
        return Fault("text", excerpt(answer.text, answer.text.index(hit)))
    if (
        baseline is None
        or baseline.status != 200
        or divergence(answer.text, baseline.text).common < min(len(answer.text), len(baseline.text))
    ):
        return None
    for field in ("finish_reason", "stop_reason"):
        if getattr(answer, field) != getattr(baseline, field):
            return Fault(field, str(getattr(answer, field)))
    return None


def _schema_fault(document: Any, schema: Mapping[str, Any], field: str, shown: str) -> Fault | None:
    """The first way `document` breaks `schema`, named in the field; `shown` is the answer's excerpt."""
    try:
        error = next(iter(Draft202012Validator(schema).iter_errors(document)), None)
    except SchemaError as bad:
        return Fault("schema", excerpt(bad.message))
    return None if error is None else Fault(f"{field} ({excerpt(error.message)})", excerpt(shown))


def structured_fault(answer: Answer, *, schema: Mapping[str, Any]) -> Fault | None:
    """A structured case: the answer ended by itself, parses as JSON and validates against the schema."""
    if (fault := _status(answer)) is not None:
        return fault
    if answer.finish_reason != "stop":
        return Fault("finish_reason", str(answer.finish_reason))
    try:
        document = json.loads(answer.text)
    except ValueError:
        return Fault("text", excerpt(answer.text))
    return _schema_fault(document, schema, "text", answer.text)


def expected_finish(tool_choice: str, *, called: bool) -> str | None:
    """finish_reason as vLLM gives it: "tool_calls" for auto (when a call was parsed) and required,
    "stop" for a named function (OpenAI's convention); None: anything but "tool_calls"."""
    if tool_choice == "required" or (tool_choice == "auto" and called):
        return "tool_calls"
    return None if tool_choice == "auto" else "stop"


def tool_call_fault(whole: Answer, streamed: Answer, *, case: ProbeCase) -> Fault | None:
    """A toolCall case: every call names an offered (or the named) function, its arguments parse and
    validate against that function's schema, finish_reason is as vLLM gives it for the choice, and the
    streamed deltas reassemble to the same calls as the whole answer."""
    if (fault := _status(whole) or _status(streamed)) is not None:
        return fault
    schemas = {tool.name: tool.parameters for tool in case.tools}
    forced = case.tool_choice != "auto"
    if forced and not whole.tool_calls:
        return Fault("tool_calls", excerpt(whole.text) or "none")
    offered = set(schemas) if case.tool_choice in ("auto", "required") else {case.tool_choice}
    for call in whole.tool_calls:
        if call.name is None or call.name not in offered:
            return Fault("tool_calls.name", str(call.name))
        try:
            arguments = json.loads(call.arguments)
        except ValueError:
            return Fault("tool_calls.arguments", excerpt(call.arguments))
        fault = _schema_fault(arguments, schemas[call.name], "tool_calls.arguments", call.arguments)
        if fault is not None:
            return fault
    for answer in (whole, streamed):
        wanted = expected_finish(case.tool_choice, called=bool(answer.tool_calls))
        if (answer.finish_reason != wanted) if wanted else answer.finish_reason == "tool_calls":
            return Fault("finish_reason", str(answer.finish_reason))
    if streamed.tool_calls != whole.tool_calls:
        got = streamed.tool_calls[0].arguments if streamed.tool_calls else "no calls"
        return Fault("streamed tool_calls", excerpt(got))
    return None


def cancel_fault(before: float | None, after: float | None) -> Fault | None:
    """A cancel case: after the dropped stream, vllm:num_requests_running came back to (at most) where
    it was before, within the case's bound. None readings mean /metrics could not be read."""
    if before is None or after is None:
        return Fault("metrics", "vllm:num_requests_running unreadable")
    if after > before:
        return Fault("vllm:num_requests_running", f"{before:g} before, {after:g} after")
    return None


@dataclass(frozen=True)
class Scored:
    """A sampled answer and its score; without one, why not."""

    answer: Answer
    score: float | None
    why: str = ""


ENDED_BY_ITSELF = ("stop", "tool_calls")


def builtin_score(answer: Answer, builtin: BuiltinScore) -> Scored:
    """A built-in scalar of the answer: its completion tokens, or 1 when it ended by itself (stop or
    tool_calls) and 0 when it was cut or aborted. An answer that failed, or lacks the field, has none."""
    if answer.status != 200:
        return Scored(answer, None, f"the answer failed with HTTP {answer.status}")
    if builtin is BuiltinScore.LENGTH:
        if answer.tokens is None:
            return Scored(answer, None, "the answer carries no completion_tokens")
        return Scored(answer, float(answer.tokens))
    if answer.finish_reason is None:
        return Scored(answer, None, "the answer carries no finish_reason")
    return Scored(answer, 1.0 if answer.finish_reason in ENDED_BY_ITSELF else 0.0)


def reply_score(reply: bytes) -> float | None:
    """The score in a score webhook's reply: a JSON object whose `score` is a finite number; None for
    anything else (a reply over SCORE_REPLY_LIMIT, not JSON, a string, a boolean, NaN)."""
    if len(reply) > SCORE_REPLY_LIMIT:
        return None
    try:
        document = json.loads(reply)
    except (ValueError, RecursionError):
        return None
    value = document.get("score") if isinstance(document, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)
