"""The cost model: how long an engine step takes and what a speculative round commits.

Pure functions of the profile's parameters, no I/O. All times are model seconds.

Target step: a forward pass over B sequences that processes n decode tokens and p prefill tokens
and reads the sequences' cached tokens takes t(B, n, p), in the form the profile's `cost.form` names
(`specpilot.wire.stepcost`). The default, invented profile uses the roofline

    t(B, n, p) = max(T + s*(B - 1),  tau*n + pi*p)

T is the step time of a batch of one (reading the weights dominates), s the extra memory time of
each further sequence (its KV cache), tau and pi the compute time per decode and prefill token.
At low load the first term wins, so verifying k + 1 tokens costs as much as decoding one; as the
batch grows, speculation's extra verification tokens reach the compute roof first. Calibrated
profiles (`profiles/`) use the additive form fitted to steps measured on a GPU, with a context term.

Ordinary step: t(B, d, p) for d decoding sequences. Speculative step with k draft tokens: one
verification t(B, d*(k + 1), p), k draft steps and the draft's own prefill. With a `draft` section
(the draft's own measured step costs) a draft step is that model's step over the d sequences and its
prefill costs its `prefill_per_token_s` per prompt token; without one, a draft step costs the draft
cost ratio c of the target's, c*t(d, d, 0), and its prefill c*pi*p. Without batching pressure
(B = d = 1, p = 0) a round then costs (k*c + 1)*T.

Acceptance: each draft position is accepted with probability alpha given that all before it
were, so a round commits 1 + a tokens with P(a >= i) = alpha^i for i <= k, and
E[1 + a] = (1 - alpha^(k+1)) / (1 - alpha).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from specpilot.wire.stepcost import StepCost, step_seconds

GIB = 1 << 30


@dataclass(frozen=True, kw_only=True)
class CostParams(StepCost):
    """Step-time parameters of the target model (model seconds); the defaults are invented, not measured."""

    step_time_s: float = 0.020
    per_seq_s: float = 0.00005
    per_token_s: float = 0.00008
    prefill_per_token_s: float = 0.00008
    draft_cost_ratio: float = 0.1


@dataclass(frozen=True)
class MemoryParams:
    """Device memory: what the weights take and what each cached token costs."""

    gpu_memory_gib: float = 80.0
    weights_gib: float = 16.0
    activation_gib: float = 2.0
    kv_bytes_per_token: int = 131072
    draft_weights_gib: float = 1.0
    draft_kv_bytes_per_token: int = 16384
    block_size: int = 16
    num_gpu_blocks: int | None = None


def target_step_time(
    p: CostParams,
    *,
    seqs: int,
    decode_tokens: int,
    prefill_tokens: int,
    draft_tokens: int = 0,
    context_tokens: float = 0.0,
) -> float:
    """Time of one target forward pass over `seqs` sequences (`draft_tokens` of the decode tokens verify
    drafts; `context_tokens` are the sequences' cached tokens)."""
    return step_seconds(
        p,
        seqs=seqs,
        tokens=decode_tokens,
        draft_tokens=draft_tokens,
        prefill_tokens=prefill_tokens,
        context_tokens=context_tokens,
    )


def step_time(
    p: CostParams,
    k: int,
    *,
    decode_seqs: int,
    prefill_seqs: int,
    prefill_tokens: int,
    context_tokens: float = 0.0,
    draft: StepCost | None = None,
) -> float:
    """Time of one engine step; `k` is the number of draft tokens (0 for ordinary decoding), `draft` the
    draft's own step costs (None: `p.draft_cost_ratio` of the target's)."""
    seqs = decode_seqs + prefill_seqs
    verify = target_step_time(
        p,
        seqs=seqs,
        decode_tokens=decode_seqs * (k + 1),
        prefill_tokens=prefill_tokens,
        draft_tokens=decode_seqs * k,
        context_tokens=context_tokens,
    )
    if k == 0:
        return verify
    if draft is not None:
        drafting = step_seconds(draft, seqs=decode_seqs, tokens=decode_seqs, context_tokens=context_tokens)
        return verify + (k * drafting if decode_seqs else 0.0) + draft.prefill_per_token_s * prefill_tokens
    drafting = 0.0
    if decode_seqs:
        drafting = k * target_step_time(
            p, seqs=decode_seqs, decode_tokens=decode_seqs, prefill_tokens=0, context_tokens=context_tokens
        )
    return verify + p.draft_cost_ratio * (drafting + p.prefill_per_token_s * prefill_tokens)


def expected_tokens_per_round(alpha: float, k: int) -> float:
    """E[committed tokens per verification round] = (1 - alpha^(k+1)) / (1 - alpha)."""
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def round_time(p: CostParams, k: int) -> float:
    """Time of one round without batching pressure: (k*c + 1)*T."""
    return (k * p.draft_cost_ratio + 1.0) * p.step_time_s


def time_per_committed_token(p: CostParams, alpha: float, k: int) -> float:
    """Expected decode time per committed token without batching pressure."""
    if k == 0:
        return p.step_time_s
    return round_time(p, k) / expected_tokens_per_round(alpha, k)


def draw_accepted(rng: random.Random, alpha: float, k: int) -> int:
    """Accepted draft tokens of one round: leading successes of k Bernoulli(alpha) trials."""
    accepted = 0
    while accepted < k and rng.random() < alpha:
        accepted += 1
    return accepted


def num_gpu_blocks(m: MemoryParams, *, tensor_parallel_size: int, utilization: float, draft_model: bool) -> int:
    """KV-cache blocks that fit after the weights (and the draft model's weights and KV share)."""
    if m.num_gpu_blocks is not None:
        return m.num_gpu_blocks
    budget = tensor_parallel_size * m.gpu_memory_gib * utilization - m.weights_gib - m.activation_gib
    per_token = m.kv_bytes_per_token
    if draft_model:
        budget -= m.draft_weights_gib
        per_token += m.draft_kv_bytes_per_token
    return max(0, math.floor(budget * GIB / (m.block_size * per_token)))


def blocks_for(tokens: int, block_size: int) -> int:
    """Blocks needed to hold `tokens` tokens of KV cache."""
    return -(-tokens // block_size)
