"""The official openai client against the mock: tool calls and structured outputs in the shapes it
parses, whole, streamed chunk by chunk, and through its streaming helper's reassembly."""

from __future__ import annotations

import json
from typing import Any, Literal

import jsonschema
import openai
from pydantic import BaseModel, Field
from tests.component.mockvllm.client import FAST, TOOL_FLAGS, TOOLS, WEATHER_PARAMETERS

ASK = [{"role": "user", "content": "What will get_weather say about Bergen?"}]


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


async def test_tool_calls_whole_and_streamed_chunk_by_chunk(mock_vllm: Any) -> None:
    mock = await mock_vllm(*FAST, *TOOL_FLAGS)
    async with client(mock.url) as sdk:
        whole = await sdk.chat.completions.create(
            model="test-model",
            messages=ASK,
            tools=TOOLS,
            tool_choice="auto",
            temperature=0,
        )
        stream = await sdk.chat.completions.create(
            model="test-model",
            messages=ASK,
            tools=TOOLS,
            tool_choice="auto",
            temperature=0,
            stream=True,
        )
        ids, names, fragments, reasons = set(), set(), [], []
        async for chunk in stream:
            choice = chunk.choices[0]
            reasons.append(choice.finish_reason)
            for delta in choice.delta.tool_calls or []:
                assert delta.index == 0
                ids.add(delta.id)
                names.add(delta.function.name if delta.function else None)
                fragments.append(delta.function.arguments or "" if delta.function else "")
    (call,) = whole.choices[0].message.tool_calls or []
    assert call.type == "function" and call.id.startswith("chatcmpl-tool-")
    assert (call.function.name, whole.choices[0].finish_reason) == ("get_weather", "tool_calls")
    assert whole.choices[0].message.content is None
    jsonschema.validate(json.loads(call.function.arguments), WEATHER_PARAMETERS)
    assert len(ids - {None}) == 1 and names - {None} == {"get_weather"}
    assert "".join(fragments) == call.function.arguments
    assert reasons[-1] == "tool_calls"


async def test_the_sdk_stream_helper_parses_a_strict_function_tool(mock_vllm: Any) -> None:
    mock = await mock_vllm(*FAST, *TOOL_FLAGS)
    tool = openai.pydantic_function_tool(GetWeather, name="get_weather")
    async with client(mock.url) as sdk:
        whole = await sdk.chat.completions.parse(
            model="test-model",
            messages=ASK,
            tools=[tool],
            tool_choice="required",
            temperature=0,
        )
        async with sdk.chat.completions.stream(
            model="test-model",
            messages=ASK,
            tools=[tool],
            tool_choice="required",
            temperature=0,
        ) as stream:
            done = [event async for event in stream if event.type == "tool_calls.function.arguments.done"]
            final = await stream.get_final_completion()
    (parsed_call,) = whole.choices[0].message.tool_calls or []
    arguments = parsed_call.function.parsed_arguments
    assert isinstance(arguments, GetWeather) and 1 <= arguments.days <= 7
    (streamed_call,) = final.choices[0].message.tool_calls or []
    assert streamed_call.function.parsed_arguments == arguments  # greedy: the same call
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
