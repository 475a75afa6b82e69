"""The step-cost form: how long one forward pass of a model takes, from what the step holds.

A profile's step costs cross programs: the mock engine times its steps with them, the operator
forecasts a scope's crossover from them, and a calibration turns measured steps into them. A step
runs B sequences that process N tokens in all (decode, verification and prefill tokens; n of them
decode or verification, p prefill) and read C cached tokens (the sum of their contexts). Two forms:

roofline (the mock's original, invented form)::

    max(T + s*(B - 1) + A,  tau*n + pi*p)

additive (chosen from steps measured on a GPU, where memory and compute time add up)::

    T + s*(B - 1) + e*v + pi*p + tau*max(0, n + p - n0) + A

with A = kappa*C*max(1, b/B), the attention's read of the KV cache: bandwidth-bound, and never
faster than `b` sequences' worth (an attention kernel needs that many sequences to fill the GPU).
T is the step of one sequence (reading the weights), s each further sequence, e each of the v draft
tokens verified (the tokens beyond each decoding sequence's first), pi each prefill token, and tau the
extra time of each token past the knee n0 (compute-bound). Every field past the roofline's defaults to
what leaves the roofline as it was.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Form(enum.StrEnum):
    """How a step's memory and compute time combine."""

    ROOFLINE = "roofline"
    ADDITIVE = "additive"


@dataclass(frozen=True, kw_only=True)
class StepCost:
    """One model's step-time parameters (seconds; `knee_tokens` and `attention_min_seqs` are counts)."""

    step_time_s: float
    per_seq_s: float = 0.0
    per_token_s: float = 0.0
    prefill_per_token_s: float = 0.0
    extra_token_s: float = 0.0
    knee_tokens: float = 0.0
    per_context_token_s: float = 0.0
    attention_min_seqs: float = 1.0
    form: Form = Form.ROOFLINE


def attention_seconds(c: StepCost, *, seqs: float, context_tokens: float) -> float:
    """The KV-cache read of `seqs` sequences holding `context_tokens` cached tokens in all."""
    if seqs <= 0 or context_tokens <= 0:
        return 0.0
    return c.per_context_token_s * context_tokens * max(1.0, c.attention_min_seqs / seqs)


def step_seconds(
    c: StepCost,
    *,
    seqs: float,
    tokens: float,
    draft_tokens: float = 0,
    prefill_tokens: float = 0,
    context_tokens: float = 0.0,
) -> float:
    """One forward pass over `seqs` sequences: `tokens` decode and verification tokens (`draft_tokens` of
    them verify drafts), `prefill_tokens` prompt tokens, `context_tokens` cached tokens read."""
    attention = attention_seconds(c, seqs=seqs, context_tokens=context_tokens)
    memory = c.step_time_s + c.per_seq_s * max(seqs - 1, 0) + attention
    if c.form is Form.ROOFLINE:
        return max(memory, c.per_token_s * tokens + c.prefill_per_token_s * prefill_tokens)
    extra = c.extra_token_s * draft_tokens + c.prefill_per_token_s * prefill_tokens
    return memory + extra + c.per_token_s * max(0.0, tokens + prefill_tokens - c.knee_tokens)
