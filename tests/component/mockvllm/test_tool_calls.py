"""Tool calls over real HTTP, as vLLM 0.33 answers them: whole and streamed, for each tool_choice."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from tests.component.mockvllm.client import (
    FAST,
    TOOL_FLAGS,
    TOOLS,
    WEATHER_PARAMETERS,
    events,
    finish,
    post,
    streamed_text,
)

ASK = [{"role": "user", "content": "Use get_weather for Oslo, please."}]
NAMED = {"type": "function", "function": {"name": "get_weather"}}
# tool_choice -> (message.content, finish_reason) as vLLM's serving layer sets them.
MODES: dict[str, tuple[Any, Any, str]] = {
    "auto": ("auto", None, "tool_calls"),
    "required": ("required", "", "tool_calls"),
    "named": (NAMED, "", "stop"),
}


def body(tool_choice: Any, **extra: Any) -> dict[str, Any]:
    return {"messages": ASK, "tools": TOOLS, "tool_choice": tool_choice, "temperature": 0, **extra}


def reassemble(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tool calls a client builds from stream deltas (by index, fields concatenated)."""
    calls: dict[int, dict[str, Any]] = {}
    for chunk in chunks:
        for delta in chunk["choices"][0]["delta"].get("tool_calls", []):
            call = calls.setdefault(delta["index"], {"function": {"name": None, "arguments": ""}})
            for key in ("id", "type"):
                if key in delta:
                    call[key] = delta[key]
            function = delta.get("function", {})
            call["function"]["name"] = call["function"]["name"] or function.get("name")
            call["function"]["arguments"] += function.get("arguments") or ""
    return [calls[i] for i in sorted(calls)]


@pytest.mark.parametrize("mode", MODES, ids=MODES.keys())
async def test_a_tool_call_answer_whole_and_streamed(mock_vllm: Any, mode: str) -> None:
    mock = await mock_vllm(*FAST, *TOOL_FLAGS)
    choice, content, finish_reason = MODES[mode]
    status, answer = await post(mock.url + "/v1/chat/completions", body(choice))
    assert status == 200
    (result,) = answer["choices"]
    message = result["message"]
    (call,) = message["tool_calls"]
    assert call["id"].startswith("chatcmpl-tool-") and call["type"] == "function"
    assert call["function"]["name"] == "get_weather"
    arguments = json.loads(call["function"]["arguments"])
    jsonschema.validate(arguments, WEATHER_PARAMETERS)
    assert (message["content"], result["finish_reason"], result["stop_reason"]) == (content, finish_reason, None)

    chunks = await events(mock.url + "/v1/chat/completions", body(choice))
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    deltas = [c["choices"][0]["delta"]["tool_calls"][0] for c in chunks if "tool_calls" in c["choices"][0]["delta"]]
    first, *rest = deltas
    assert set(first) == {"id", "type", "index", "function"} and first["function"]["name"] == "get_weather"
    assert "arguments" in first["function"]
    assert rest and all(set(d) == {"index", "function"} and d["function"].get("name") is None for d in rest)
    (streamed,) = reassemble(chunks)
    assert streamed["function"] == call["function"]  # greedy: the same call, streamed or not
    assert streamed_text(chunks) == ""
    assert finish(chunks) == (finish_reason, None)


async def test_auto_answers_in_text_when_no_tool_is_named(mock_vllm: Any) -> None:
    mock = await mock_vllm(*FAST, *TOOL_FLAGS)
    messages = [{"role": "user", "content": "Tell me about the sea."}]
    status, answer = await post(
        mock.url + "/v1/chat/completions", {"messages": messages, "tools": TOOLS, "max_tokens": 8, "temperature": 0}
    )
    message = answer["choices"][0]["message"]
    assert status == 200 and "tool_calls" not in message and len(message["content"].split()) == 8
    assert answer["choices"][0]["finish_reason"] == "length"


async def test_a_call_after_a_tool_result_is_not_repeated(mock_vllm: Any) -> None:
    mock = await mock_vllm(*FAST, *TOOL_FLAGS)
    _, first = await post(mock.url + "/v1/chat/completions", body("auto"))
    call = first["choices"][0]["message"]["tool_calls"][0]
    messages = [
        *ASK,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": '{"forecast": "sunny"}'},
    ]
    _, second = await post(
        mock.url + "/v1/chat/completions", {"messages": messages, "tools": TOOLS, "max_tokens": 6, "temperature": 0}
    )
    assert "tool_calls" not in second["choices"][0]["message"]
    assert second["usage"]["prompt_tokens"] > first["usage"]["prompt_tokens"]  # the call and result count


@pytest.mark.parametrize(
    ("choice", "message"),
    [
        ("auto", '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'),
        ("required", 'tool_choice="required" requires --tool-call-parser to be set'),
        (NAMED, 'tool_choice=function "get_weather" requires --tool-call-parser to be set'),
    ],
    ids=["auto", "required", "named"],
)
async def test_without_a_tool_parser_tool_choice_is_refused(mock_vllm: Any, choice: Any, message: str) -> None:
    mock = await mock_vllm(*FAST)
    status, answer = await post(mock.url + "/v1/chat/completions", body(choice))
    assert status == 400 and answer["error"]["message"] == message
    status, plain = await post(mock.url + "/v1/chat/completions", body("none", max_tokens=4))
    assert status == 200 and "tool_calls" not in plain["choices"][0]["message"]


async def test_the_tool_parser_counter_counts_auto_answers(mock_vllm: Any, scrape: Any) -> None:
    mock = await mock_vllm(*FAST, *TOOL_FLAGS)
    await post(mock.url + "/v1/chat/completions", body("auto"))
    await post(mock.url + "/v1/chat/completions", body("required"))  # no parser run for forced calls
    chunks = await events(mock.url + "/v1/chat/completions", body("auto"))
    m = await scrape(mock.url)
    key = "vllm:tool_call_parser_invocations_total{{mode={},outcome={},request_type=chat_completions}}"
    assert m[key.format("non_streaming", "tool_call")] == 1
    assert m[key.format("non_streaming", "no_tool_call")] == 0
    tool_deltas = sum("tool_calls" in c["choices"][0]["delta"] for c in chunks if c["choices"])
    assert m[key.format("streaming", "tool_call")] == tool_deltas
    assert m[key.format("streaming", "no_tool_call")] > 0  # the call's markup before and after its arguments
