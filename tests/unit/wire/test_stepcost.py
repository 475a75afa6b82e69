"""The step-cost forms: the roofline takes the larger of memory and compute time, the additive form adds them."""

from __future__ import annotations

import pytest

from specpilot.wire.stepcost import Form, StepCost, attention_seconds, step_seconds

ADDITIVE = StepCost(
    form=Form.ADDITIVE,
    step_time_s=0.005,
    per_seq_s=0.0001,
    extra_token_s=0.00001,
    prefill_per_token_s=0.00002,
    per_token_s=0.00003,
    knee_tokens=100,
    per_context_token_s=1e-8,
    attention_min_seqs=16,
)


def test_the_additive_form_adds_each_term_and_tokens_past_the_knee_pay_the_compute_rate() -> None:
    assert step_seconds(ADDITIVE, seqs=1, tokens=1) == pytest.approx(0.005)
    assert step_seconds(ADDITIVE, seqs=11, tokens=11) == pytest.approx(0.005 + 10 * 0.0001)
    # 20 sequences verifying 4 drafts each: 80 draft tokens, 100 tokens in all, at the knee
    assert step_seconds(ADDITIVE, seqs=20, tokens=100, draft_tokens=80) == pytest.approx(0.005 + 0.0019 + 0.0008)
    # 50 prompt tokens more: their own cost and 50 tokens past the knee
    with_prompt = step_seconds(ADDITIVE, seqs=20, tokens=100, draft_tokens=80, prefill_tokens=50)
    assert with_prompt == pytest.approx(0.005 + 0.0019 + 0.0008 + 50 * 0.00002 + 50 * 0.00003)


def test_the_kv_read_is_never_faster_than_the_attention_floor_of_sequences() -> None:
    one = attention_seconds(ADDITIVE, seqs=1, context_tokens=1000)
    assert one == attention_seconds(ADDITIVE, seqs=16, context_tokens=16 * 1000) == pytest.approx(16 * 1000 * 1e-8)
    assert attention_seconds(ADDITIVE, seqs=64, context_tokens=64 * 1000) == pytest.approx(64 * 1000 * 1e-8)
    assert attention_seconds(ADDITIVE, seqs=0, context_tokens=0) == 0.0


def test_the_roofline_takes_the_larger_of_memory_and_compute_time_as_before() -> None:
    roofline = StepCost(step_time_s=0.02, per_seq_s=0.001, per_token_s=0.004, prefill_per_token_s=0.001)
    assert step_seconds(roofline, seqs=3, tokens=3) == pytest.approx(0.022)
    assert step_seconds(roofline, seqs=10, tokens=10) == pytest.approx(0.04)
    assert step_seconds(roofline, seqs=1, tokens=0, prefill_tokens=100) == pytest.approx(0.1)
