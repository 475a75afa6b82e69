"""What the router reads from responses: the SSE meter (times, chunk gaps) and the usage of whole responses."""

from __future__ import annotations

import json
from typing import Any

import pytest

from specpilot.router.core.stream_meter import StreamMeter, usage_tokens
from specpilot.wire.buckets import FineCounts, fine_bucket
from specpilot.wire.samples import CHUNK_GAP_KEYS


def ev(chunk: Any) -> bytes:
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def chat(content: str | None = None, **delta: Any) -> bytes:
    if content is not None:
        delta["content"] = content
    return ev({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})


ROLE = chat("", role="assistant")
USAGE = ev({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 9, "total_tokens": 12}})
DONE = b"data: [DONE]\n\n"
STREAM = [ROLE, chat("a"), chat("bc"), chat("d"), USAGE, DONE]


def feed_all(meter: StreamMeter, parts: list[bytes]) -> bytes:
    out = b"".join(meter.feed(part, float(i)) for i, part in enumerate(parts))
    return out + meter.finish()


def test_meter_notes_first_and_last_content_usage_and_done() -> None:
    meter = StreamMeter(strip_usage=False)
    out = feed_all(meter, STREAM)
    assert out == b"".join(STREAM)
    assert (meter.first_content, meter.last_content) == (1.0, 3.0)  # the role chunk has no content
    assert meter.content_chunks == 3
    assert (meter.usage_tokens, meter.usage_prompt_tokens) == (9, 3)
    assert meter.done and not meter.error


def test_meter_strips_the_usage_chunk_it_asked_for() -> None:
    meter = StreamMeter(strip_usage=True)
    assert feed_all(meter, STREAM) == b"".join(s for s in STREAM if s is not USAGE)
    assert meter.usage_tokens == 9


def test_meter_keeps_continuous_usage_the_client_asked_for() -> None:
    with_usage = ev({"choices": [{"index": 0, "delta": {"content": "x"}}], "usage": {"completion_tokens": 1}})
    meter = StreamMeter(strip_usage=True)
    assert feed_all(meter, [with_usage, USAGE, DONE]) == with_usage + DONE
    assert meter.usage_tokens == 9


@pytest.mark.parametrize("cut", [1, 7, 20, 60, 200], ids=lambda c: f"every-{c}-bytes")
def test_events_split_across_reads_are_passed_whole_and_timed_when_complete(cut: int) -> None:
    whole = b"".join(STREAM)
    parts = [whole[i : i + cut] for i in range(0, len(whole), cut)]
    meter = StreamMeter(strip_usage=True)
    forwarded = []
    for i, part in enumerate(parts):
        out = meter.feed(part, float(i))
        assert not out or out.endswith(b"\n\n")
        forwarded.append(out)
    assert b"".join(forwarded) + meter.finish() == whole.replace(USAGE, b"")
    assert meter.content_chunks == 3 and meter.done and meter.usage_tokens == 9


def test_several_events_in_one_read() -> None:
    meter = StreamMeter(strip_usage=True)
    assert meter.feed(b"".join(STREAM), 5.0) == b"".join(s for s in STREAM if s is not USAGE)
    assert meter.first_content == meter.last_content == 5.0


@pytest.mark.parametrize(
    ("event", "content"),
    [
        (chat("x"), True),
        (chat(""), False),
        (chat(reasoning="think"), True),
        (chat(reasoning_content="think"), True),
        (chat(tool_calls=[{"index": 0, "function": {"arguments": "{"}}]), True),
        (ev({"object": "text_completion", "choices": [{"index": 0, "text": "hi"}]}), True),
        (ev({"object": "text_completion", "choices": [{"index": 0, "text": ""}]}), False),
        (ev({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}), False),
        (ev({"choices": ["odd"]}), False),
        (ev([1, 2]), False),
        (b"data: {broken\n\n", False),
        (b": keep-alive\n\n", False),
    ],
)
def test_what_counts_as_content(event: bytes, content: bool) -> None:
    meter = StreamMeter(strip_usage=False)
    assert meter.feed(event, 1.0) == event
    assert (meter.first_content is not None) is content


def test_a_closing_chunk_without_content_is_not_output() -> None:
    finish = ev({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    meter = StreamMeter(strip_usage=False)
    feed_all(meter, [ROLE, chat("a"), chat("b"), finish, DONE])
    assert meter.content_chunks == 2 and meter.last_content == 2.0 and meter.usage_tokens is None


def test_error_event_is_passed_on_and_noted() -> None:
    meter = StreamMeter(strip_usage=True)
    error = ev({"error": {"message": "boom", "type": "InternalServerError", "code": 500}})
    assert feed_all(meter, [chat("a"), error, DONE]) == chat("a") + error + DONE
    assert meter.error


def test_unterminated_tail_is_passed_on_at_the_end() -> None:
    meter = StreamMeter(strip_usage=True)
    assert meter.feed(chat("a") + b"data: {partial", 1.0) == chat("a")
    assert meter.finish() == b"data: {partial"
    assert not meter.done


@pytest.mark.parametrize(
    "data", [b"data: x\r\n\r\n", b"x" * 2048], ids=["crlf-separators", "no-separator-past-the-limit"]
)
def test_streams_that_are_not_vllm_sse_pass_through_untouched(data: bytes) -> None:
    meter = StreamMeter(strip_usage=True, max_event_bytes=1024)
    assert meter.feed(data, 1.0) == data
    assert meter.feed(chat("a"), 2.0) == chat("a")
    assert meter.first_content is None


@pytest.mark.parametrize(
    ("body", "tokens"),
    [
        (b'{"usage": {"completion_tokens": 12, "prompt_tokens": 40}}', (12, 40)),
        (b'{"usage": {"completion_tokens": 12}}', (12, None)),
        (b'{"usage": {"completion_tokens": 12, "prompt_tokens": -1}}', (12, None)),
        (b'{"usage": null}', (None, None)),
        (b'{"usage": {"completion_tokens": "12", "prompt_tokens": true}}', (None, None)),
        (b"[]", (None, None)),
        (b"not json", (None, None)),
    ],
)
def test_usage_tokens_of_a_whole_response(body: bytes, tokens: tuple[int | None, int | None]) -> None:
    assert usage_tokens(body) == tokens


@pytest.mark.parametrize(
    "event",
    [
        b'data: {"choices":[{"index":0,"delta":{"content":"x"},"logprobs":null,"finish_reason":null}]}\n\n',
        b'data: {"choices":[{"index":0,"text":"x","logprobs":null,"finish_reason":null,"stop_reason":null}]}\n\n',
        chat("x"),
    ],
    ids=["vllm-chat", "vllm-completion", "spaced-json"],
)
def test_output_in_mid_answer_is_counted_by_how_it_ends(event: bytes) -> None:
    meter = StreamMeter(strip_usage=True)
    feed_all(meter, [ROLE, chat("a"), event, event, USAGE, DONE])
    assert meter.content_chunks == 3 and meter.last_content == 3.0
    assert meter.usage_tokens == 9 and meter.done


VLLM_CHUNK = b'data: {"choices":[{"index":0,"delta":{"content":"x"},"logprobs":null,"finish_reason":null}]}\n\n'


def test_the_gaps_between_chunks_of_output_are_counted_after_the_first() -> None:
    meter = StreamMeter(strip_usage=True)
    times = [0.5, 1.0, 1.02, 1.06, 1.12]  # the role chunk, then output at gaps of 20, 40 and 60 ms
    for event, now in zip([ROLE, chat("a"), VLLM_CHUNK, chat("b"), VLLM_CHUNK], times, strict=True):
        meter.feed(event, now)
    meter.feed(USAGE + DONE, 1.2)
    assert meter.timing(0.0) == (1.0, pytest.approx(0.12))
    gaps = meter.chunk_gaps()
    assert gaps.width == 1 and gaps.total == 3 == meter.content_chunks - 1
    for gap in (0.02, 0.04, 0.06):
        low, high = gaps.bounds(fine_bucket(gap))
        assert fine_bucket(gap) in gaps.counts and low <= gap < high


def test_chunks_read_together_are_a_gap_of_zero_and_a_stream_without_output_has_none() -> None:
    meter = StreamMeter(strip_usage=True)
    meter.feed(chat("a") + chat("b"), 1.0)
    assert meter.chunk_gaps() == FineCounts({0: 1})
    silent = StreamMeter(strip_usage=True)
    silent.feed(ROLE + DONE, 1.0)
    assert silent.chunk_gaps() == FineCounts() and silent.timing(0.0) == (None, None)


def test_a_long_stream_keeps_few_keys() -> None:
    meter = StreamMeter(strip_usage=True)
    now = 0.0
    for i in range(2001):
        now += 0.005 * 100 ** (i / 2000)  # gaps from 5 to 500 ms
        meter.feed(VLLM_CHUNK if i else chat("a"), now)
    gaps = meter.chunk_gaps()
    assert gaps.total == 2000 and len(gaps.counts) <= CHUNK_GAP_KEYS
