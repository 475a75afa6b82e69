"""Deterministic text: the same prompt and seed give the same tokens on every arm."""

from __future__ import annotations

import statistics

import pytest

from specpilot.mockvllm.textgen import (
    CHAT_GENERATION_PROMPT,
    CHAT_MESSAGE_OVERHEAD,
    TokenSource,
    chat_prompt,
    count_tokens,
    scope_tag,
    text_seed,
)


def test_tokens_are_a_function_of_prompt_seed_and_position() -> None:
    first = TokenSource(text_seed("hello", 0), mean_length=64)
    again = TokenSource(text_seed("hello", 0), mean_length=64)
    assert [first.piece(i) for i in range(50)] == [again.piece(i) for i in range(50)]
    assert first.eos_at == again.eos_at
    other_prompt = TokenSource(text_seed("hello!", 0), mean_length=64)
    other_seed = TokenSource(text_seed("hello", 1), mean_length=64)
    pieces = [first.piece(i) for i in range(50)]
    assert pieces != [other_prompt.piece(i) for i in range(50)]
    assert pieces != [other_seed.piece(i) for i in range(50)]


def test_a_divergence_changes_the_text_from_its_position_on() -> None:
    shared = TokenSource(text_seed("p", 0), mean_length=64)
    broken = TokenSource(text_seed("p", 0), mean_length=64, diverge_at=10)
    assert [shared.piece(i) for i in range(10)] == [broken.piece(i) for i in range(10)]
    assert [shared.piece(i) for i in range(10, 40)] != [broken.piece(i) for i in range(10, 40)]


def test_natural_lengths_average_the_configured_mean() -> None:
    lengths = [TokenSource(text_seed(f"prompt {i}", 0), mean_length=200).eos_at for i in range(4000)]
    assert statistics.mean(lengths) == pytest.approx(199, rel=0.05)


@pytest.mark.parametrize(("text", "tokens"), [("", 1), ("hello", 1), ("hello, world!", 4), ("a  b\tc", 3)])
def test_token_count(text: str, tokens: int) -> None:
    assert count_tokens(text) == tokens


def test_scope_tags() -> None:
    assert scope_tag("please [scope:code-review] fix this") == "code-review"
    assert scope_tag("no tag here") is None


def test_chat_prompts_count_template_tokens() -> None:
    text, tokens = chat_prompt([("system", "be brief"), ("user", "hello there")])
    assert text.endswith("<|im_start|>assistant\n")
    assert tokens == 2 * CHAT_MESSAGE_OVERHEAD + 2 + 2 + CHAT_GENERATION_PROMPT
