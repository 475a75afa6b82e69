"""The cost model's formulas: rounds, acceptance, the roofline and KV-cache capacity."""

from __future__ import annotations

import itertools
import random

import pytest

from specpilot.mockvllm.costmodel import (
    CostParams,
    MemoryParams,
    blocks_for,
    draw_accepted,
    expected_tokens_per_round,
    num_gpu_blocks,
    round_time,
    step_time,
    target_step_time,
    time_per_committed_token,
)

MEMORY_BOUND = CostParams(step_time_s=0.02, per_seq_s=0.0, per_token_s=0.0, prefill_per_token_s=0.0)


@pytest.mark.parametrize(("alpha", "k"), [(0.0, 4), (0.3, 1), (0.6, 3), (0.8, 4), (0.95, 7)])
def test_expected_tokens_per_round_is_the_geometric_sum(alpha: float, k: int) -> None:
    assert expected_tokens_per_round(alpha, k) == pytest.approx(sum(alpha**i for i in range(k + 1)))


def test_full_acceptance_commits_every_draft_plus_the_bonus_token() -> None:
    assert expected_tokens_per_round(1.0, 5) == 6.0


@pytest.mark.parametrize(("alpha", "k"), [(0.3, 4), (0.7, 4), (0.9, 6)], ids=["low", "mid", "high"])
def test_drawn_acceptance_matches_its_expectation(alpha: float, k: int) -> None:
    rng = random.Random(7)
    rounds = 40_000
    mean = 1 + sum(draw_accepted(rng, alpha, k) for _ in range(rounds)) / rounds
    assert mean == pytest.approx(expected_tokens_per_round(alpha, k), rel=0.01)


def test_drawn_acceptance_never_exceeds_k() -> None:
    rng = random.Random(1)
    assert max(draw_accepted(rng, 0.99, 3) for _ in range(1000)) == 3


@pytest.mark.parametrize(("k", "c"), [(1, 0.1), (4, 0.1), (4, 0.5), (8, 0.05)])
def test_a_round_without_batching_pressure_costs_k_draft_steps_and_one_verification(k: int, c: float) -> None:
    params = CostParams(step_time_s=0.02, draft_cost_ratio=c)
    expected = (k * c + 1) * 0.02
    assert round_time(params, k) == pytest.approx(expected)
    assert step_time(params, k, decode_seqs=1, prefill_seqs=0, prefill_tokens=0) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("alpha", "k", "c", "speculation_wins"),
    [(0.8, 4, 0.1, True), (0.6, 3, 0.2, True), (0.3, 4, 0.5, False), (0.2, 6, 0.3, False)],
    ids=["high-alpha", "mid-alpha", "low-alpha-costly-draft", "very-low-alpha"],
)
def test_speculation_loses_where_theory_says(alpha: float, k: int, c: float, speculation_wins: bool) -> None:
    params = CostParams(step_time_s=0.02, draft_cost_ratio=c)
    speculative = time_per_committed_token(params, alpha, k)
    assert (speculative < time_per_committed_token(params, alpha, 0)) is speculation_wins


def test_target_step_is_a_roofline_of_memory_and_compute() -> None:
    params = CostParams(step_time_s=0.02, per_seq_s=0.001, per_token_s=0.004, prefill_per_token_s=0.001)
    assert target_step_time(params, seqs=1, decode_tokens=1, prefill_tokens=0) == pytest.approx(0.02)
    assert target_step_time(params, seqs=3, decode_tokens=3, prefill_tokens=0) == pytest.approx(0.022)
    assert target_step_time(params, seqs=10, decode_tokens=10, prefill_tokens=0) == pytest.approx(0.04)
    assert target_step_time(params, seqs=1, decode_tokens=0, prefill_tokens=100) == pytest.approx(0.1)


def test_speculations_advantage_shrinks_and_reverses_as_the_batch_grows() -> None:
    params = CostParams(step_time_s=0.02, per_seq_s=0.00005, per_token_s=0.0004, draft_cost_ratio=0.1)
    per_round = expected_tokens_per_round(0.7, 4)
    ratios = []
    for batch in (1, 8, 16, 32, 64):
        ordinary = step_time(params, 0, decode_seqs=batch, prefill_seqs=0, prefill_tokens=0)
        speculative = step_time(params, 4, decode_seqs=batch, prefill_seqs=0, prefill_tokens=0) / per_round
        ratios.append(speculative / ordinary)
    assert all(later >= earlier - 1e-12 for earlier, later in itertools.pairwise(ratios))
    assert ratios[0] < 0.6 and ratios[-1] > 1.0


def test_a_draft_model_takes_kv_cache_memory() -> None:
    memory = MemoryParams()
    ordinary = num_gpu_blocks(memory, tensor_parallel_size=1, utilization=0.92, draft_model=False)
    speculative = num_gpu_blocks(memory, tensor_parallel_size=1, utilization=0.92, draft_model=True)
    assert 0 < speculative < ordinary
    bigger = num_gpu_blocks(memory, tensor_parallel_size=2, utilization=0.92, draft_model=False)
    assert bigger > 2 * ordinary


def test_an_explicit_block_count_overrides_the_memory_estimate() -> None:
    memory = MemoryParams(num_gpu_blocks=100)
    assert num_gpu_blocks(memory, tensor_parallel_size=1, utilization=0.5, draft_model=True) == 100


@pytest.mark.parametrize(("tokens", "blocks"), [(0, 0), (1, 1), (16, 1), (17, 2), (160, 10)])
def test_blocks_for_rounds_up(tokens: int, blocks: int) -> None:
    assert blocks_for(tokens, 16) == blocks
