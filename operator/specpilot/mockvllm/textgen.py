"""Deterministic text: token counting and output tokens without a real tokenizer.

Greedy output must be identical on every arm that shares a seed, so each output token is a pure
function of (prompt, position, seed). Arms then differ only in timing, which is what a pilot
measures; a divergence fault salts the tokens from a position on to stand in for a broken arm.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable

_TOKEN = re.compile(r"\w+|[^\w\s]")
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


def count_tokens(text: str) -> int:
    """Token count of `text`: words and punctuation marks, at least one."""
    return max(1, len(_TOKEN.findall(text)))


def scope_tag(text: str) -> str | None:
    """The task group named by a `[scope:NAME]` tag in `text`, if any."""
    match = _SCOPE_TAG.search(text)
    return match.group(1) if match else None


def chat_prompt(messages: Iterable[tuple[str, str]]) -> tuple[str, int]:
    """Render (role, content) messages with a ChatML template; return the text and its token count."""
    parts: list[str] = []
    tokens = CHAT_GENERATION_PROMPT
    for role, content in messages:
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


class TokenSource:
    """The output tokens of one request: a text piece per position, and where EOS falls."""

    __slots__ = ("_base", "_diverge_at", "_diverged", "eos_at")

    def __init__(self, base: int, *, mean_length: int, diverge_at: int | None = None) -> None:
        self._base = base
        self._diverge_at = diverge_at
        self._diverged = _mix(base ^ _DIVERGE_SALT)
        # Natural length (EOS included) drawn from a geometric law with the given mean.
        unit = (_mix(base ^ _EOS_SALT) >> 11) / float(1 << 53)
        self.eos_at = int(-math.log1p(-unit) * max(mean_length - 1, 0))

    def piece(self, position: int) -> str:
        """Text of the output token at `position` (0-based); EOS is handled by the caller."""
        base = self._base
        if self._diverge_at is not None and position >= self._diverge_at:
            base = self._diverged
        return " " + VOCAB[_mix(base + position) % len(VOCAB)]
