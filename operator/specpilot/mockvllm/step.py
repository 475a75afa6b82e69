"""A scheduled step and what it costs: its model time, from the cost model, and the work the MFU
counters estimate for it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from specpilot.mockvllm.config import EngineLimits
from specpilot.mockvllm.costmodel import GIB, step_time
from specpilot.mockvllm.profile import Profile
from specpilot.mockvllm.request import Request
from specpilot.wire.batchschedule import k_at


@dataclass
class Step:
    """One scheduled forward pass: the requests it decodes, the prefill chunks it runs, its model time, and
    the draft tokens each decoding request proposes in it (k; 0: an ordinary decode step)."""

    decodes: list[Request]
    prefills: list[tuple[Request, int]]
    duration: float
    k: int


class Work(NamedTuple):
    """What a step does per GPU: floating-point operations, bytes read and bytes written."""

    flops: float
    read_bytes: float
    write_bytes: float


def plan_step(
    profile: Profile, limits: EngineLimits, decodes: list[Request], prefills: list[tuple[Request, int]]
) -> Step:
    """The step of a scheduled batch: it drafts num_speculative_tokens, or under a batch-size schedule as many
    as vLLM looks up by the requests the step schedules (the dense lookup built at start-up); k = 0 drafts
    nothing."""
    k = limits.num_speculative_tokens
    if limits.draft_tokens_by_batch is not None:
        k = k_at(limits.draft_tokens_by_batch, len(decodes) + len(prefills))
    return Step(decodes, prefills, duration=step_duration(profile, k, decodes, prefills), k=k)


def step_duration(profile: Profile, k: int, decodes: list[Request], prefills: list[tuple[Request, int]]) -> float:
    """The model time of a step that decodes `decodes` (k drafts each) and runs the prefill chunks `prefills`;
    the sequences read the tokens they have cached."""
    return step_time(
        profile.cost,
        k,
        decode_seqs=len(decodes),
        prefill_seqs=len(prefills),
        prefill_tokens=sum(chunk for _, chunk in prefills),
        context_tokens=sum(r.kv_tokens for r in decodes) + sum(r.kv_tokens for r, _ in prefills),
        draft=profile.draft,
    )


def step_work(profile: Profile, k: int, step: Step, tensor_parallel_size: int) -> Work:
    """MFU estimates: 2 FLOPs per parameter per token; weights and KV read, new KV written."""
    memory = profile.memory
    tokens = len(step.decodes) * (k + 1) + sum(chunk for _, chunk in step.prefills)
    kv_read = sum(r.kv_tokens for r in step.decodes) * memory.kv_bytes_per_token
    return Work(
        flops=2 * profile.model.params_billion * 1e9 * tokens / tensor_parallel_size,
        read_bytes=(memory.weights_gib * GIB + kv_read) / tensor_parallel_size,
        write_bytes=tokens * memory.kv_bytes_per_token / tensor_parallel_size,
    )
