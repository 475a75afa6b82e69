"""Deterministic text: the same prompt and seed give the same tokens on every arm."""

from __future__ import annotations

import random
import statistics

import pytest

from specpilot.mockvllm.textgen import (
    CHAT_GENERATION_PROMPT,
    CHAT_MESSAGE_OVERHEAD,
    VOCAB,
    ScriptedTokens,
    TokenSource,
    chat_prompt,
    count_tokens,
    divergence_chance,
    draw_divergence,
    scope_tag,
    text_seed,
    token_id,
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


@pytest.mark.parametrize(
    ("loop_at", "cycle"), [(10, [7, 8, 9]), (2, [0, 1]), (0, [0])], ids=["late", "early", "at-once"]
)
def test_a_loop_repeats_the_words_before_it_and_never_ends(loop_at: int, cycle: list[int]) -> None:
    shared = TokenSource(text_seed("p", 0), mean_length=64)
    looping = TokenSource(text_seed("p", 0), mean_length=64, loop_at=loop_at)
    assert [looping.piece(i) for i in range(loop_at)] == [shared.piece(i) for i in range(loop_at)]
    repeated = [shared.piece(i) for i in cycle]
    assert [looping.piece(i) for i in range(loop_at, loop_at + 30)] == (repeated * 30)[:30]
    assert looping.eos_at > 10**9  # it runs until maxTokens cuts it


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


@pytest.mark.parametrize("text", ['{"a": [1, 2.5], "b": "x y"}', "  lead and trail  ", "<tool_call>\n{}\n</tool_call>"])
def test_a_scripted_answer_is_its_text_cut_into_tokens(text: str) -> None:
    tokens = ScriptedTokens(text)
    pieces = [tokens.piece(i) for i in range(tokens.eos_at)]
    assert "".join(pieces) == text and all(pieces)
    assert tokens.piece(tokens.eos_at) == ""


def test_token_ids_are_vocabulary_indexes_and_stable_hashes_elsewhere() -> None:
    source = TokenSource(text_seed("ids", 0), mean_length=64)
    assert all(VOCAB[source.token_id(i)] == source.piece(i).strip() for i in range(30))
    assert token_id(" model") == VOCAB.index("model")
    assert token_id("{") == token_id(" {") >= len(VOCAB)


def test_the_chance_of_natural_divergence_grows_with_the_batch() -> None:
    chances = [divergence_chance(0.01, batch) for batch in (1, 2, 8, 64, 512)]
    assert chances[0] == pytest.approx(0.01) and chances == sorted(chances) and chances[-1] < 1
    assert divergence_chance(0.0, 512) == 0.0


def test_natural_divergence_falls_below_the_horizon_at_its_rate() -> None:
    rng = random.Random(3)
    draws = [draw_divergence(rng, rate=0.05, batch=4, horizon=20) for _ in range(4000)]
    hits = [d for d in draws if d is not None]
    assert len(hits) / len(draws) == pytest.approx(divergence_chance(0.05, 4), abs=0.03)
    assert all(0 <= d < 20 for d in hits)
    assert draw_divergence(rng, rate=0.0, batch=100, horizon=20) is None
