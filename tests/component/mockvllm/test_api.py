"""The OpenAI-compatible API as vLLM 0.33 serves it, over real HTTP on loopback."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest
from prometheus_client import CONTENT_TYPE_LATEST

from specpilot.testing.waiting import eventually

FAST = ("--time-scale", "0.01")
SPEC = ("--speculative-config", '{"method": "draft_model", "model": "org/draft", "num_speculative_tokens": 4}')


async def post(url: str, body: Any, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.post(url, json=body, headers=headers) as response:
        return response.status, await response.json()


async def stream(url: str, body: dict[str, Any]) -> tuple[str, list[Any]]:
    """Content type and the decoded events of an SSE response ('[DONE]' kept as a string)."""
    events: list[Any] = []
    async with aiohttp.ClientSession() as session, session.post(url, json=body) as response:
        assert response.status == 200
        raw = (await response.read()).decode()
    for block in raw.split("\n\n"):
        if block:
            assert block.startswith("data: "), block
            payload = block.removeprefix("data: ")
            events.append(payload if payload == "[DONE]" else json.loads(payload))
    return response.headers["Content-Type"], events


async def test_models_lists_the_served_name(mock_vllm: Any) -> None:
    mock = await mock_vllm(*FAST, "--served-model-name", "target", "--max-model-len", "2048", model="org/target-8b")
    async with aiohttp.ClientSession() as session, session.get(mock.url + "/v1/models") as response:
        listing = await response.json()
    card = listing["data"][0]
    assert listing["object"] == "list"
    assert (card["id"], card["object"], card["owned_by"], card["root"], card["max_model_len"]) == (
        "target",
        "model",
        "vllm",
        "org/target-8b",
        2048,
    )
    assert card["parent"] is None and card["permission"][0]["object"] == "model_permission"


async def test_a_completion_has_every_vllm_field(mock_vllm: Any) -> None:
    mock = await mock_vllm(*FAST)
    status, body = await post(
        mock.url + "/v1/completions",
        {"model": "test-model", "prompt": "Say something", "max_tokens": 7, "temperature": 0},
    )
    assert status == 200
    assert body["id"].startswith("cmpl-") and body["object"] == "text_completion" and body["model"] == "test-model"
    assert set(body) == {
        "id",
        "object",
        "created",
        "model",
        "choices",
        "service_tier",
        "system_fingerprint",
        "usage",
        "kv_transfer_params",
        "ec_transfer_params",
        "metrics",
    }
    choice = body["choices"][0]
    assert set(choice) == {
        "index",
        "text",
        "logprobs",
        "finish_reason",
        "stop_reason",
        "token_ids",
        "prompt_logprobs",
        "prompt_token_ids",
        "routed_experts",
        "weight_versions",
    }
    assert choice["finish_reason"] == "length" and len(choice["text"].split()) == 7
    assert body["usage"]["completion_tokens"] == 7
    assert body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"] + 7


async def test_a_chat_completion_has_every_vllm_field(mock_vllm: Any) -> None:
    mock = await mock_vllm(*FAST)
    status, body = await post(
        mock.url + "/v1/chat/completions",
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}], "max_completion_tokens": 5},
        headers={"X-Request-Id": "abc123"},
    )
    assert status == 200
    assert body["id"] == "chatcmpl-abc123" and body["object"] == "chat.completion"
    message = body["choices"][0]["message"]
    assert message["role"] == "assistant" and len(message["content"].split()) == 5
    assert {"refusal", "annotations", "audio", "function_call", "reasoning"} <= set(message)
    assert {"prompt_token_ids", "prompt_text", "metrics", "usage"} <= set(body)


async def test_chat_streams_end_with_done_and_a_usage_chunk_when_asked(mock_vllm: Any) -> None:
    mock = await mock_vllm(*FAST, *SPEC)
    body = {
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": 20,
        "temperature": 0,
        "stream": True,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
    }
    content_type, events = await stream(mock.url + "/v1/chat/completions", body)
    assert content_type.startswith("text/event-stream")
    assert events[-1] == "[DONE]"
    first, *content, usage_chunk, _ = events
    assert first["object"] == "chat.completion.chunk"
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(c["choices"][0]["finish_reason"] is None for c in content[:-1])
    assert content[-1]["choices"][0]["finish_reason"] == "length"
    assert "stop_reason" in content[-1]["choices"][0]
    text = "".join(c["choices"][0]["delta"]["content"] for c in content)
    assert len(text.split()) == 20
    assert len(content) < 20  # speculative steps commit several tokens per chunk
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"] == {
        "prompt_tokens": usage_chunk["usage"]["prompt_tokens"],
        "completion_tokens": 20,
        "total_tokens": usage_chunk["usage"]["prompt_tokens"] + 20,
    }


async def test_completion_streams_have_no_usage_chunk_unless_asked(mock_vllm: Any) -> None:
    mock = await mock_vllm(*FAST)
    _, events = await stream(mock.url + "/v1/completions", {"prompt": "x", "max_tokens": 4, "stream": True})
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "text_completion" and "usage" not in c and c["choices"] for c in chunks)
    assert "".join(c["choices"][0]["text"] for c in chunks).count(" ") == 4


async def test_continuous_usage_stats_put_usage_on_every_chunk(mock_vllm: Any) -> None:
    mock = await mock_vllm(*FAST)
    body = {
        "prompt": "x",
        "max_tokens": 3,
        "stream": True,
        "ignore_eos": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    _, events = await stream(mock.url + "/v1/completions", body)
    counts = [e["usage"]["completion_tokens"] for e in events[:-1]]
    assert counts == sorted(counts) and counts[-1] == 3


async def test_greedy_output_is_the_same_on_both_arms_unless_a_divergence_is_injected(mock_vllm: Any) -> None:
    ordinary = await mock_vllm(*FAST)
    speculative = await mock_vllm(*FAST, *SPEC)
    body = {"prompt": "The same question", "max_tokens": 40, "temperature": 0, "ignore_eos": True}
    texts = []
    for mock in (ordinary, speculative, ordinary):
        _, answer = await post(mock.url + "/v1/completions", body)
        texts.append(answer["choices"][0]["text"])
    assert texts[0] == texts[1] == texts[2]
    fault = {"kind": "divergence", "after_tokens": 10}
    assert (await post(speculative.admin_url + "/faults", fault))[0] == 201
    _, answer = await post(speculative.url + "/v1/completions", body)
    diverged = answer["choices"][0]["text"].split()
    assert diverged[:10] == texts[0].split()[:10] and diverged != texts[0].split()


async def test_sampled_output_varies_unless_seeded(mock_vllm: Any) -> None:
    mock = await mock_vllm(*FAST)
    texts = []
    for seed in (None, None, 5, 5):
        body = {"prompt": "p", "max_tokens": 20, "temperature": 0.8, "ignore_eos": True, "seed": seed}
        texts.append((await post(mock.url + "/v1/completions", body))[1]["choices"][0]["text"])
    assert texts[0] != texts[1] and texts[2] == texts[3]


async def test_stop_strings_end_the_output(mock_vllm: Any) -> None:
    mock = await mock_vllm(*FAST)
    body: dict[str, Any] = {"prompt": "stop test", "max_tokens": 12, "temperature": 0, "ignore_eos": True}
    full = (await post(mock.url + "/v1/completions", body))[1]["choices"][0]["text"]
    stop = " " + full.split()[4]
    _, answer = await post(mock.url + "/v1/completions", {**body, "stop": [stop]})
    choice = answer["choices"][0]
    assert (choice["finish_reason"], choice["stop_reason"]) == ("stop", stop)
    assert full.startswith(choice["text"]) and stop not in choice["text"]


@pytest.mark.parametrize(
    ("path", "body", "status", "fragment"),
    [
        ("/v1/completions", {"prompt": "x", "max_tokens": 0}, 400, "max_tokens must be at least 1"),
        ("/v1/completions", {"prompt": "x", "temperature": -1}, 400, "temperature must be non-negative"),
        ("/v1/completions", {"prompt": "x", "max_tokens": 5000}, 400, "maximum context length is 4096"),
        ("/v1/completions", {"prompt": "x", "n": 2}, 400, "n=1"),
        ("/v1/completions", {"max_tokens": 3}, 400, "'prompt'"),
        ("/v1/completions", {"prompt": "x", "stream_options": {"include_usage": True}}, 400, "stream=True"),
        ("/v1/chat/completions", {"messages": []}, 400, "'messages'"),
        ("/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]}, 400, "role"),
        ("/v1/completions", {"model": "other", "prompt": "x"}, 404, "The model `other` does not exist."),
    ],
)
async def test_bad_requests_get_vllm_style_errors(
    mock_vllm: Any, path: str, body: dict[str, Any], status: int, fragment: str
) -> None:
    mock = await mock_vllm(*FAST)
    code, answer = await post(mock.url + path, body)
    assert code == status
    error = answer["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == status
    assert fragment in error["message"]
    assert error["type"] == ("NotFoundError" if status == 404 else "BadRequestError")


async def test_invalid_json_is_a_bad_request(mock_vllm: Any) -> None:
    mock = await mock_vllm(*FAST)
    async with aiohttp.ClientSession() as session, session.post(mock.url + "/v1/completions", data=b"{no") as r:
        assert r.status == 400 and (await r.json())["error"]["type"] == "BadRequestError"


async def test_health_version_and_metrics(mock_vllm: Any) -> None:
    mock = await mock_vllm(*FAST)
    async with aiohttp.ClientSession() as session:
        async with session.get(mock.url + "/health") as response:
            assert response.status == 200 and await response.read() == b""
        async with session.get(mock.url + "/version") as response:
            assert await response.json() == {"version": "0.33.0"}
        async with session.get(mock.url + "/metrics") as response:
            assert response.headers["Content-Type"] == CONTENT_TYPE_LATEST
            assert "vllm:num_requests_running" in await response.text()


async def test_an_api_key_guards_the_v1_routes_only(mock_vllm: Any) -> None:
    mock = await mock_vllm(*FAST, "--api-key", "sekrit")
    assert (await post(mock.url + "/v1/completions", {"prompt": "x"}))[0] == 401
    headers = {"Authorization": "Bearer sekrit"}
    assert (await post(mock.url + "/v1/completions", {"prompt": "x", "max_tokens": 2}, headers))[0] == 200
    async with aiohttp.ClientSession() as session, session.get(mock.url + "/health") as response:
        assert response.status == 200


async def test_a_client_that_leaves_mid_stream_frees_the_engine(mock_vllm: Any, scrape: Any) -> None:
    mock = await mock_vllm(*FAST)
    body = {"prompt": "long", "max_tokens": 3000, "ignore_eos": True, "stream": True}
    async with aiohttp.ClientSession() as session, session.post(mock.url + "/v1/completions", json=body) as response:
        for _ in range(3):
            await response.content.readline()
    await eventually("the engine to drop the request its client left", lambda: not mock.server.engine.scheduler.running)
    assert not mock.server.engine.scheduler.running and not mock.server.engine.scheduler.waiting
    metrics = await scrape(mock.url)
    assert metrics["vllm:generation_tokens_total"] > 0
    assert metrics["vllm:e2e_request_latency_seconds_count"] == 0  # like vLLM: cancellations are not finished
