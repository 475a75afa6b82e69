"""Tool calls: which call an answer makes, the model text that carries it, and its deltas."""

from __future__ import annotations

import itertools
import json
from typing import Any

import jsonschema
import pytest

from specpilot.mockvllm.tools import (
    Tool,
    ToolChoice,
    ToolMode,
    arguments_for,
    call_entry,
    chosen_tool,
    finish_reason,
    malformed,
    message_content,
    script,
    whole_call,
)

WEATHER = Tool(
    "get_weather",
    {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city", "days"],
    },
)
CLOCK = Tool("current_time", {})
TOOLS = (WEATHER, CLOCK)
MODES = [ToolMode.AUTO, ToolMode.REQUIRED, ToolMode.NAMED]


@pytest.mark.parametrize(
    ("choice", "last_user_text", "called"),
    [
        (ToolChoice(ToolMode.NONE), "use get_weather", None),
        (ToolChoice(ToolMode.AUTO), "what does get_weather say for Oslo?", "get_weather"),
        (ToolChoice(ToolMode.AUTO), "Current Time please", "current_time"),
        (ToolChoice(ToolMode.AUTO), "tell me a story", None),
        (ToolChoice(ToolMode.AUTO), None, None),  # the last message is not the user's
        (ToolChoice(ToolMode.REQUIRED), "what is the current time", "current_time"),
        (ToolChoice(ToolMode.NAMED, "current_time"), "use get_weather", "current_time"),
    ],
    ids=["none", "auto-named", "auto-spaced", "auto-unmentioned", "auto-after-tool", "required-named", "named"],
)
def test_which_tool_an_answer_calls(choice: ToolChoice, last_user_text: str | None, called: str | None) -> None:
    tool = chosen_tool(TOOLS, choice, last_user_text, seed=1)
    assert (tool.name if tool else None) == called


def test_required_picks_a_tool_by_seed_when_none_is_named() -> None:
    picks = [chosen_tool(TOOLS, ToolChoice(ToolMode.REQUIRED), "hello", seed) for seed in range(20)]
    assert {tool.name for tool in picks if tool is not None} == {"get_weather", "current_time"}


def test_arguments_conform_to_the_parameters_and_default_to_an_object() -> None:
    jsonschema.validate(json.loads(arguments_for(WEATHER, 5)), WEATHER.parameters)
    assert isinstance(json.loads(arguments_for(CLOCK, 5)), dict)


@pytest.mark.parametrize(
    ("mode", "text"),
    [
        (ToolMode.NAMED, '{"a": 1}'),
        (ToolMode.REQUIRED, '[{"name": "get_weather", "parameters": {"a": 1}}]'),
        (ToolMode.AUTO, '<tool_call>\n{"name": "get_weather", "arguments": {"a": 1}}\n</tool_call>'),
    ],
)
def test_the_model_text_of_a_call_follows_the_mode(mode: ToolMode, text: str) -> None:
    called = script(WEATHER, mode, '{"a": 1}')
    assert called.text == text
    assert called.text[called.args_start : called.args_end] == '{"a": 1}'


def reassemble(deltas: list[dict[str, Any]]) -> dict[str, Any]:
    """What a client builds from the deltas, as the openai SDK does."""
    first, *rest = deltas
    assert set(first) == {"id", "type", "index", "function"} and first["function"]["name"] == "get_weather"
    assert all(set(d) == {"index", "function"} and d["index"] == 0 for d in rest)
    assert all(d["function"].get("name") is None and d["function"]["arguments"] for d in rest)
    arguments = first["function"]["arguments"] + "".join(d["function"]["arguments"] for d in rest)
    return {"id": first["id"], "type": first["type"], "function": {"name": "get_weather", "arguments": arguments}}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("step", [1, 2, 3, 7, 1000])
def test_deltas_reassemble_to_the_whole_call_at_any_split(mode: ToolMode, step: int) -> None:
    called = script(WEATHER, mode, arguments_for(WEATHER, 3))
    cuts = [*range(0, len(called.text), step), len(called.text)]
    deltas = [call_entry(called, "call-1", a, b) for a, b in itertools.pairwise(cuts)]
    present = [d for d in deltas if d is not None]
    assert reassemble(present) == whole_call(called, "call-1", called.text)


def test_text_before_the_arguments_carries_no_call() -> None:
    called = script(WEATHER, ToolMode.AUTO, '{"a": 1}')
    assert call_entry(called, "c", 0, called.args_start) is None
    assert whole_call(called, "c", called.text[: called.args_start]) is None
    assert call_entry(called, "c", called.args_end, len(called.text)) is None  # the closing markup


def test_a_cut_call_keeps_the_arguments_it_reached() -> None:
    called = script(WEATHER, ToolMode.NAMED, '{"city": "Oslo"}')
    assert whole_call(called, "c", called.text[:5]) == {
        "id": "c",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"cit'},
    }


def test_malformed_arguments_are_not_json() -> None:
    with pytest.raises(json.JSONDecodeError):
        json.loads(malformed(arguments_for(WEATHER, 1)))


@pytest.mark.parametrize(
    ("mode", "called", "finish", "reason", "content"),
    [
        (None, False, "length", "length", "text"),
        (ToolMode.AUTO, True, "stop", "tool_calls", None),
        (ToolMode.AUTO, True, "length", "length", None),
        (ToolMode.REQUIRED, True, "stop", "tool_calls", ""),
        (ToolMode.REQUIRED, False, "stop", "stop", ""),
        (ToolMode.NAMED, True, "stop", "stop", ""),
    ],
)
def test_finish_reason_and_content_as_vllm_reports_them(
    mode: ToolMode | None, called: bool, finish: str, reason: str, content: str | None
) -> None:
    tool = script(WEATHER, mode, "{}") if mode is not None else None
    assert finish_reason(tool, called=called, finish=finish) == reason
    assert message_content(tool, "text") == content
