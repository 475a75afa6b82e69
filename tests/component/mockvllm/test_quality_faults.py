"""Faults that break answers rather than timing, injected at run time on one server (one arm), and
what a client that drops a stream leaves behind: nothing, unless a cancel_leak fault holds its slot."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import jsonschema
import pytest
from tests.component.mockvllm.client import (
    FAST,
    TOOL_FLAGS,
    TOOLS,
    WEATHER_PARAMETERS,
    finish,
    inject,
    post,
    streamed_text,
)

from specpilot.testing.waiting import eventually

SCOPE = "X-Specpilot-Scope"
CHAT = "/v1/chat/completions"
NAMED = {"type": "function", "function": {"name": "get_weather"}}


async def answer(url: str, body: dict[str, Any], *, stream: bool, scope: str = "chat") -> tuple[dict[str, Any], str]:
    """(the choice, with the streamed text as message.content and deltas' tool calls joined; the text)."""
    if not stream:
        status, whole = await post(url + CHAT, body, {SCOPE: scope})
        assert status == 200, whole
        choice = whole["choices"][0]
        return choice, choice["message"]["content"]
    async with aiohttp.ClientSession() as session:
        chunks = []
        async with session.post(url + CHAT, json={**body, "stream": True}, headers={SCOPE: scope}) as response:
            async for line in response.content:
                if line.startswith(b"data: {"):
                    chunks.append(json.loads(line.removeprefix(b"data: ")))
    reason, stop_reason = finish(chunks)
    arguments = "".join(
        call["function"].get("arguments") or ""
        for chunk in chunks
        for call in chunk["choices"][0]["delta"].get("tool_calls", [])
    )
    choice = {"finish_reason": reason, "stop_reason": stop_reason, "arguments": arguments}
    return choice, streamed_text(chunks)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_stop_overrun_runs_past_the_stop_string_in_its_scope_only(mock_vllm: Any, stream: bool) -> None:
    mock = await mock_vllm(*FAST)
    body = {
        "messages": [{"role": "user", "content": "overrun"}],
        "max_tokens": 30,
        "temperature": 0,
        "ignore_eos": True,
    }
    _, full = await answer(mock.url, body, stream=False)
    stop = full.split(" ")[6]
    await inject(mock.admin_url, {"kind": "stop_overrun", "rate": 1.0, "scope": "chat"})
    choice, text = await answer(mock.url, {**body, "stop": [stop]}, stream=stream)
    assert text == full and stop in text  # the whole answer, stop string included
    assert (choice["finish_reason"], choice["stop_reason"]) == ("length", None)
    choice, text = await answer(mock.url, {**body, "stop": [stop]}, stream=stream, scope="code")
    assert stop not in text and choice["stop_reason"] == stop


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_tool_json_breaks_the_arguments(mock_vllm: Any, stream: bool) -> None:
    mock = await mock_vllm(*FAST, *TOOL_FLAGS)
    body = {
        "messages": [{"role": "user", "content": "weather?"}],
        "tools": TOOLS,
        "tool_choice": NAMED,
        "temperature": 0,
    }
    healthy, _ = await answer(mock.url, body, stream=stream)
    arguments = healthy["arguments"] if stream else healthy["message"]["tool_calls"][0]["function"]["arguments"]
    jsonschema.validate(json.loads(arguments), WEATHER_PARAMETERS)
    await inject(mock.admin_url, {"kind": "tool_json", "rate": 1.0})
    broken, _ = await answer(mock.url, body, stream=stream)
    arguments = broken["arguments"] if stream else broken["message"]["tool_calls"][0]["function"]["arguments"]
    with pytest.raises(json.JSONDecodeError):
        json.loads(arguments)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_structured_invalid_answers_documents_the_schema_rejects(mock_vllm: Any, stream: bool) -> None:
    mock = await mock_vllm(*FAST)
    schema = {"name": "w", "schema": WEATHER_PARAMETERS}
    body = {
        "messages": [{"role": "user", "content": "forecast as JSON"}],
        "response_format": {"type": "json_schema", "json_schema": schema},
        "temperature": 0,
    }
    _, text = await answer(mock.url, body, stream=stream)
    jsonschema.validate(json.loads(text), WEATHER_PARAMETERS)
    await inject(mock.admin_url, {"kind": "structured_invalid", "rate": 1.0})
    _, text = await answer(mock.url, body, stream=stream)
    assert not jsonschema.Draft202012Validator(WEATHER_PARAMETERS).is_valid(json.loads(text))


async def drop_a_stream(url: str, engine_running: Any) -> None:
    """Start a long stream, read until the engine runs it, and leave."""
    body = {"prompt": "long", "max_tokens": 3000, "ignore_eos": True, "stream": True}
    async with aiohttp.ClientSession() as session, session.post(url + "/v1/completions", json=body) as response:
        for _ in range(3):
            await response.content.readline()
        assert engine_running()


async def test_a_dropped_stream_gives_its_slot_and_blocks_back(mock_vllm: Any, scrape: Any) -> None:
    mock = await mock_vllm(*FAST)
    scheduler = mock.server.engine.scheduler
    before = await scrape(mock.url)
    await drop_a_stream(mock.url, lambda: scheduler.running)
    running = {"model_name": "test-model", "engine": "0"}
    await eventually(
        "the running gauge back to 0",
        lambda: mock.server.registry.get_sample_value("vllm:num_requests_running", running) == 0,
    )
    after = await scrape(mock.url)
    assert after["vllm:num_requests_running"] == before["vllm:num_requests_running"] == 0
    assert after["vllm:kv_cache_usage_perc"] == 0


async def test_with_cancel_leak_a_dropped_stream_keeps_its_slot_and_blocks(mock_vllm: Any, scrape: Any) -> None:
    mock = await mock_vllm(*FAST)
    scheduler = mock.server.engine.scheduler
    await inject(mock.admin_url, {"kind": "cancel_leak", "rate": 1.0})
    await drop_a_stream(mock.url, lambda: scheduler.running)
    await eventually("the dropped request to leak", lambda: scheduler.leaked)
    leaked = await scrape(mock.url)
    assert leaked["vllm:num_requests_running"] == 1 and leaked["vllm:kv_cache_usage_perc"] > 0
    status, _ = await post(mock.url + "/v1/completions", {"prompt": "after", "max_tokens": 5})
    assert status == 200  # the engine still serves; the leaked slot never comes back
    settled = await scrape(mock.url)  # the step that finished the request updated the gauges
    assert settled["vllm:num_requests_running"] == 1
    assert settled["vllm:kv_cache_usage_perc"] == leaked["vllm:kv_cache_usage_perc"]
    assert settled["vllm:request_success_total{finished_reason=length}"] == 1  # the leak is never finished
