"""The SSE reader that measures streams on their way to the client, and usage of whole responses.

What a request's measurement becomes (`RequestSample`, `RequestOutcome`) is a contract with the
operator, so it lives in `specpilot.wire.samples`; this module reads the bytes it is made of.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import orjson

from specpilot.wire.buckets import FineCounts, fine_bucket
from specpilot.wire.samples import CHUNK_GAP_KEYS


def _has_content(choice: Any) -> bool:
    if not isinstance(choice, dict):
        return False
    if choice.get("text"):
        return True
    delta = choice.get("delta")
    return isinstance(delta, dict) and bool(
        delta.get("content") or delta.get("reasoning") or delta.get("reasoning_content") or delta.get("tool_calls")
    )


class StreamMeter:
    """Reads an OpenAI/vLLM SSE stream on its way to the client.

    `feed` returns the bytes to pass on: whole events only, minus the final usage chunk when
    the router asked for usage on the client's behalf (`strip_usage`). It notes the first and
    last content chunk (TTFT, decode time), the gap before each content chunk after the first (in
    fine buckets: events that arrive in one read are a gap of zero, as the client sees them), the
    usage chunk, error events and ``[DONE]``.
    """

    __slots__ = (
        "_buffer",
        "_gaps",
        "_max_event",
        "_passthrough",
        "_strip_usage",
        "content_chunks",
        "done",
        "error",
        "first_content",
        "last_content",
        "usage_prompt_tokens",
        "usage_tokens",
    )

    def __init__(self, *, strip_usage: bool, max_event_bytes: int = 1 << 20) -> None:
        self._strip_usage = strip_usage
        self._max_event = max_event_bytes
        self._buffer = b""
        self._passthrough = False
        self.first_content: float | None = None
        self.last_content: float | None = None
        self.content_chunks = 0
        self._gaps: Counter[int] = Counter()
        self.usage_tokens: int | None = None
        self.usage_prompt_tokens: int | None = None
        self.error = False
        self.done = False

    def feed(self, data: bytes, now: float) -> bytes:
        """Bytes to forward after reading `data` from upstream at time `now`."""
        if self._passthrough:
            return data
        if (
            self.first_content is not None
            and data.endswith(_OUTPUT_TAILS)
            and not self._buffer
            and data.find(b"\n\n") == len(data) - 2
        ):
            # The usual read in mid-answer: one whole event of output, told by how it ends (a usage,
            # an error or a finish would end it otherwise); no scan for anything else.
            self._content(now)
            return data
        buffer = self._buffer + data if self._buffer else data
        end = buffer.rfind(b"\n\n")
        if end < 0:
            if len(buffer) > self._max_event or b"\r\n\r\n" in buffer:  # not vLLM's SSE: just pass on
                self._passthrough, self._buffer = True, b""
                return buffer
            self._buffer = buffer
            return b""
        end += 2
        self._buffer = buffer[end:]
        complete = buffer[:end]
        if complete.count(b"\n\n") == 1:
            return complete if self._event(complete, now) else b""
        events = complete.split(b"\n\n")[:-1]
        kept = [event for event in events if self._event(event, now)]
        if len(kept) == len(events):
            return complete  # nothing dropped: pass the bytes on as they came
        return b"\n\n".join(kept) + b"\n\n" if kept else b""

    def finish(self) -> bytes:
        """What is left when upstream ends: an unterminated last event is passed on as is."""
        rest, self._buffer = self._buffer, b""
        return rest

    def _event(self, event: bytes, now: float) -> bool:
        """Note one event; False when it is dropped."""
        start = event.find(b"data:")
        if start < 0:
            return True  # comments (keep-alives) and other fields
        payload = event[start + 5 :].strip()
        if payload == b"[DONE]":
            self.done = True
            return True
        if self.first_content is not None and _plain_output(payload):
            # The answer is under way: a chunk with no usage, no error and no finish is output, and
            # not worth a JSON parse (this is the hot path of every stream).
            self._content(now)
            return True
        try:
            chunk = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return True
        if not isinstance(chunk, dict):
            return True
        if "error" in chunk:
            self.error = True
            return True
        choices = chunk.get("choices")
        usage = chunk.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            self.usage_tokens = usage["completion_tokens"]
            self.usage_prompt_tokens = _count(usage.get("prompt_tokens"))
            if not choices and self._strip_usage:
                return False
        if isinstance(choices, list) and any(_has_content(choice) for choice in choices):
            if self.first_content is None:
                self.first_content = now
            self._content(now)
        return True

    def _content(self, now: float) -> None:
        """Note a chunk of output read at `now`, and its gap from the one before."""
        if self.last_content is not None:
            self._gaps[fine_bucket(now - self.last_content)] += 1
        self.content_chunks += 1
        self.last_content = now

    def timing(self, started: float) -> tuple[float | None, float | None]:
        """Time to first token from `started`, and decode time (first to last content chunk); None without output."""
        if self.first_content is None or self.last_content is None:
            return None, None
        return self.first_content - started, self.last_content - self.first_content

    def chunk_gaps(self) -> FineCounts:
        """The gaps between content chunks, as a sample holds them."""
        return FineCounts(dict(self._gaps)).bounded(CHUNK_GAP_KEYS)


# How an event of output in mid-answer ends: its one choice's open finish_reason closes the chunk
# (vLLM's compact JSON, and the spaced JSON of Python's json module), completions with stop_reason.
_OUTPUT_TAILS = tuple(
    tail + b"}]}\n\n"
    for tail in (
        b'"finish_reason":null',
        b'"finish_reason": null',
        b'"finish_reason":null,"stop_reason":null',
        b'"finish_reason": null, "stop_reason": null',
    )
)


def _plain_output(payload: bytes) -> bool:
    """A chunk in mid-answer, told by bytes alone: no usage, no error, an open finish_reason."""
    return (
        b'"usage"' not in payload
        and b'"error"' not in payload
        and (b'"finish_reason":null' in payload or b'"finish_reason": null' in payload)
    )


def usage_tokens(body: bytes) -> tuple[int | None, int | None]:
    """``usage.completion_tokens`` and ``usage.prompt_tokens`` of a whole (non-streamed) JSON response."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None, None
    usage = doc.get("usage") if isinstance(doc, dict) else None
    if not isinstance(usage, dict):
        return None, None
    return _count(usage.get("completion_tokens")), _count(usage.get("prompt_tokens"))


def _count(value: Any) -> int | None:
    """A token count from usage: a non-negative integer, else unknown."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
