"""Deterministic text: token counting and output tokens without a real tokenizer.

Greedy output must be identical on every arm that shares a seed, so each output token is a pure
function of (prompt, position, seed). Arms then differ only in timing, which is what a pilot
measures; a divergence fault salts the tokens from a position on to stand in for a broken arm, and
the profile's natural variation does the same at the small, batch-dependent rate of real kernels. A
repetition fault sends the text into a loop instead, the degenerate output of a broken sampler: at
any temperature the answer repeats the few words before the loop until max_tokens cuts it.
A structured answer (a JSON document, a tool call) is a fixed text cut into tokens (`ScriptedTokens`).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

_TOKEN = re.compile(r"\w+|[^\w\s]")
_PIECE = re.compile(r"\s*(?:\w+|[^\w\s])|\s+")  # a token with the whitespace before it
_SCOPE_TAG = re.compile(r"\[scope:([A-Za-z0-9_.-]+)\]")
_MASK = (1 << 64) - 1
_EOS_SALT = 0x5EED_E05
_DIVERGE_SALT = 0xD1FF_5A17

# Tokens per chat message beyond its content: <|im_start|>, role, newline, <|im_end|>, newline.
CHAT_MESSAGE_OVERHEAD = 5
# The generation prompt: <|im_start|>, "assistant", newline.
CHAT_GENERATION_PROMPT = 3

_WORDS = """
the of and to in a is that for it as was with be by on not he this are or his from at which but
have an they you were her she there been one all we their has would when if more no out so said
what up its about into than them can only other new some could time these two may then do first
any my now such like our over man me even most made after also did many before must through
back years where much your way well down should because each just those people how too little
state good very make world still own see men work long get here between both life being under
never day same another know while last might us great old year off come since against go came
right used take three model token draft verify batch cache stream round queue
"""
VOCAB: tuple[str, ...] = tuple(_WORDS.split())
_VOCAB_IDS = {word: index for index, word in enumerate(VOCAB)}
# Token ids of text outside the vocabulary start here.
_OTHER_IDS = 1000

# What a Qwen2.5-style template adds to the system turn when the request carries tools.
TOOLS_PREAMBLE = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{tools}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{{"name": <function-name>, "arguments": <args-json-object>}}\n'
    "</tool_call>"
)


def count_tokens(text: str) -> int:
    """Token count of `text`: words and punctuation marks, at least one."""
    return max(1, len(_TOKEN.findall(text)))


def scope_tag(text: str) -> str | None:
    """The task group named by a `[scope:NAME]` tag in `text`, if any."""
    match = _SCOPE_TAG.search(text)
    return match.group(1) if match else None


def token_id(piece: str) -> int:
    """The id of an output token: its word's vocabulary index, else a stable hash above the vocabulary."""
    word = piece.strip()
    known = _VOCAB_IDS.get(word)
    if known is not None:
        return known
    return _OTHER_IDS + int.from_bytes(hashlib.blake2b(word.encode(), digest_size=3).digest(), "big")


def chat_prompt(messages: Iterable[tuple[str, str]], tools: Sequence[Mapping[str, Any]] = ()) -> tuple[str, int]:
    """Render (role, content) messages with a ChatML template; return the text and its token count.

    Tools, when given, are described at the end of the system turn (one is added first if there is
    none), as Qwen2.5's template does: their JSON and the calling instructions count as prompt tokens.
    """
    turns = list(messages)
    if tools:
        block = TOOLS_PREAMBLE.format(tools="\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools))
        if turns and turns[0][0] == "system":
            turns[0] = ("system", f"{turns[0][1]}\n\n{block}")
        else:
            turns.insert(0, ("system", block))
    parts: list[str] = []
    tokens = CHAT_GENERATION_PROMPT
    for role, content in turns:
        parts.append(f"<|im_start|>{role}\n{content}<|im_end|>\n")
        tokens += CHAT_MESSAGE_OVERHEAD + (count_tokens(content) if content else 0)
    parts.append("<|im_start|>assistant\n")
    return "".join(parts), tokens


def text_seed(text: str, seed: int) -> int:
    """A 64-bit seed derived from a prompt and the server or request seed."""
    digest = hashlib.blake2b(f"{seed}\x00{text}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def _mix(value: int) -> int:
    """SplitMix64 finaliser: a well-spread 64-bit hash of a 64-bit integer."""
    value = (value + 0x9E3779B97F4A7C15) & _MASK
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK
    return value ^ (value >> 31)


def divergence_chance(rate: float, batch: int) -> float:
    """Chance that a greedy answer departs from the canonical text in a batch of `batch` sequences.

    `rate` is the chance at batch size 1; each further sequence is one more chance for a reduction
    order (and so a near-tie argmax) to change, so the chance is 1 - (1 - rate)^batch.
    """
    return 1.0 - (1.0 - rate) ** max(batch, 1)


def draw_divergence(rng: random.Random, *, rate: float, batch: int, horizon: int) -> int | None:
    """Where a greedy answer diverges by natural numerical variation (uniform below `horizon`), if it does."""
    if rate <= 0 or rng.random() >= divergence_chance(rate, batch):
        return None
    return rng.randrange(max(horizon, 1))


class Tokens(Protocol):
    """What the engine reads an answer from: a text piece and a token id per position, and where EOS falls."""

    @property
    def eos_at(self) -> int: ...

    def piece(self, position: int) -> str: ...

    def token_id(self, position: int) -> int: ...


class ScriptedTokens:
    """A fixed text (a JSON document, a tool call) as output tokens; EOS follows its last piece.

    Past the end (reached with `ignore_eos`, or while `min_tokens` holds EOS off) tokens add no text.
    """

    __slots__ = ("_pieces", "eos_at")

    def __init__(self, text: str) -> None:
        self._pieces = tuple(_PIECE.findall(text))
        self.eos_at = len(self._pieces)

    def piece(self, position: int) -> str:
        return self._pieces[position] if position < len(self._pieces) else ""

    def token_id(self, position: int) -> int:
        return token_id(self.piece(position))


LOOP_WORDS = 3  # words a looping answer repeats: those just before the loop begins
NEVER = 1 << 62  # where EOS falls in a looping answer: it runs until maxTokens


class TokenSource:
    """The output tokens of one request: a text piece per position, and where EOS falls."""

    __slots__ = ("_base", "_diverge_at", "_diverged", "_loop_at", "eos_at")

    def __init__(
        self, base: int, *, mean_length: int, diverge_at: int | None = None, loop_at: int | None = None
    ) -> None:
        self._base = base
        self._diverge_at = diverge_at
        self._diverged = _mix(base ^ _DIVERGE_SALT)
        self._loop_at = loop_at
        # Natural length (EOS included) drawn from a geometric law with the given mean.
        unit = (_mix(base ^ _EOS_SALT) >> 11) / float(1 << 53)
        self.eos_at = int(-math.log1p(-unit) * max(mean_length - 1, 0)) if loop_at is None else NEVER

    def _word(self, position: int) -> int:
        if self._loop_at is not None and position >= self._loop_at:
            start = max(self._loop_at - LOOP_WORDS, 0)
            position = start + (position - start) % max(self._loop_at - start, 1)
        base = self._base
        if self._diverge_at is not None and position >= self._diverge_at:
            base = self._diverged
        return _mix(base + position) % len(VOCAB)

    def piece(self, position: int) -> str:
        """Text of the output token at `position` (0-based); EOS is handled by the caller."""
        return " " + VOCAB[self._word(position)]

    def token_id(self, position: int) -> int:
        """Id of the output token at `position`: its word's vocabulary index."""
        return self._word(position)
