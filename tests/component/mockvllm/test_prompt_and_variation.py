"""Chat templates' prompt tokens, counted alike in usage and metrics; greedy answers' natural variation."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.component.mockvllm.client import FAST, TOOL_FLAGS, TOOLS, post

from specpilot.mockvllm.textgen import CHAT_GENERATION_PROMPT, CHAT_MESSAGE_OVERHEAD, count_tokens

CONVERSATION = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Name a colour."},
    {"role": "assistant", "content": "Blue."},
    {"role": "user", "content": "Another, please!"},
]


async def test_the_template_adds_a_fixed_overhead_per_message_and_the_generation_prompt(
    mock_vllm: Any, scrape: Any
) -> None:
    mock = await mock_vllm(*FAST, *TOOL_FLAGS)
    _, plain = await post(mock.url + "/v1/chat/completions", {"messages": CONVERSATION, "max_tokens": 2})
    content = sum(count_tokens(m["content"]) for m in CONVERSATION)
    expected = content + CHAT_MESSAGE_OVERHEAD * len(CONVERSATION) + CHAT_GENERATION_PROMPT
    assert plain["usage"]["prompt_tokens"] == expected
    body = {"messages": CONVERSATION, "tools": TOOLS, "tool_choice": "none", "max_tokens": 2}
    _, with_tools = await post(mock.url + "/v1/chat/completions", body)
    assert with_tools["usage"]["prompt_tokens"] > expected + 50  # the tool definitions and instructions
    m = await scrape(mock.url)
    total = plain["usage"]["prompt_tokens"] + with_tools["usage"]["prompt_tokens"]
    assert m["vllm:prompt_tokens_total"] == m["vllm:request_prompt_tokens_sum"] == total


async def greedy_texts(url: str, prompts: list[str], *, together: bool) -> list[str]:
    async def one(prompt: str) -> str:
        body = {"prompt": prompt, "max_tokens": 16, "temperature": 0, "ignore_eos": True}
        return str((await post(url + "/v1/completions", body))[1]["choices"][0]["text"])

    if together:
        return list(await asyncio.gather(*(one(p) for p in prompts)))
    return [await one(p) for p in prompts]


async def test_with_the_knob_at_one_every_greedy_answer_departs_from_the_canonical_text(mock_vllm: Any) -> None:
    prompts = [f"variation {i}" for i in range(6)]
    reference = await mock_vllm(*FAST)
    canonical = await greedy_texts(reference.url, prompts, together=False)
    for _ in range(2):  # two arms with the same profile
        varied = await mock_vllm(*FAST, profile={"model": {"greedy_divergence": 1.0}})
        texts = await greedy_texts(varied.url, prompts, together=False)
        assert all(text != expected for text, expected in zip(texts, canonical, strict=True))
    # Sampled answers (seeded here) follow their seed, knob or not.
    sampled = {"prompt": "variation 0", "max_tokens": 16, "temperature": 0.7, "seed": 3, "ignore_eos": True}
    _, on_varied = await post(varied.url + "/v1/completions", sampled)
    _, on_reference = await post(reference.url + "/v1/completions", sampled)
    assert on_varied["choices"][0]["text"] == on_reference["choices"][0]["text"]


async def test_natural_variation_grows_with_the_batch(mock_vllm: Any) -> None:
    canonical_mock = await mock_vllm(*FAST)
    varied = await mock_vllm(*FAST, profile={"model": {"greedy_divergence": 0.05}})
    alone = [f"alone {i}" for i in range(10)]
    batched = [f"batched {i}" for i in range(40)]
    departed_alone = sum(
        a != b
        for a, b in zip(
            await greedy_texts(varied.url, alone, together=False),
            await greedy_texts(canonical_mock.url, alone, together=False),
            strict=True,
        )
    )
    departed_batched = sum(
        a != b
        for a, b in zip(
            await greedy_texts(varied.url, batched, together=True),
            await greedy_texts(canonical_mock.url, batched, together=False),
            strict=True,
        )
    )
    # Expected: 0.5 of 10 alone (1 - 0.95), about 23 of 40 in a batch growing to 40.
    assert departed_alone <= 4 and departed_batched >= 12, (departed_alone, departed_batched)
