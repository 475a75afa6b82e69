"""Committing a step when it ends: the first token of every prefill that completes, one token per
decoding request, or 1 + accepted drafts per speculative round; and a finished request's figures.

Every figure is recorded in model seconds at the step's end, `now`.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import Histogram

from specpilot.mockvllm.costmodel import draw_accepted
from specpilot.mockvllm.metrics import EngineMetrics
from specpilot.mockvllm.request import Request
from specpilot.mockvllm.step import Step


def commit_step(step: Step, now: float, metrics: EngineMetrics, *, k: int, alpha: Callable[[str], float]) -> None:
    """Commit the tokens of `step`, drawing the accepted drafts of each speculative round (k drafts) at
    `alpha` of the request's scope; count them, and the step's tokens."""
    generated, prompt_done = commit_prefills(step.prefills, now, metrics)
    if k:
        generated += commit_rounds(step.decodes, now, metrics, k=k, alpha=alpha)
    else:
        generated += commit_decodes(step.decodes, now, metrics.latencies.itl)
    if generated:
        metrics.tokens.generation_tokens.inc(generated)
        metrics.sizes.iteration_tokens.observe(prompt_done + generated)


def commit_prefills(prefills: list[tuple[Request, int]], now: float, metrics: EngineMetrics) -> tuple[int, int]:
    """Cache each chunk; a prefill that completes commits a token, its first (TTFT) or, after a preemption,
    its next (an inter-token gap). Return the tokens committed and the prompt tokens prefilled for the
    first time."""
    generated = prompt_done = 0
    for request, chunk in prefills:
        if request.done:
            continue
        request.kv_tokens += chunk
        if request.kv_tokens < request.prefill_target:
            continue
        if request.first_token is None:
            request.first_token = now
            metrics.latencies.ttft.observe(now - request.arrival)
            metrics.tokens.prefilled(request.prompt_tokens)
            prompt_done += request.prompt_tokens
        else:
            metrics.latencies.itl.observe(now - request.last_token)
        generated += request.commit(1, now)
    return generated, prompt_done


def commit_decodes(decodes: list[Request], now: float, itl: Histogram) -> int:
    """One token per decoding request; return the tokens committed."""
    generated = 0
    for request in decodes:
        if not request.done:
            itl.observe(now - request.last_token)
            request.kv_tokens += 1
            generated += request.commit(1, now)
    return generated


def commit_rounds(
    decodes: list[Request], now: float, metrics: EngineMetrics, *, k: int, alpha: Callable[[str], float]
) -> int:
    """Verify one speculative round per decoding request: 1 + the drafts accepted; record the spec-decode
    counters and return the tokens committed."""
    alphas: dict[str, float] = {}
    rounds_by_accepted = [0] * (k + 1)
    generated = 0
    for request in decodes:
        if request.done:
            continue
        scope_alpha = alphas.get(request.scope)
        if scope_alpha is None:
            scope_alpha = alphas[request.scope] = alpha(request.scope)
        accepted = draw_accepted(request.rng, scope_alpha, k)
        rounds_by_accepted[accepted] += 1
        metrics.latencies.itl.observe(now - request.last_token)
        request.kv_tokens += 1 + accepted
        generated += request.commit(1 + accepted, now)
    if metrics.spec is not None:
        metrics.spec.record(rounds_by_accepted)
    return generated


def record_finished(metrics: EngineMetrics, request: Request, now: float) -> None:
    """A finished request's outcome, phase latencies and sizes."""
    first_token = request.first_token if request.first_token is not None else now
    first_scheduled = request.first_scheduled if request.first_scheduled is not None else now
    decode = request.last_token - first_token
    output = request.output_tokens
    latencies, sizes = metrics.latencies, metrics.sizes
    metrics.outcomes.success[str(request.finish_reason)].inc()
    latencies.e2e.observe(now - request.arrival)
    latencies.queue_time.observe(first_scheduled - request.arrival)
    latencies.prefill_time.observe(first_token - first_scheduled)
    latencies.decode_time.observe(decode)
    latencies.inference_time.observe(request.last_token - first_scheduled)
    latencies.tpot.observe(decode / (output - 1) if output > 1 else 0.0)
    sizes.request_prompt_tokens.observe(request.prompt_tokens)
    sizes.request_generation_tokens.observe(output)
    sizes.max_generation_tokens.observe(output)
    sizes.params_n.observe(1)
    sizes.params_max_tokens.observe(request.max_tokens)
    sizes.prefill_kv_computed.observe(request.prompt_tokens)
    latencies.request_preemptions.observe(request.preemptions)
