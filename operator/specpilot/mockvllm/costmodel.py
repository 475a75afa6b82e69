"""The cost model: how long an engine step takes and what a speculative round commits.

Pure functions of the profile's parameters, no I/O. All times are model seconds.

Target step (a roofline): a forward pass over B sequences that processes n decode tokens and p
prefill tokens takes

    t(B, n, p) = max(T + s*(B - 1),  tau*n + pi*p)

T is the step time of a batch of one (reading the weights dominates), s the extra memory time of
each further sequence (its KV cache), tau and pi the compute time per decode and prefill token.
At low load the first term wins, so verifying k + 1 tokens costs as much as decoding one; as the
batch grows, speculation's extra verification tokens reach the compute roof first.

Ordinary step: t(B, d, p) for d decoding sequences. Speculative step with k draft tokens and
draft cost ratio c: k draft steps c*t(d, d, 0), one verification t(B, d*(k + 1), p), and the
draft model's own prefill c*pi*p. Without batching pressure (B = d = 1, p = 0) a round costs
(k*c + 1)*T.

Acceptance: each draft position is accepted with probability alpha given that all before it
were, so a round commits 1 + a tokens with P(a >= i) = alpha^i for i <= k, and
E[1 + a] = (1 - alpha^(k+1)) / (1 - alpha).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

GIB = 1 << 30


@dataclass(frozen=True)
class CostParams:
    """Step-time parameters of the target model (model seconds)."""

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


def target_step_time(p: CostParams, *, seqs: int, decode_tokens: int, prefill_tokens: int) -> float:
    """Time of one target forward pass over `seqs` sequences."""
    memory_bound = p.step_time_s + p.per_seq_s * max(seqs - 1, 0)
    compute_bound = p.per_token_s * decode_tokens + p.prefill_per_token_s * prefill_tokens
    return max(memory_bound, compute_bound)


def step_time(p: CostParams, k: int, *, decode_seqs: int, prefill_seqs: int, prefill_tokens: int) -> float:
    """Time of one engine step; `k` is the number of draft tokens (0 for ordinary decoding)."""
    seqs = decode_seqs + prefill_seqs
    verify = target_step_time(p, seqs=seqs, decode_tokens=decode_seqs * (k + 1), prefill_tokens=prefill_tokens)
    if k == 0:
        return verify
    draft = 0.0
    if decode_seqs:
        draft = k * target_step_time(p, seqs=decode_seqs, decode_tokens=decode_seqs, prefill_tokens=0)
    return verify + p.draft_cost_ratio * (draft + p.prefill_per_token_s * prefill_tokens)


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
