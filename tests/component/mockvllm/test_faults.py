"""Faults injected at run time through the admin endpoint (and from the profile)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from specpilot.testing.waiting import eventually

FAST = ("--time-scale", "0.01")
SPEC = ("--speculative-config", '{"model": "org/draft", "num_speculative_tokens": 4}')


async def call(method: str, url: str, body: Any = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.request(method, url, json=body, headers=headers) as r:
        text = await r.text()
        return r.status, json.loads(text) if text else None


def probe(max_tokens: int, *, stream: bool = False) -> dict[str, Any]:
    return {"prompt": "fault probe", "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": stream}


async def complete(url: str, *, scope: str = "default", max_tokens: int = 50) -> tuple[int, Any]:
    return await call("POST", url + "/v1/completions", probe(max_tokens), {"X-Specpilot-Scope": scope})


async def chunks(url: str, *, scope: str, max_tokens: int) -> int:
    """Content chunks of a streamed completion: one per engine step."""
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            url + "/v1/completions", json=probe(max_tokens, stream=True), headers={"X-Specpilot-Scope": scope}
        ) as response,
    ):
        raw = (await response.read()).decode()
    return raw.count('"text": " ')


async def test_faults_are_listed_added_and_removed(mock_vllm: Any) -> None:
    mock = await mock_vllm(*FAST)
    status, added = await call(
        "POST", mock.admin_url + "/faults", [{"kind": "latency", "factor": 2}, {"kind": "rejections", "rate": 0.5}]
    )
    assert status == 201 and [f["kind"] for f in added["faults"]] == ["latency", "rejections"]
    _, listing = await call("GET", mock.admin_url + "/faults")
    assert len(listing["faults"]) == 2
    fault_id = added["faults"][0]["id"]
    assert (await call("DELETE", f"{mock.admin_url}/faults/{fault_id}"))[0] == 200
    assert (await call("DELETE", f"{mock.admin_url}/faults/{fault_id}"))[0] == 404
    assert (await call("DELETE", mock.admin_url + "/faults"))[1] == {"faults": []}
    status, error = await call("POST", mock.admin_url + "/faults", {"kind": "latency", "scope": "code"})
    assert status == 400 and "takes no scope" in error["error"]["message"]


async def test_the_admin_endpoint_is_not_on_the_api_port(mock_vllm: Any) -> None:
    mock = await mock_vllm(*FAST)
    assert (await call("GET", mock.url + "/faults"))[0] == 404


async def test_a_latency_spike_stretches_every_step(mock_vllm: Any, scrape: Any) -> None:
    mock = await mock_vllm(*FAST, profile={"cost": {"step_time_s": 0.02}})
    await call("POST", mock.admin_url + "/faults", {"kind": "latency", "factor": 3, "extra_s": 0.01})
    assert (await complete(mock.url, max_tokens=101))[0] == 200
    metrics = await scrape(mock.url)
    per_token = metrics["vllm:request_decode_time_seconds_sum"] / 100
    assert per_token == pytest.approx(3 * 0.02 + 0.01)


async def test_acceptance_collapse_hits_one_scope(mock_vllm: Any) -> None:
    mock = await mock_vllm(*FAST, *SPEC, profile={"acceptance": {"default": 0.9}})
    await call("POST", mock.admin_url + "/faults", {"kind": "acceptance", "alpha": 0.0, "scope": "code"})
    assert await chunks(mock.url, scope="code", max_tokens=100) == 100  # one token per round: nothing accepted
    assert await chunks(mock.url, scope="chat", max_tokens=100) < 40


async def test_memory_pressure_causes_queueing_and_preemptions(mock_vllm: Any, scrape: Any) -> None:
    profile = {"memory": {"num_gpu_blocks": 201}, "model": {"max_model_len": 1024}}
    mock = await mock_vllm(*FAST, profile=profile)
    await call("POST", mock.admin_url + "/faults", {"kind": "memory", "fraction": 0.8})
    results = await asyncio.gather(*(complete(mock.url, max_tokens=300) for _ in range(6)))
    assert all(status == 200 for status, _ in results)
    metrics = await scrape(mock.url)
    assert metrics["vllm:num_preemptions_total"] > 0
    assert metrics["vllm:request_queue_time_seconds_sum"] > 0
    assert metrics["vllm:kv_cache_usage_perc"] == pytest.approx(0.8)


async def test_rejection_and_error_rates(mock_vllm: Any) -> None:
    mock = await mock_vllm(*FAST)
    await call(
        "POST",
        mock.admin_url + "/faults",
        [
            {"kind": "rejections", "rate": 1.0, "scope": "code"},
            {"kind": "errors", "rate": 1.0, "status": 503, "scope": "chat"},
        ],
    )
    status, body = await complete(mock.url, scope="code")
    assert status == 429 and body["error"]["code"] == 429
    assert (await complete(mock.url, scope="chat"))[0] == 503
    assert (await complete(mock.url, scope="other"))[0] == 200


async def test_a_hang_stalls_requests_while_health_stays_green(mock_vllm: Any) -> None:
    mock = await mock_vllm(*FAST)
    _, added = await call("POST", mock.admin_url + "/faults", {"kind": "hang"})
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.3):
            await complete(mock.url, max_tokens=5)
    assert (await call("GET", mock.url + "/health"))[0] == 200  # like vLLM, a wedged engine still looks alive
    await call("DELETE", f"{mock.admin_url}/faults/{added['faults'][0]['id']}")
    assert (await complete(mock.url, max_tokens=5))[0] == 200


async def test_stalls_hold_a_share_of_one_scopes_requests_until_the_client_gives_up(
    mock_vllm: Any, scrape: Any
) -> None:
    mock = await mock_vllm(*FAST)
    await call("POST", mock.admin_url + "/faults", {"kind": "stalls", "rate": 1.0, "scope": "code"})
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.5):
            await complete(mock.url, scope="code", max_tokens=5)
    assert (await complete(mock.url, scope="chat", max_tokens=5))[0] == 200
    metrics = await scrape(mock.url)
    assert metrics["vllm:num_requests_running"] == 0 and metrics["vllm:num_requests_waiting"] == 0
    assert sum(v for k, v in metrics.items() if k.startswith("vllm:request_success_total")) == 1  # chat only


async def test_a_slow_start_delays_the_first_token_of_one_scope(mock_vllm: Any) -> None:
    mock = await mock_vllm("--time-scale", "0.1")
    await call("POST", mock.admin_url + "/faults", {"kind": "slow_start", "rate": 1.0, "extra_s": 5, "scope": "code"})
    started = asyncio.get_running_loop().time()
    assert (await complete(mock.url, scope="chat", max_tokens=2))[0] == 200
    chat = asyncio.get_running_loop().time() - started
    assert (await complete(mock.url, scope="code", max_tokens=2))[0] == 200
    code = asyncio.get_running_loop().time() - started - chat
    assert chat < 0.3 and code >= 0.5, (chat, code)  # 5 model seconds at a tenth of wall time


async def test_garbled_metrics_are_cut_and_nan_until_the_fault_ends(mock_vllm: Any) -> None:
    mock = await mock_vllm(*FAST)
    _, added = await call("POST", mock.admin_url + "/faults", {"kind": "garbled_metrics"})
    async with aiohttp.ClientSession() as session, session.get(mock.url + "/metrics") as r:
        garbled = await r.text()
    assert "NaN" in garbled and "vllm:kv_cache_usage_perc" in garbled
    assert not garbled.endswith("\n"), "cut mid-line"
    await call("DELETE", f"{mock.admin_url}/faults/{added['faults'][0]['id']}")
    async with aiohttp.ClientSession() as session, session.get(mock.url + "/metrics") as r:
        clean = await r.text()
    assert "NaN" not in clean and clean.endswith("\n")


async def test_a_crash_kills_the_server(mock_vllm: Any) -> None:
    mock = await mock_vllm(*FAST)
    await call("POST", mock.admin_url + "/faults", {"kind": "crash", "exit_code": 3})
    await eventually("the crash fault to kill the engine", lambda: mock.crashes)
    assert mock.crashes == [3]
    assert (await call("GET", mock.url + "/health"))[0] == 503
    assert (await complete(mock.url))[0] == 500


async def test_profile_faults_apply_from_start_up(mock_vllm: Any) -> None:
    mock = await mock_vllm(*FAST, profile={"faults": [{"kind": "rejections", "rate": 1.0}]})
    assert (await complete(mock.url))[0] == 429
