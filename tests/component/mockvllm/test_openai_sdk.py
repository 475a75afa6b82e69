"""The official openai client against the mock: tool calls (auto, required, a named function) and
structured outputs (a json_schema response format, pydantic models through `parse`) in the shapes it
parses, whole, streamed chunk by chunk, and through its streaming helper's reassembly."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field
from tests.component.mockvllm.client import FAST, TOOL_FLAGS, TOOLS

ASK = [{"role": "user", "content": "What will get_weather say about Bergen?"}]
SCHEMAS = {tool["function"]["name"]: tool["function"]["parameters"] for tool in TOOLS}


class GetWeather(BaseModel):
    """Forecast for a city."""

    city: str
    days: int = Field(ge=1, le=7)


class Step(BaseModel):
    explanation: str
    output: str


class Incident(BaseModel):
    summary: str
    severity: Literal["low", "medium", "high"]
    steps: list[Step]
    affected_users: int | None


def client(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0, timeout=10)


@dataclass(frozen=True)
class Choice:
    """A tool_choice and what vLLM answers it with: the function called, finish_reason, content."""

    tool_choice: Any
    name: str
    finish_reason: str
    content: str | None


CHOICES = [
    pytest.param(Choice("auto", "get_weather", "tool_calls", None), id="auto"),
    pytest.param(Choice("required", "get_weather", "tool_calls", ""), id="required"),
    # A named call keeps finish_reason "stop", as OpenAI's API does; it names a tool the prompt does not.
    pytest.param(
        Choice({"type": "function", "function": {"name": "current_time"}}, "current_time", "stop", ""), id="named"
    ),
]


@pytest.mark.parametrize("choice", CHOICES)
async def test_tool_calls_whole_streamed_and_through_the_stream_helper(mock_vllm: Any, choice: Choice) -> None:
    mock = await mock_vllm(*FAST, *TOOL_FLAGS)
    request: dict[str, Any] = {
        "model": "test-model",
        "messages": ASK,
        "tools": TOOLS,
        "tool_choice": choice.tool_choice,
        "temperature": 0,
    }
    async with client(mock.url) as sdk:
        whole = await sdk.chat.completions.create(**request)
        chunks = [chunk async for chunk in await sdk.chat.completions.create(**request, stream=True)]
        async with sdk.chat.completions.stream(**request) as stream:
            done = [event async for event in stream if event.type == "tool_calls.function.arguments.done"]
            final = await stream.get_final_completion()

    (call,) = whole.choices[0].message.tool_calls or []
    assert call.type == "function" and call.id.startswith("chatcmpl-tool-")
    assert (call.function.name, whole.choices[0].finish_reason) == (choice.name, choice.finish_reason)
    assert whole.choices[0].message.content == choice.content
    jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[choice.name])

    deltas = [delta for chunk in chunks if chunk.choices for delta in chunk.choices[0].delta.tool_calls or ()]
    assert deltas and {delta.index for delta in deltas} == {0}
    assert deltas[0].id is not None and deltas[0].type == "function"  # the first delta announces the call
    assert [delta.id for delta in deltas[1:]] == [None] * (len(deltas) - 1)
    names = {delta.function.name for delta in deltas if delta.function} - {None}
    arguments = "".join(delta.function.arguments or "" for delta in deltas if delta.function)
    assert (names, arguments) == ({call.function.name}, call.function.arguments)  # greedy: the same call
    reasons = [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices]
    assert reasons[-1] == choice.finish_reason and set(reasons[:-1]) == {None}

    (accumulated,) = final.choices[0].message.tool_calls or []
    assert (accumulated.function.name, accumulated.function.arguments) == (call.function.name, call.function.arguments)
    assert final.choices[0].finish_reason == choice.finish_reason
    assert [event.arguments for event in done] == [call.function.arguments]


@pytest.mark.parametrize(
    ("tool_choice", "finish_reason"),
    [("required", "tool_calls"), ({"type": "function", "function": {"name": "get_weather"}}, "stop")],
    ids=["required", "named"],
)
async def test_the_sdk_parses_a_strict_function_tool_whole_and_streamed(
    mock_vllm: Any, tool_choice: Any, finish_reason: str
) -> None:
    mock = await mock_vllm(*FAST, *TOOL_FLAGS)
    tool = openai.pydantic_function_tool(GetWeather, name="get_weather")
    request: dict[str, Any] = {
        "model": "test-model",
        "messages": ASK,
        "tools": [tool],
        "tool_choice": tool_choice,
        "temperature": 0,
    }
    async with client(mock.url) as sdk:
        whole = await sdk.chat.completions.parse(**request)
        async with sdk.chat.completions.stream(**request) as stream:
            done = [event async for event in stream if event.type == "tool_calls.function.arguments.done"]
            final = await stream.get_final_completion()
    (parsed_call,) = whole.choices[0].message.tool_calls or []
    arguments = parsed_call.function.parsed_arguments
    assert isinstance(arguments, GetWeather) and 1 <= arguments.days <= 7
    assert whole.choices[0].finish_reason == finish_reason
    (streamed_call,) = final.choices[0].message.tool_calls or []
    assert streamed_call.function.parsed_arguments == arguments  # greedy: the same call
    assert final.choices[0].finish_reason == finish_reason
    assert len(done) == 1 and done[0].parsed_arguments == arguments


async def test_structured_outputs_parse_into_the_model_whole_and_streamed(mock_vllm: Any) -> None:
    mock = await mock_vllm(*FAST)
    messages = [{"role": "user", "content": "Summarise the outage."}]
    async with client(mock.url) as sdk:
        whole = await sdk.chat.completions.parse(
            model="test-model",
            messages=messages,
            response_format=Incident,
            temperature=0,
        )
        async with sdk.chat.completions.stream(
            model="test-model",
            messages=messages,
            response_format=Incident,
            temperature=0,
        ) as stream:
            final = await stream.get_final_completion()
        loose = await sdk.chat.completions.create(
            model="test-model",
            messages=messages,
            response_format={"type": "json_object"},
            temperature=0,
        )
    parsed = whole.choices[0].message.parsed
    assert isinstance(parsed, Incident) and parsed.severity in ("low", "medium", "high")
    assert final.choices[0].message.parsed == parsed
    assert isinstance(json.loads(loose.choices[0].message.content or ""), dict)


INCIDENT = {
    "type": "object",
    "properties": {
        "summary": {"type": "string", "maxLength": 40},
        "severity": {"enum": ["low", "medium", "high"]},
        "affected_users": {"type": "integer", "minimum": 0},
        "steps": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"explanation": {"type": "string"}, "output": {"type": "string"}},
                "required": ["explanation", "output"],
                "additionalProperties": False,
            },
            "minItems": 1,
            "maxItems": 3,
        },
    },
    "required": ["summary", "severity", "affected_users", "steps"],
    "additionalProperties": False,
}


async def test_a_json_schema_answer_validates_whole_streamed_and_through_the_stream_helper(mock_vllm: Any) -> None:
    mock = await mock_vllm(*FAST)
    request: dict[str, Any] = {
        "model": "test-model",
        "messages": [{"role": "user", "content": "Summarise the outage."}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "incident", "schema": INCIDENT}},
        "temperature": 0,
    }
    async with client(mock.url) as sdk:
        whole = await sdk.chat.completions.create(**request)
        chunks = [chunk async for chunk in await sdk.chat.completions.create(**request, stream=True)]
        async with sdk.chat.completions.stream(**request) as stream:
            final = await stream.get_final_completion()

    text = whole.choices[0].message.content or ""
    jsonschema.validate(json.loads(text), INCIDENT)
    assert whole.choices[0].finish_reason == "stop" and not whole.choices[0].message.tool_calls
    streamed = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert streamed == text  # greedy: the same document
    reasons = [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices]
    assert reasons[-1] == "stop" and set(reasons[:-1]) == {None}
    assert final.choices[0].message.content == text and final.choices[0].finish_reason == "stop"
