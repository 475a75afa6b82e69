"""Stop conditions of one request, committed token by token without the engine loop."""

from __future__ import annotations

import pytest

from specpilot.mockvllm.request import FinishReason, Request
from specpilot.mockvllm.textgen import ScriptedTokens, TokenSource, text_seed

TEXT = " alpha beta gamma delta alpha epsilon zeta eta theta"
WORDS = TEXT.split()


def request(
    tokens: ScriptedTokens | TokenSource | None = None,
    *,
    max_tokens: int = 100,
    stop: tuple[str, ...] = (),
    ignore_eos: bool = False,
    min_tokens: int = 0,
    stop_token_ids: frozenset[int] = frozenset(),
    include_stop: bool = False,
) -> Request:
    return Request(
        scope="default",
        prompt_tokens=4,
        max_tokens=max_tokens,
        tokens=tokens or ScriptedTokens(TEXT),
        stop=stop,
        ignore_eos=ignore_eos,
        arrival=0.0,
        seed=0,
        min_tokens=min_tokens,
        stop_token_ids=stop_token_ids,
        include_stop=include_stop,
    )


def run(req: Request, per_step: int = 1) -> Request:
    while not req.done:
        req.commit(per_step, 0.0)
    return req


@pytest.mark.parametrize("per_step", [1, 3], ids=["ordinary", "speculative"])
def test_a_stop_string_cuts_the_text_before_it(per_step: int) -> None:
    req = run(request(stop=(" gamma",)), per_step)
    assert (req.text, req.finish_reason, req.stop_reason) == (" alpha beta", FinishReason.STOP, " gamma")
    assert req.output_tokens == 3


def test_the_first_listed_stop_string_found_wins_and_can_span_tokens() -> None:
    req = run(request(stop=("a delt", "beta")))
    assert (req.text, req.stop_reason) == (" alpha ", "beta")
    req = run(request(stop=("ma del",)))
    assert (req.text, req.stop_reason) == (" alpha beta gam", "ma del")


def test_include_stop_str_in_output_keeps_the_stop_string() -> None:
    req = run(request(stop=(" gamma",), include_stop=True))
    assert (req.text, req.stop_reason) == (" alpha beta gamma", " gamma")


def test_a_stop_token_id_ends_the_answer_without_its_text() -> None:
    tokens = ScriptedTokens(TEXT)
    req = run(request(tokens, stop_token_ids=frozenset({tokens.token_id(3)})))
    assert (req.text, req.finish_reason, req.stop_reason) == (
        " alpha beta gamma",
        FinishReason.STOP,
        tokens.token_id(3),
    )
    assert req.output_tokens == 4  # the stop token is generated and counted


def test_max_tokens_ends_with_length_and_no_stop_reason() -> None:
    req = run(request(max_tokens=2, stop=(" zeta",)))
    assert (req.text, req.finish_reason, req.stop_reason) == (" alpha beta", FinishReason.LENGTH, None)


def test_eos_ends_a_scripted_answer_after_its_last_piece() -> None:
    req = run(request())
    assert (req.text, req.finish_reason, req.stop_reason) == (TEXT, FinishReason.STOP, None)
    assert req.output_tokens == len(WORDS) + 1


def test_min_tokens_defers_stop_strings_ids_and_eos() -> None:
    tokens = ScriptedTokens(TEXT)
    # " alpha" completes at token 1 and again at token 5; min_tokens=2 lets only the second stop.
    req = run(request(stop=(" alpha",), min_tokens=2))
    assert (req.text, req.output_tokens) == (" alpha beta gamma delta", 5)
    req = run(request(tokens, stop_token_ids=frozenset({tokens.token_id(0)}), min_tokens=1))
    assert req.stop_reason == tokens.token_id(4) and req.text == " alpha beta gamma delta"
    req = run(request(min_tokens=len(WORDS) + 3))  # EOS waits; the script has nothing more to say
    assert (req.text, req.output_tokens, req.finish_reason) == (TEXT, len(WORDS) + 4, FinishReason.STOP)


def test_free_text_finishes_at_eos_unless_told_to_ignore_it() -> None:
    tokens = TokenSource(text_seed("p", 0), mean_length=20)
    assert run(request(tokens)).output_tokens == tokens.eos_at + 1
    ignored = run(request(tokens, ignore_eos=True, max_tokens=tokens.eos_at + 10))
    assert (ignored.output_tokens, ignored.finish_reason) == (tokens.eos_at + 10, FinishReason.LENGTH)


async def test_streaming_holds_back_what_could_start_a_stop_string() -> None:
    req = request(stop=(" gam",))
    req.commit(2, 0.0)
    assert await req.next_text() == " alpha b"  # len(" gam") - 1 characters stay back
    req.commit(1, 0.0)
    assert (await req.next_text(), req.done) == ("eta", True)
