"""What the model answers a request with, as tokens for the engine: a tool call, a structured
document, or free text, in that order of precedence.

Pure: everything follows from the request and its answer seed (the prompt and the server seed for
greedy requests), so every arm answers a greedy request alike. The quality faults that strike a
request arrive as `Slips` and bend the answer the way a broken arm would.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from specpilot.mockvllm.protocol import Generation, StructuredOutput
from specpilot.mockvllm.schemavalues import conforming, violating
from specpilot.mockvllm.textgen import ScriptedTokens, Tokens, TokenSource
from specpilot.mockvllm.tools import ToolScript, arguments_for, chosen_tool, malformed, script

# A choice no constraint lists: what a broken arm answers a `choice` constraint with.
OFF_CHOICE = "<none of the choices>"


@dataclass(frozen=True)
class Slips:
    """Quality faults striking one request."""

    tool_json: bool = False  # tool-call arguments are not JSON
    structured_invalid: bool = False  # the structured answer does not validate
    loop_at: int | None = None  # free text falls into a loop from this position on (a repetition fault)


@dataclass(frozen=True)
class Answer:
    """The engine's tokens, and the tool call they carry, if any."""

    tokens: Tokens
    tool: ToolScript | None = None


def plan(gen: Generation, *, seed: int, mean_length: int, diverge_at: int | None, slips: Slips) -> Answer:
    """The answer to `gen`; `diverge_at` and a loop apply to free text only."""
    tool = chosen_tool(gen.tools, gen.tool_choice, gen.last_user_text, seed)
    if tool is not None:
        arguments = arguments_for(tool, seed)
        called = script(tool, gen.tool_choice.mode, malformed(arguments) if slips.tool_json else arguments)
        return Answer(ScriptedTokens(called.text), called)
    if gen.structured is not None:
        return Answer(ScriptedTokens(document(gen.structured, seed, invalid=slips.structured_invalid)))
    return Answer(TokenSource(seed, mean_length=mean_length, diverge_at=diverge_at, loop_at=slips.loop_at))


def document(structured: StructuredOutput, seed: int, *, invalid: bool = False) -> str:
    """The text of a structured answer: valid against the constraint, or (`invalid`) not."""
    if structured.schema is None:
        return OFF_CHOICE if invalid else random.Random(seed).choice(structured.choices)
    if not invalid:
        return json.dumps(conforming(structured.schema, seed), ensure_ascii=False)
    broken = violating(structured.schema, seed)
    if broken is None:  # the schema admits any value: cut the document instead
        return json.dumps(conforming(structured.schema, seed), ensure_ascii=False)[:-1]
    return json.dumps(broken.value, ensure_ascii=False)
