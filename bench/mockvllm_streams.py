"""Can one core of mock vLLM sustain hundreds of concurrent streams with true step timing?

Runs `specpilot mock-vllm` pinned to one CPU (`taskset -c 0`), drives it from this process
(pinned to another CPU when there is one) with N concurrent streaming chat completions in a
closed loop, and reports achieved throughput, the server's CPU use, and whether the engine's
steps stayed on schedule: the wall clock's lag behind each step's modelled end, the model time
that passed per wall second, and the client-observed time per output token against the cost
model's step time for that batch.

    .venv/bin/python bench/mockvllm_streams.py [--streams 200] [--seconds 30] [--output-tokens 256]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from specpilot.loadgen.sender import ClientOutcome, Status, Target, send
from specpilot.loadgen.workload import PlannedRequest
from specpilot.mockvllm.costmodel import CostParams, step_time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def get_json(session: aiohttp.ClientSession, url: str) -> Any:
    async with session.get(url) as response:
        return await response.json()


async def metric_sums(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    async with session.get(url + "/metrics") as response:
        text = await response.text()
    sums: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            sums[sample.name] = sums.get(sample.name, 0.0) + sample.value
    return sums


async def drive(target: Target, streams: int, seconds: float, output_tokens: int) -> tuple[list[ClientOutcome], float]:
    outcomes: list[ClientOutcome] = []
    stop_at = time.monotonic() + seconds
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def stream(worker: int) -> None:
            index = 0
            while time.monotonic() < stop_at:
                request = PlannedRequest(at=0.0, scope="default", input_tokens=128, output_tokens=output_tokens)
                outcomes.append(await send(session, target, request, worker * 1_000_000 + index))
                index += 1

        started = time.monotonic()
        await asyncio.gather(*(stream(w) for w in range(streams)))
    return outcomes, time.monotonic() - started


def start_server(port: int, admin: int, time_scale: float) -> tuple[subprocess.Popen[bytes], bool]:
    """The mock on CPU 0 (when taskset exists); returns the process and whether it is pinned."""
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    args = ["bench-model", "--host", "127.0.0.1", "--port", str(port), "--admin-port", str(admin)]
    command = [*pin, sys.executable, "-m", "specpilot.cli", "mock-vllm", *args, "--time-scale", str(time_scale)]
    return subprocess.Popen(command, stderr=subprocess.DEVNULL), bool(pin)


async def main(streams: int, seconds: float, output_tokens: int, time_scale: float) -> int:
    port, admin = free_port(), free_port()
    server, pinned = start_server(port, admin, time_scale)
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {1})
    url, admin_url = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{admin}"
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(100):
                try:
                    before_engine = await get_json(session, admin_url + "/engine")
                    break
                except aiohttp.ClientError:
                    await asyncio.sleep(0.1)
            before = await metric_sums(session, url)
            wall_before = time.monotonic()
        target = Target(base_url=url, model="bench-model", time_scale=time_scale, timeout_s=600)
        outcomes, elapsed = await drive(target, streams, seconds, output_tokens)
        async with aiohttp.ClientSession() as session:
            after_engine = await get_json(session, admin_url + "/engine")
            after = await metric_sums(session, url)
            wall = time.monotonic() - wall_before
    finally:
        server.terminate()
        server.wait(timeout=10)

    def delta(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    ok = [o for o in outcomes if o.status is Status.OK]
    tokens = sum(o.output_tokens for o in ok)
    itl_mean = delta("vllm:inter_token_latency_seconds_sum") / delta("vllm:inter_token_latency_seconds_count")
    decode_step = step_time(CostParams(), 0, decode_seqs=streams, prefill_seqs=0, prefill_tokens=0)
    tpots = [o.tpot_s for o in ok if o.tpot_s is not None]
    steps = after_engine["steps"] - before_engine["steps"]
    model_elapsed = after_engine["model_time_s"] - before_engine["model_time_s"]
    cpu = delta("process_cpu_seconds_total")
    print(
        f"mock vLLM pinned to CPU 0{' (taskset)' if pinned else ''}; client on CPU 1; default profile; "
        f"time scale {time_scale:g}"
    )
    print(f"streams {streams}, {output_tokens} output tokens each, {elapsed:.1f} s of load")
    print(f"requests finished {len(ok)}, failed {len(outcomes) - len(ok)}")
    print(
        f"throughput: {tokens / elapsed:,.0f} tokens/s, {steps * streams / elapsed:,.0f} stream chunks/s (approx.), "
        f"{steps / elapsed:.1f} engine steps/s"
    )
    print(f"server CPU: {cpu / wall:.0%} of one core")
    print(
        f"engine lag behind schedule (wall): mean {after_engine['lag_mean_s'] * 1e3:.2f} ms, "
        f"max {after_engine['lag_max_s'] * 1e3:.1f} ms"
    )
    print(f"model seconds per wall second: {model_elapsed / wall:.3f} (true timing: {1 / time_scale:g})")
    print(
        f"mean step (ITL) from /metrics: {itl_mean * 1e3:.2f} ms model; cost model decode step at batch "
        f"{streams}: {decode_step * 1e3:.2f} ms (prefills of new requests lengthen some steps)"
    )
    print(
        f"client-observed time per output token: median {statistics.median(tpots) * 1e3:.2f} ms, "
        f"p99 {sorted(tpots)[int(0.99 * (len(tpots) - 1))] * 1e3:.2f} ms (model)"
    )
    result = {
        "streams": streams,
        "tokens_per_s": tokens / elapsed,
        "cpu_share": cpu / wall,
        "lag_mean_s": after_engine["lag_mean_s"],
        "lag_max_s": after_engine["lag_max_s"],
        "model_per_wall": model_elapsed / wall,
        "itl_mean_s": itl_mean,
        "decode_step_s": decode_step,
        "tpot_median_s": statistics.median(tpots),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=30.0, help="wall seconds of load")
    parser.add_argument("--output-tokens", type=int, default=256)
    parser.add_argument("--time-scale", type=float, default=1.0)
    options = parser.parse_args()
    sys.exit(asyncio.run(main(options.streams, options.seconds, options.output_tokens, options.time_scale)))
