"""The load generator against the mock vLLM over loopback: counts, quantiles, failures, the CLI."""

from __future__ import annotations

import asyncio
import json
import random
import signal
import sys
from itertools import islice
from pathlib import Path
from typing import Any

import aiohttp

from specpilot.loadgen.runner import RunLimits, run
from specpilot.loadgen.sender import Target
from specpilot.loadgen.workload import constant_arrivals, parse_mix, plan, poisson_arrivals

SCALE = 0.02
# The deadline and timeout case times requests against each other on one sequence slot: a model
# second of 20 ms is within a busy machine's scheduling delays, one of 100 ms is not.
TIMED_SCALE = 0.1
MIX = parse_mix(
    [
        {
            "name": "code",
            "weight": 2,
            "input_tokens": {"dist": "uniform", "min": 50, "max": 150},
            "output_tokens": 40,
            "deadline_s": 30,
        },
        {"name": "chat", "weight": 1, "input_tokens": 80, "output_tokens": {"dist": "choice", "values": [10, 20]}},
    ]
)


def target(url: str, **overrides: Any) -> Target:
    return Target(**{"base_url": url, "model": "test-model", "time_scale": SCALE, "timeout_s": 60, **overrides})


async def test_an_open_loop_run_reports_per_scope_counts_and_quantiles(mock_vllm: Any, scrape: Any) -> None:
    mock = await mock_vllm("--time-scale", str(SCALE), "-sc", '{"model": "d", "num_speculative_tokens": 3}')
    planned = plan(poisson_arrivals(4.0, random.Random(1)), MIX, random.Random(2))
    result = await run(target(mock.url), planned, RunLimits(duration_s=10.0, max_requests=30))
    overall, scopes = result["overall"], result["scopes"]
    assert result["sent"] == overall["requests"] == overall["ok"] == overall["on_time"]
    assert 20 <= overall["requests"] <= 30
    assert set(scopes) == {"code", "chat"}
    assert scopes["code"]["output_tokens"] == 40 * scopes["code"]["requests"]
    for summary in scopes.values():
        for key in ("ttft_s", "e2e_s", "tpot_s"):
            stats = summary[key]
            assert 0 < stats["p50"] <= stats["p90"] <= stats["p99"] <= stats["max"]
        assert summary["ttft_s"]["p50"] < summary["e2e_s"]["p50"]
    metrics = await scrape(mock.url)
    assert metrics["vllm:request_success_total{finished_reason=length}"] == overall["requests"]
    assert metrics["vllm:generation_tokens_total"] == overall["output_tokens"]


async def test_rejections_timeouts_and_late_completions_are_counted(mock_vllm: Any) -> None:
    mock = await mock_vllm("--time-scale", str(TIMED_SCALE), "--max-num-seqs", "1")
    async with aiohttp.ClientSession() as session:
        fault = {"kind": "rejections", "rate": 1.0, "scope": "chat"}
        async with session.post(mock.admin_url + "/faults", json=fault) as response:
            assert response.status == 201
    # A burst onto one sequence slot (about 1 s of work each): later ones miss the deadline or time out.
    mix = parse_mix([{"name": "code", "weight": 3, "output_tokens": 50, "deadline_s": 3}, {"name": "chat"}])
    planned = plan(islice(constant_arrivals(1000.0), 16), mix, random.Random(0))
    result = await run(target(mock.url, timeout_s=6.5, time_scale=TIMED_SCALE), planned, RunLimits(duration_s=60.0))
    code, chat = result["scopes"]["code"], result["scopes"]["chat"]
    assert chat["rejections"] == chat["requests"] > 0 and chat["ok"] == 0
    assert code["timeouts"] > 0 and code["ok"] > 0
    assert 0 < code["on_time"] < code["ok"]
    assert result["overall"]["on_time_ratio"] == code["on_time"] / result["overall"]["requests"]


async def test_the_command_writes_a_json_result_and_a_progress_line(mock_vllm: Any, tmp_path: Path) -> None:
    mock = await mock_vllm("--time-scale", str(SCALE))
    mix = tmp_path / "mix.yaml"
    mix.write_text("scopes:\n  - {name: code, output_tokens: 20}\n  - {name: chat, output_tokens: 10}\n")
    output = tmp_path / "result.json"
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "specpilot.cli",
        "loadgen",
        "--url",
        mock.url + "/v1",
        "--arrivals",
        "constant",
        "--rate",
        "5",
        "--duration",
        "4",
        "--mix",
        str(mix),
        "--time-scale",
        str(SCALE),
        "--endpoint",
        "completions",
        "--output",
        str(output),
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 0, stderr.decode()
    result = json.loads(output.read_text())
    assert result["config"]["model"] == "test-model"  # discovered through /v1/models
    assert result["sent"] == result["overall"]["ok"] == 20
    assert set(result["scopes"]) == {"code", "chat"}
    assert "sent 20 done 20 ok 20" in stderr.decode()


async def test_sigint_ends_the_load_at_once_and_the_result_still_accounts_for_every_request_sent(
    mock_vllm: Any, tmp_path: Path
) -> None:
    mock = await mock_vllm("--time-scale", str(SCALE))
    output = tmp_path / "result.json"
    argv = ["--url", mock.url, "--arrivals", "constant", "--rate", "5", "--duration", "600", "--no-progress"]
    argv += ["--time-scale", str(SCALE), "--endpoint", "completions", "--output", str(output)]
    # 30 s of real time per request (1,500 model seconds): every request that finished is ok however
    # loaded the machine is, so what is asserted is the stop's accounting, not the machine's speed
    argv += ["--timeout", "1500"]
    process = await asyncio.create_subprocess_exec(sys.executable, "-m", "specpilot.cli", "loadgen", *argv)
    await asyncio.sleep(3)  # 150 of the 600 model seconds
    process.send_signal(signal.SIGINT)
    assert await asyncio.wait_for(process.wait(), timeout=30) == 0
    result = json.loads(output.read_text())
    assert result["stopped"] is True
    assert 0 < result["sent"] < 600 * 5
    assert result["overall"]["requests"] == result["overall"]["ok"] > 0
    assert result["overall"]["requests"] + result["cancelled"] == result["sent"]


async def test_the_command_refuses_bad_input() -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "specpilot.cli",
        "loadgen",
        "--url",
        "http://127.0.0.1:9",
        "--mix",
        "[{}]",
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(process.communicate(), timeout=30)
    assert process.returncode == 2
    assert b"specpilot loadgen: error: scopes[0]: needs a 'name'" in stderr


async def test_a_guarded_server_needs_the_api_key(mock_vllm: Any) -> None:
    mock = await mock_vllm("--time-scale", str(SCALE), "--api-key", "sekrit")
    mix = parse_mix([{"name": "code", "output_tokens": 5}])
    for key, ok in ((None, 0), ("sekrit", 3)):
        planned = plan(islice(constant_arrivals(100.0), 3), mix, random.Random(0))
        result = await run(target(mock.url, api_key=key), planned, RunLimits(duration_s=10.0))
        assert result["overall"]["ok"] == ok
        assert result["overall"]["errors"] == 3 - ok
