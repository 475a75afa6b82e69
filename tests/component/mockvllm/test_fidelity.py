"""Fidelity: with no batching pressure the mock's time per committed token and mean acceptance
length, measured through /metrics (as the operator computes them) and through the API (as a
client sees them), agree with the analytic expectation within 5% over at least 2,000 tokens:

    tokens per round = (1 - alpha^(k+1)) / (1 - alpha),  round time = (k*c + 1) * T

and speculation loses exactly where theory says it does (small alpha, large c).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from specpilot.mockvllm.costmodel import CostParams, expected_tokens_per_round, time_per_committed_token

STEP_TIME = 0.02
# A 2 ms step of wall time: the event loop's own delays on a busy machine stay within a few percent of it.
TIME_SCALE = 0.1
MIN_TOKENS = 2000
MAX_TOKENS = 500
TOLERANCE = 0.05


@dataclass(frozen=True)
class Measured:
    tpct_metrics: float
    tpct_api: float
    acceptance_length_metrics: float
    acceptance_length_api: float
    decode_tokens: int


async def measure(mock: Any, scrape: Any) -> Measured:
    """Sequential greedy streams (one at a time: no batching) until MIN_TOKENS decode tokens."""
    before = await scrape(mock.url)
    decode_wall = 0.0
    decode_tokens = rounds = 0
    async with aiohttp.ClientSession() as session:
        index = 0
        while decode_tokens < MIN_TOKENS:
            body = {
                "prompt": f"fidelity probe {index}",
                "max_tokens": MAX_TOKENS,
                "temperature": 0,
                "ignore_eos": True,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            index += 1
            arrivals: list[float] = []
            tokens = 0
            async with session.post(mock.url + "/v1/completions", json=body) as response:
                assert response.status == 200
                async for line in response.content:
                    if not line.startswith(b"data: {"):
                        continue
                    chunk = json.loads(line[6:])
                    if chunk["choices"] and chunk["choices"][0]["text"]:
                        arrivals.append(time.monotonic())
                    if chunk.get("usage"):
                        tokens = chunk["usage"]["completion_tokens"]
            assert tokens == MAX_TOKENS
            decode_wall += arrivals[-1] - arrivals[0]
            decode_tokens += tokens - 1
            rounds += len(arrivals) - 1
    after = await scrape(mock.url)

    def delta(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    finished = delta("vllm:request_decode_time_seconds_count")
    drafts = delta("vllm:spec_decode_num_drafts_total")
    return Measured(
        tpct_metrics=delta("vllm:request_decode_time_seconds_sum") / (delta("vllm:generation_tokens_total") - finished),
        tpct_api=decode_wall / TIME_SCALE / decode_tokens,
        acceptance_length_metrics=1 + delta("vllm:spec_decode_num_accepted_tokens_total") / drafts if drafts else 1.0,
        acceptance_length_api=decode_tokens / rounds,
        decode_tokens=decode_tokens,
    )


CASES = [
    pytest.param(0.0, 0, 0.0, id="ordinary"),
    pytest.param(0.8, 4, 0.1, id="a0.8-k4-c0.1-wins"),
    pytest.param(0.6, 3, 0.2, id="a0.6-k3-c0.2-wins"),
    pytest.param(0.9, 5, 0.05, id="a0.9-k5-c0.05-wins"),
    pytest.param(0.5, 2, 0.3, id="a0.5-k2-c0.3-wins"),
    pytest.param(0.3, 4, 0.5, id="a0.3-k4-c0.5-loses"),
    pytest.param(0.2, 6, 0.3, id="a0.2-k6-c0.3-loses"),
]


@pytest.mark.parametrize(("alpha", "k", "c"), CASES)
async def test_time_per_committed_token_and_acceptance_match_theory(
    mock_vllm: Any, scrape: Any, alpha: float, k: int, c: float
) -> None:
    flags = ["--time-scale", str(TIME_SCALE)]
    if k:
        flags += ["--speculative-config", json.dumps({"model": "draft", "num_speculative_tokens": k})]
    profile = {"cost": {"step_time_s": STEP_TIME, "draft_cost_ratio": c}, "acceptance": {"default": alpha}}
    mock = await mock_vllm(*flags, profile=profile)
    measured = await measure(mock, scrape)

    params = CostParams(step_time_s=STEP_TIME, draft_cost_ratio=c)
    expected_tpct = time_per_committed_token(params, alpha, k)
    expected_length = expected_tokens_per_round(alpha, k) if k else 1.0
    print(
        f"\nalpha={alpha} k={k} c={c}: tpct expected {expected_tpct * 1e3:.3f} ms, /metrics "
        f"{measured.tpct_metrics * 1e3:.3f} ms, API {measured.tpct_api * 1e3:.3f} ms; acceptance length "
        f"expected {expected_length:.3f}, /metrics {measured.acceptance_length_metrics:.3f}, API "
        f"{measured.acceptance_length_api:.3f} ({measured.decode_tokens} tokens)"
    )
    assert measured.decode_tokens >= MIN_TOKENS
    assert measured.tpct_metrics == pytest.approx(expected_tpct, rel=TOLERANCE)
    assert measured.tpct_api == pytest.approx(expected_tpct, rel=TOLERANCE)
    assert measured.acceptance_length_metrics == pytest.approx(expected_length, rel=TOLERANCE)
    assert measured.acceptance_length_api == pytest.approx(expected_length, rel=TOLERANCE)
    if k:  # the sign: speculation beats ordinary decoding (T per token) exactly where theory says
        wins = expected_tpct < STEP_TIME
        assert (measured.tpct_metrics < STEP_TIME) is wins
        assert (measured.tpct_api < STEP_TIME) is wins
