"""The engine driven in virtual time: exact model-time figures, nothing waited for."""

from __future__ import annotations

import itertools
import random

import pytest

from specpilot.mockvllm import simulate
from specpilot.mockvllm.costmodel import CostParams, time_per_committed_token
from specpilot.mockvllm.engine import ModelClock

PROFILE = {"cost": {"step_time_s": 0.04, "per_token_s": 0.005, "draft_cost_ratio": 0.1}, "acceptance": {"default": 0.5}}
SPECULATIVE = {"method": "draft_model", "model": "draft-1b", "num_speculative_tokens": 3}


def test_a_lone_request_decodes_one_step_per_token_and_speculation_as_the_cost_model_says() -> None:
    lone = [simulate.Arrival(at=1.0, scope="s", prompt_tokens=100, output_tokens=51)]
    (done,) = simulate.serve(simulate.engine(PROFILE), lone, until=60)
    assert done.first_token > done.arrival.at
    assert (done.end - done.first_token) / 50 == pytest.approx(0.04)
    # one at a time, far apart: the speculative arm's time per committed token is the unbatched one
    spaced = [simulate.Arrival(at=10.0 * i, scope="s", prompt_tokens=100, output_tokens=200) for i in range(60)]
    served = simulate.serve(simulate.engine(PROFILE, SPECULATIVE), spaced, until=700)
    assert len(served) == 60
    tpct = sum(s.end - s.first_token for s in served) / sum(s.output_tokens - 1 for s in served)
    expected = time_per_committed_token(CostParams(step_time_s=0.04, per_token_s=0.005), 0.5, 3)
    assert tpct == pytest.approx(expected, rel=0.05)


def test_only_what_finished_by_the_end_is_returned_and_the_same_arrivals_give_the_same_figures() -> None:
    lengths = itertools.repeat((100, 50))
    arrivals = simulate.poisson([1.0, 3.0], 30, scope="s", lengths=lengths, rng=random.Random(1))
    assert all(a.at < 30 for a in arrivals[:10]) and arrivals[-1].at < 60
    once = simulate.serve(simulate.engine(PROFILE, SPECULATIVE), arrivals, until=60)
    again = simulate.serve(simulate.engine(PROFILE, SPECULATIVE), arrivals, until=60)
    assert once == again
    assert 0 < len(once) < len(arrivals)  # past its capacity at 3/s: some are still running at the end
    assert all(s.end <= 60 for s in once)


def test_serving_needs_an_engine_on_the_virtual_clock() -> None:
    engine = simulate.engine(PROFILE)
    engine.clock = ModelClock(1.0)
    with pytest.raises(TypeError, match=r"simulate\.engine"):
        simulate.serve(engine, [], until=1)
