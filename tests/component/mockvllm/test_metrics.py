"""/metrics after real traffic: values consistent with what the engine did, vLLM's label sets."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

REFERENCE = json.loads((Path(__file__).parents[2] / "data" / "vllm-0.33-metrics.json").read_text())
LABELS = {f["name"]: set(f["labels"]) for f in REFERENCE["families"]}
SPEC = ("--speculative-config", '{"model": "org/draft", "num_speculative_tokens": 3}')


async def traffic(url: str, requests: int, max_tokens: int) -> None:
    async with aiohttp.ClientSession() as session:

        async def one(index: int) -> None:
            body = {
                "prompt": f"metrics probe {index}",
                "max_tokens": max_tokens,
                "temperature": 0,
                "ignore_eos": True,
                "stream": index % 2 == 0,
            }
            async with session.post(url + "/v1/completions", json=body) as response:
                assert response.status == 200
                await response.read()

        await asyncio.gather(*(one(i) for i in range(requests)))
        async with session.get(url + "/v1/nowhere") as response:
            assert response.status == 404 and await response.json() == {"detail": "Not Found"}


async def test_counters_agree_with_each_other_after_batched_speculative_traffic(mock_vllm: Any, scrape: Any) -> None:
    mock = await mock_vllm("--time-scale", "0.01", *SPEC)
    await traffic(mock.url, requests=12, max_tokens=60)
    m = await scrape(mock.url)
    finished = m["vllm:request_success_total{finished_reason=length}"]
    assert finished == 12 == m["vllm:e2e_request_latency_seconds_count"] == m["vllm:time_to_first_token_seconds_count"]
    assert m["vllm:generation_tokens_total"] == 12 * 60 == m["vllm:request_generation_tokens_sum"]
    assert m["vllm:prompt_tokens_total"] == m["vllm:request_prompt_tokens_sum"] == m["vllm:prefix_cache_queries_total"]
    assert m["vllm:prompt_tokens_by_source_total{source=local_compute}"] == m["vllm:prompt_tokens_total"]
    # Speculative bookkeeping: per-position counts never rise and sum to the accepted tokens.
    positions = [m[f"vllm:spec_decode_num_accepted_tokens_per_pos_total{{position={i}}}"] for i in range(3)]
    assert positions == sorted(positions, reverse=True)
    assert sum(positions) == m["vllm:spec_decode_num_accepted_tokens_total"]
    assert m["vllm:spec_decode_num_draft_tokens_total"] == 3 * m["vllm:spec_decode_num_drafts_total"]
    # One ITL observation per step per request after its first token; ITLs add up to decode time.
    assert m["vllm:inter_token_latency_seconds_count"] == m["vllm:spec_decode_num_drafts_total"]
    assert m["vllm:inter_token_latency_seconds_sum"] == pytest.approx(m["vllm:request_decode_time_seconds_sum"])
    inference = m["vllm:request_prefill_time_seconds_sum"] + m["vllm:request_decode_time_seconds_sum"]
    assert m["vllm:request_inference_time_seconds_sum"] == pytest.approx(inference)
    assert m["vllm:iteration_tokens_total_sum"] == m["vllm:generation_tokens_total"] + m["vllm:prompt_tokens_total"]
    assert m["vllm:num_requests_running"] == m["vllm:num_requests_waiting"] == 0


async def test_the_exposition_parses_and_keeps_vllms_labels_after_traffic(mock_vllm: Any) -> None:
    mock = await mock_vllm("--time-scale", "0.01", *SPEC)
    await traffic(mock.url, requests=4, max_tokens=10)
    async with aiohttp.ClientSession() as session, session.get(mock.url + "/metrics") as response:
        text = await response.text()
    families = list(text_string_to_metric_families(text))
    assert families
    handlers = set()
    for family in families:
        name = family.name if family.name in LABELS else family.name + "_total"
        if family.name.endswith("_created") or name not in LABELS:
            assert family.name.endswith("_created"), family.name
            continue
        for sample in family.samples:
            assert set(sample.labels) - {"le", "quantile"} == LABELS[name], sample
            if sample.name == "http_requests_total":
                handlers.add((sample.labels["handler"], sample.labels["status"]))
    assert handlers == {("/v1/completions", "2xx"), ("none", "4xx")}  # /metrics itself is never counted


async def test_an_ordinary_arm_exposes_no_spec_decode_families(mock_vllm: Any) -> None:
    mock = await mock_vllm("--time-scale", "0.01")
    async with aiohttp.ClientSession() as session, session.get(mock.url + "/metrics") as response:
        assert "spec_decode" not in await response.text()
