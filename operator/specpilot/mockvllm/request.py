"""One request in the mock engine: what its client asked for, the tokens it has committed, and the
text its API handler streams.

`Request.commit` checks each new token as vLLM does (EOS, stop token ids, stop strings, the length
cap); streaming holds back text that could still turn out to start a stop string.
"""

from __future__ import annotations

import asyncio
import enum
import random
from typing import NotRequired, TypedDict

from specpilot.mockvllm.textgen import Tokens


class FinishReason(enum.StrEnum):
    """Why a request stopped, as vLLM reports it."""

    STOP = "stop"
    LENGTH = "length"


class Request:
    """One sequence in the engine, and the handle its API handler reads output from."""

    __slots__ = (
        "_event",
        "_held",
        "_sent",
        "aborted",
        "arrival",
        "blocks",
        "finish_reason",
        "first_scheduled",
        "first_token",
        "ignore_eos",
        "include_stop",
        "kv_tokens",
        "last_token",
        "max_tokens",
        "min_tokens",
        "output_tokens",
        "preemptions",
        "prefill_target",
        "prompt_tokens",
        "rng",
        "scheduled_at",
        "scope",
        "stop",
        "stop_reason",
        "stop_token_ids",
        "text",
        "tokens",
    )

    def __init__(
        self,
        *,
        scope: str,
        prompt_tokens: int,
        max_tokens: int,
        tokens: Tokens,
        stop: tuple[str, ...],
        ignore_eos: bool,
        arrival: float,
        seed: int,
        min_tokens: int = 0,
        stop_token_ids: frozenset[int] = frozenset(),
        include_stop: bool = False,
    ) -> None:
        self.scope = scope
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.min_tokens = min_tokens
        self.tokens = tokens
        self.stop = stop
        self.stop_token_ids = stop_token_ids
        self.include_stop = include_stop
        self.ignore_eos = ignore_eos
        self.arrival = arrival
        self.rng = random.Random(seed)
        self.kv_tokens = 0
        self.prefill_target = prompt_tokens
        self.blocks = 0
        self.output_tokens = 0
        self.text = ""
        self.preemptions = 0
        self.first_scheduled: float | None = None
        self.scheduled_at = 0.0
        self.first_token: float | None = None
        self.last_token = 0.0
        self.finish_reason: FinishReason | None = None
        self.stop_reason: str | int | None = None
        self.aborted = False
        # Streaming holds back text that could still turn out to start a stop string.
        self._held = 0 if include_stop else max((len(s) for s in stop), default=1) - 1
        self._sent = 0
        self._event = asyncio.Event()

    @property
    def done(self) -> bool:
        return self.finish_reason is not None or self.aborted

    def commit(self, count: int, now: float) -> int:
        """Append up to `count` output tokens; return how many were committed before a finish.

        As vLLM checks them: EOS, then stop token ids (neither can be sampled before `min_tokens`),
        then the stop strings in the new text (once past `min_tokens`), then the length cap.
        """
        committed = 0
        while committed < count:
            position = self.output_tokens
            self.output_tokens += 1
            committed += 1
            if position == max(self.tokens.eos_at, self.min_tokens) and not self.ignore_eos:
                self.finish_reason = FinishReason.STOP
                break
            start = len(self.text)
            token_id = self.tokens.token_id(position)
            stopped_by_id = position >= self.min_tokens and token_id in self.stop_token_ids
            if not stopped_by_id or self.include_stop:
                self.text += self.tokens.piece(position)
            if stopped_by_id:
                self.finish_reason = FinishReason.STOP
                self.stop_reason = token_id
                break
            if self.stop and self.output_tokens > self.min_tokens and self._hit_stop(start):
                break
            if self.output_tokens >= self.max_tokens:
                self.finish_reason = FinishReason.LENGTH
                break
        self.last_token = now
        self._event.set()
        return committed

    def _hit_stop(self, start: int) -> bool:
        """Truncate at the first stop string that the newest piece completes (after it, when included)."""
        for stop in self.stop:
            index = self.text.find(stop, max(0, start - len(stop) + 1))
            if index >= 0:
                self.text = self.text[: index + len(stop) if self.include_stop else index]
                self.finish_reason = FinishReason.STOP
                self.stop_reason = stop
                return True
        return False

    def wake(self) -> None:
        self._event.set()

    async def next_text(self) -> str:
        """Wait for output committed since the last call; '' once finished with nothing new."""
        while True:
            limit = len(self.text) if self.done else len(self.text) - self._held
            if limit > self._sent or self.done:
                delta = self.text[self._sent : limit]
                self._sent = max(self._sent, limit)
                return delta
            self._event.clear()
            await self._event.wait()


class Submission(TypedDict):
    """What a client's request asks of the engine (`Engine.submit`)."""

    scope: str
    prompt_tokens: int
    max_tokens: int
    tokens: Tokens
    stop: tuple[str, ...]
    ignore_eos: bool
    min_tokens: NotRequired[int]
    stop_token_ids: NotRequired[frozenset[int]]
    include_stop: NotRequired[bool]
