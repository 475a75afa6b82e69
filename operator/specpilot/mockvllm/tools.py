"""Tool calling as vLLM 0.33 serves it: which call an answer makes, the model text that carries it,
and the `tool_calls` entries (whole, or as stream deltas) read back from that text.

What the model emits depends on `tool_choice`, as with vLLM's parsers: a named function's output
is its arguments object; "required" emits `[{"name": ..., "parameters": {...}}]`; "auto" emits a
Hermes-style `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`. The engine generates that
text token by token; `call_entry` reads the call back from any prefix of it, so a stream's deltas
always reassemble to the unstreamed call.

The "auto" rule: a call is made when the last message is the user's and names a tool
(case-insensitively, with or without underscores read as spaces); the first such tool in `tools`
order is called. "required" calls that tool too, else one picked by the answer's seed.
"""

from __future__ import annotations

import enum
import json
import random
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specpilot.mockvllm.schemavalues import conforming


class ToolMode(enum.StrEnum):
    """`tool_choice`, with a named function as NAMED."""

    NONE = "none"
    AUTO = "auto"
    REQUIRED = "required"
    NAMED = "named"


@dataclass(frozen=True)
class ToolChoice:
    mode: ToolMode
    name: str | None = None  # the function, for NAMED


@dataclass(frozen=True)
class Tool:
    """One function a request offers."""

    name: str
    parameters: Mapping[str, Any]


@dataclass(frozen=True)
class ToolScript:
    """The model text of one tool call, and where its arguments lie in it."""

    name: str
    mode: ToolMode
    text: str
    args_start: int
    args_end: int


def mentioned(tools: Sequence[Tool], text: str) -> Tool | None:
    """The first tool whose name `text` mentions."""
    lowered = text.lower()
    for tool in tools:
        name = tool.name.lower()
        if name in lowered or name.replace("_", " ") in lowered:
            return tool
    return None


def chosen_tool(tools: Sequence[Tool], choice: ToolChoice, last_user_text: str | None, seed: int) -> Tool | None:
    """The tool an answer calls, or None for a plain answer (see the module's rule)."""
    if choice.mode is ToolMode.NAMED:
        return next(tool for tool in tools if tool.name == choice.name)
    if choice.mode is ToolMode.NONE or not tools:
        return None
    named = mentioned(tools, last_user_text) if last_user_text is not None else None
    if named is not None or choice.mode is ToolMode.AUTO:
        return named
    return tools[random.Random(seed).randrange(len(tools))]


def arguments_for(tool: Tool, seed: int) -> str:
    """Arguments valid against the tool's parameters schema, as vLLM serialises them."""
    return json.dumps(conforming(tool.parameters or {"type": "object", "properties": {}}, seed), ensure_ascii=False)


def malformed(arguments: str) -> str:
    """Arguments that are not JSON: the closing brace is missing."""
    return arguments.removesuffix("}")


def script(tool: Tool, mode: ToolMode, arguments: str) -> ToolScript:
    """The model text that calls `tool` with `arguments` under `mode`."""
    name = json.dumps(tool.name, ensure_ascii=False)
    if mode is ToolMode.NAMED:
        head, tail = "", ""
    elif mode is ToolMode.REQUIRED:
        head, tail = f'[{{"name": {name}, "parameters": ', "}]"
    else:
        head, tail = f'<tool_call>\n{{"name": {name}, "arguments": ', "}\n</tool_call>"
    return ToolScript(tool.name, mode, head + arguments + tail, len(head), len(head) + len(arguments))


def new_call_id() -> str:
    """A tool-call id as vLLM makes them."""
    return f"chatcmpl-tool-{uuid.uuid4().hex}"


def call_entry(tool: ToolScript, call_id: str, sent: int, upto: int) -> dict[str, Any] | None:
    """The `tool_calls` delta for model text [sent, upto), or None when it carries nothing.

    The delta that first reaches the arguments announces the call (id, type, name and the
    arguments so far); later ones carry only new argument text. From sent=0 to the end of the
    text it is the whole call.
    """
    if upto <= tool.args_start:
        return None
    end = min(upto, tool.args_end)
    if sent > tool.args_start:  # an earlier delta announced the call
        if sent >= end:
            return None
        function: dict[str, Any] = {"arguments": tool.text[sent:end]}
        if tool.mode is ToolMode.REQUIRED:
            function = {"name": None, **function}  # vLLM sets it explicitly, so it serialises
        return {"index": 0, "function": function}
    return {
        "id": call_id,
        "type": "function",
        "index": 0,
        "function": {"name": tool.name, "arguments": tool.text[tool.args_start : end]},
    }


def whole_call(tool: ToolScript, call_id: str, text: str) -> dict[str, Any] | None:
    """The message's `tool_calls` entry for the finished model text, if the call got as far as its arguments."""
    entry = call_entry(tool, call_id, 0, len(text))
    if entry is None:
        return None
    return {"id": call_id, "type": "function", "function": entry["function"]}


def message_content(tool: ToolScript | None, text: str) -> str | None:
    """The message's `content`: the text, or for a tool call null ("auto") or "" (required, named)."""
    if tool is None:
        return text
    return None if tool.mode is ToolMode.AUTO else ""


def finish_reason(tool: ToolScript | None, *, called: bool, finish: str) -> str:
    """vLLM's finish_reason: "tool_calls" when an "auto" or "required" call was made and the model
    stopped; a named call keeps "stop", as OpenAI's API does."""
    if tool is not None and called and tool.mode is not ToolMode.NAMED and finish == "stop":
        return "tool_calls"
    return finish
