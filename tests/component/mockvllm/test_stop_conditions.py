"""Stop conditions over real HTTP, whole and streamed: stop strings, stop token ids, min and max tokens."""

from __future__ import annotations

from typing import Any

import pytest
from tests.component.mockvllm.client import FAST, events, finish, post, streamed_text

from specpilot.mockvllm.textgen import VOCAB

PATHS = ["/v1/completions", "/v1/chat/completions"]
SPEC = ("--speculative-config", '{"model": "org/draft", "num_speculative_tokens": 4}')


def request(path: str, **extra: Any) -> dict[str, Any]:
    prompt = (
        {"prompt": "stop probe"}
        if path == "/v1/completions"
        else {"messages": [{"role": "user", "content": "stop probe"}]}
    )
    return {**prompt, "max_tokens": 30, "temperature": 0, "ignore_eos": True, **extra}


def text_of(path: str, answer: dict[str, Any]) -> str:
    choice = answer["choices"][0]
    return choice["text"] if path == "/v1/completions" else choice["message"]["content"]


async def canonical(url: str, path: str) -> str:
    _, answer = await post(url + path, request(path))
    return text_of(path, answer)


@pytest.mark.parametrize("path", PATHS, ids=["completion", "chat"])
@pytest.mark.parametrize("flags", [(), SPEC], ids=["ordinary", "speculative"])
async def test_a_stop_string_cuts_the_answer_before_it(mock_vllm: Any, path: str, flags: tuple[str, ...]) -> None:
    mock = await mock_vllm(*FAST, *flags)
    full = await canonical(mock.url, path)
    # The text is deterministic, so a stop string taken from it is sure to occur: two words, mid-answer.
    words = full.split(" ")
    stop = " ".join(words[8:10])
    cut = full[: full.index(stop)]
    _, answer = await post(mock.url + path, request(path, stop=["never-there", stop]))
    choice = answer["choices"][0]
    assert (text_of(path, answer), choice["finish_reason"], choice["stop_reason"]) == (cut, "stop", stop)
    chunks = await events(mock.url + path, request(path, stop=["never-there", stop]))
    assert streamed_text(chunks) == cut and stop not in streamed_text(chunks)
    assert finish(chunks) == ("stop", stop)


@pytest.mark.parametrize("path", PATHS, ids=["completion", "chat"])
async def test_include_stop_str_in_output_keeps_it(mock_vllm: Any, path: str) -> None:
    mock = await mock_vllm(*FAST)
    full = await canonical(mock.url, path)
    stop = full.split(" ")[5]
    _, answer = await post(mock.url + path, request(path, stop=stop, include_stop_str_in_output=True))
    assert text_of(path, answer) == full[: full.index(stop) + len(stop)]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_stop_token_id_ends_the_answer_without_its_text(mock_vllm: Any, stream: bool) -> None:
    mock = await mock_vllm(*FAST)
    path = "/v1/completions"
    words = (await canonical(mock.url, path)).split()
    stop_id = VOCAB.index(words[6])
    position = words.index(words[6])
    body = request(path, stop_token_ids=[stop_id], stream_options={"include_usage": True} if stream else None)
    if stream:
        chunks = await events(mock.url + path, body)
        text, reasons, usage = streamed_text(chunks), finish(chunks), chunks[-1]["usage"]
    else:
        _, answer = await post(mock.url + path, body)
        choice = answer["choices"][0]
        text, reasons, usage = choice["text"], (choice["finish_reason"], choice["stop_reason"]), answer["usage"]
    assert text.split() == words[:position]
    assert reasons == ("stop", stop_id)
    assert usage["completion_tokens"] == position + 1  # the stop token is generated, then dropped from the text


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_max_tokens_ends_with_length_and_a_null_stop_reason(mock_vllm: Any, stream: bool) -> None:
    mock = await mock_vllm(*FAST)
    path = "/v1/chat/completions"
    body = request(path, max_tokens=7, stop=["never-there"])
    if stream:
        chunks = await events(mock.url + path, body)
        assert finish(chunks) == ("length", None) and len(streamed_text(chunks).split()) == 7
    else:
        _, answer = await post(mock.url + path, body)
        assert (answer["choices"][0]["finish_reason"], answer["choices"][0]["stop_reason"]) == ("length", None)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_min_tokens_holds_off_eos_and_stop_strings(mock_vllm: Any, stream: bool) -> None:
    mock = await mock_vllm(*FAST, profile={"model": {"mean_output_tokens": 3}})
    path = "/v1/completions"
    prompts = [f"short answer {i}" for i in range(8)]
    for prompt in prompts:
        body = {"prompt": prompt, "max_tokens": 40, "temperature": 0, "min_tokens": 12}
        if stream:
            chunks = await events(mock.url + path, {**body, "stream_options": {"include_usage": True}})
            tokens, reason = chunks[-1]["usage"]["completion_tokens"], finish(chunks)[0]
        else:
            _, answer = await post(mock.url + path, body)
            tokens, reason = answer["usage"]["completion_tokens"], answer["choices"][0]["finish_reason"]
        assert tokens >= 13 and reason in ("stop", "length")  # 12 tokens, then EOS at the earliest
    full = await canonical(mock.url, path)
    first = full.split(" ")[1]  # the first word: a stop string that would end the answer at once
    _, answer = await post(mock.url + path, request(path, stop=first, min_tokens=5))
    assert len(text_of(path, answer).split()) >= 5
