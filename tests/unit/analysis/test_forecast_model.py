"""The crossover forecast from step costs: closed-form cases, the interval from acceptance, and disagreement."""

from __future__ import annotations

import math

import pytest

from specpilot.analysis.forecast.model import (
    Acceptance,
    Crossing,
    Forecast,
    Lengths,
    batch_speedups,
    crossing,
    forecast,
    speedups,
)
from specpilot.mockvllm.profile import parse_profile
from specpilot.wire.stepcost import Form, StepCost

# t(B, n) = T + tau*n: the ordinary step T + tau*B, the speculative T + tau*B*(k + 1) + k*D.
T, TAU, D = 0.010, 0.0001, 0.001
TARGET = StepCost(form=Form.ADDITIVE, step_time_s=T, per_token_s=TAU)
DRAFT = StepCost(form=Form.ADDITIVE, step_time_s=D)
NO_PROMPT = Lengths(prompt=0, output=501)


def test_the_arms_cross_at_the_batch_where_their_times_per_committed_token_are_equal() -> None:
    k, committed = 4, 2.5
    # committed * (T + tau*B) = T + tau*B*(k + 1) + k*D
    batch = (committed * T - T - k * D) / (TAU * (k + 1 - committed))
    found = crossing(TARGET, DRAFT, k=k, committed=committed, lengths=NO_PROMPT)
    assert found.batch == pytest.approx(batch, rel=1e-6)
    assert found.load == pytest.approx(batch / (500 * (T + TAU * batch)), rel=1e-6)  # B / ((O - 1) * t(B))


def test_a_draft_that_costs_more_than_it_commits_never_pays_and_a_cheap_one_pays_past_the_measured_batches() -> None:
    never = crossing(TARGET, StepCost(step_time_s=0.01), k=4, committed=1.5, lengths=NO_PROMPT)
    assert (never.load, never.batch) == (0.0, 1.0)
    free = crossing(StepCost(step_time_s=T, per_seq_s=TAU), DRAFT, k=4, committed=3.0, lengths=NO_PROMPT)
    assert free.load is None and free.batch is None
    # the ordinary arm's load at batch 256; a prompt's step holds one more sequence
    assert free.reach == pytest.approx(1 / (500 * (T + TAU * 255) / 256 + TAU))


def test_prompts_move_the_crossover_down_where_the_speculative_step_is_compute_bound() -> None:
    costed = StepCost(form=Form.ADDITIVE, step_time_s=T, per_token_s=TAU, prefill_per_token_s=TAU, knee_tokens=64)
    short = crossing(costed, DRAFT, k=4, committed=2.5, lengths=Lengths(prompt=10, output=501))
    long = crossing(costed, DRAFT, k=4, committed=2.5, lengths=Lengths(prompt=2000, output=501))
    assert short.load is not None and long.load is not None
    assert long.load < short.load


@pytest.mark.parametrize(("alpha", "k"), [(0.5, 3), (0.7, 4), (0.9, 7)])
def test_geometric_acceptance_commits_the_geometric_sum(alpha: float, k: int) -> None:
    assert Acceptance.geometric(alpha, k).committed == pytest.approx((1 - alpha ** (k + 1)) / (1 - alpha))


def test_the_acceptance_interval_is_the_spread_of_accepted_drafts_per_round_over_the_rounds() -> None:
    # Two drafts, accepted counts 0, 1, 2 with shares 0.2, 0.3, 0.5: P(a >= 1) = 0.8, P(a >= 2) = 0.5.
    acceptance = Acceptance(per_position=(0.8, 0.5), rounds=100)
    mean, square = 1.3, 0.3 * 1 + 0.5 * 4
    half = 1.959964 * math.sqrt((square - mean * mean) / 100)
    assert acceptance.committed_bounds(0.95) == pytest.approx((2.3 - half, 2.3 + half), rel=1e-5)
    assert Acceptance(per_position=(0.8, 0.5), rounds=0).committed_bounds(0.95) == (1.0, 3.0)


def test_the_forecast_interval_widens_with_fewer_rounds_and_holds_the_point() -> None:
    narrow = forecast(TARGET, DRAFT, Acceptance.geometric(0.7, 4, rounds=10_000), NO_PROMPT)
    wide = forecast(TARGET, DRAFT, Acceptance.geometric(0.7, 4, rounds=100), NO_PROMPT)
    for found in (narrow, wide):
        assert found.low.load is not None and found.point.load is not None and found.high.load is not None
        assert found.low.load < found.point.load < found.high.load
    assert narrow.point == wide.point
    assert wide.low.load < narrow.low.load and wide.high.load > narrow.high.load  # type: ignore[operator]


def at(load: float | None, reach: float = 10.0) -> Crossing:
    return Crossing(committed=2.0, load=load, batch=None if load is None else 50.0, reach=reach)


@pytest.mark.parametrize(
    ("low", "high", "measured", "disagrees"),
    [
        (4.0, 6.0, 5.0, False),
        (4.0, 6.0, 3.0, True),
        (4.0, 6.0, 6.5, True),
        (4.0, 6.0, None, False),
        (4.0, None, 8.0, False),  # the forecast finds none up to its reach at the upper bound
        (4.0, None, 3.0, True),
        (None, None, 9.0, True),  # none up to a reach of 10, yet measured below it
        (None, None, 12.0, False),
    ],
)
def test_a_measured_crossover_outside_the_forecasts_interval_disagrees(
    low: float | None, high: float | None, measured: float | None, disagrees: bool
) -> None:
    found = Forecast(point=at(5.0), low=at(low), high=at(high), confidence=0.95)
    assert found.disagrees(measured) is disagrees


def test_the_8b_profile_with_its_1b_draft_stops_paying_where_the_measured_steps_say() -> None:
    # The measured steps (ctx 1024, no prompts) put a 1B draft at alpha 0.7 and 4 drafts near 8,600
    # tokens/s per replica, at an ordinary batch of about 68.
    profile = parse_profile({"calibrated": "h200-llama-3.1-8b-draft-1b"})
    assert profile.draft is not None
    lengths = Lengths(prompt=0, output=2049)
    found = crossing(
        profile.cost, profile.draft, k=4, committed=Acceptance.geometric(0.7, 4).committed, lengths=lengths
    )
    assert found.load is not None and found.batch is not None
    assert found.load * 2048 == pytest.approx(8600, rel=0.1)
    assert found.batch == pytest.approx(68, rel=0.15)


def test_the_speedup_over_load_falls_through_one_at_the_crossover() -> None:
    k, committed = 4, 2.5
    found = crossing(TARGET, DRAFT, k=k, committed=committed, lengths=NO_PROMPT)
    assert found.load is not None and found.batch is not None
    loads = [found.load * f for f in (0.2, 0.5, 1.0, 1.2)]
    curve = speedups(TARGET, DRAFT, k=k, committed=committed, lengths=NO_PROMPT, loads=loads)
    ratios = [ratio for _, _, ratio in curve]
    assert ratios == sorted(ratios, reverse=True)
    assert ratios[1] > 1 > ratios[3]
    assert ratios[2] == pytest.approx(1.0, abs=1e-6) and curve[2][1] == pytest.approx(found.batch, rel=1e-6)
    # time per committed token is the batch over the tokens the load brings: B / (load * (O - 1))
    batch = curve[0][1]
    assert loads[0] == pytest.approx(batch / (500 * (T + TAU * batch)), rel=1e-6)


def test_the_speedup_over_batch_is_the_committed_tokens_over_the_round_against_a_step_and_crosses_one_there() -> None:
    k, committed = 4, 2.5
    found = crossing(TARGET, DRAFT, k=k, committed=committed, lengths=NO_PROMPT)
    assert found.batch is not None
    curve = batch_speedups(TARGET, DRAFT, k=k, committed=committed, lengths=NO_PROMPT, batches=[1, 8, 64])
    for batch, speedup in curve:
        # committed * (T + tau*B) / (T + tau*B*(k + 1) + k*D)
        assert speedup == pytest.approx(committed * (T + TAU * batch) / (T + TAU * batch * (k + 1) + k * D))
    assert [b for b, _ in curve] == [1, 8, 64]
    assert curve[0][1] > curve[1][1] > 1 > curve[2][1]
    (at,) = batch_speedups(TARGET, DRAFT, k=k, committed=committed, lengths=NO_PROMPT, batches=[found.batch])
    assert at[1] == pytest.approx(1.0, abs=1e-6)
