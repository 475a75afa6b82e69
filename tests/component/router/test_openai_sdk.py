"""The official openai client, as users run it, through the router: streaming and not, chat and text."""

from __future__ import annotations

import openai
import pytest
from tests.component.router.harness import TEAM_HEADER, HarnessFactory


def _client(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0, timeout=10)


async def test_streamed_chat_through_the_sdk(make_router: HarnessFactory) -> None:
    h = await make_router()
    async with _client(h.url) as client:
        stream = await client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            extra_headers={TEAM_HEADER: "code", "x-fake-chunks": "5"},
        )
        text = "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])
    assert text == "tok" * 5
    (sample,) = (await h.samples())["samples"]
    assert (sample["arm"], sample["outcome"], sample["outputTokens"]) == ("speculative", "ok", 5)


async def test_whole_chat_and_text_completions_through_the_sdk(make_router: HarnessFactory) -> None:
    h = await make_router()
    async with _client(h.url) as client:
        chat = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], extra_headers={TEAM_HEADER: "code"}
        )
        text = await client.completions.create(model="m", prompt="def f(", stream=True)
        pieces = [choice.text async for chunk in text for choice in chunk.choices]
        models = await client.models.list()
    assert (
        chat.choices[0].message.content == "tok " * 4 and chat.usage is not None and chat.usage.completion_tokens == 4
    )
    assert "".join(pieces) == "tok" * 4
    assert [m.id for m in models.data] == ["m"]
    samples = (await h.samples())["samples"]
    seen = [(s["scope"], s["stream"], s["outcome"]) for s in samples]
    assert seen == [("code", False, "ok"), ("default", True, "ok")]


async def test_errors_reach_the_sdk_as_its_own_exceptions(make_router: HarnessFactory) -> None:
    h = await make_router()
    async with _client(h.url) as client:
        with pytest.raises(openai.RateLimitError) as raised:
            await client.chat.completions.create(
                model="m", messages=[], extra_headers={TEAM_HEADER: "code", "x-fake-status": "429"}
            )
    assert raised.value.status_code == 429 and raised.value.message == "Error code: 429 - fake"
    (sample,) = (await h.samples())["samples"]
    assert sample["outcome"] == "rejected"
