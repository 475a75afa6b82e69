"""Ordinary vs speculative decoding on the mock vLLM across concurrency levels, side by side.

Starts two mock servers (the same flags, the speculative one with one --speculative-config),
drives both at once with the same closed-loop load at each concurrency level, and prints time
per committed token (from /metrics, as the operator computes it) and TTFT p99 (from the client)
per arm. Speculation should win at low concurrency and lose once verification hits the compute
roof, as documented for vLLM. The last line is the crossover: the concurrency at which the
measured ratio rises through 1, interpolated linearly between the levels on either side; and the
same crossover as offered load, the axis a pilot decides on: each arm's throughput at each level is
the offered load it carries there (requests per second, one replica per arm), and the crossover is
where the two arms' time per committed token, each read at the same offered load, cross (only within
the loads both arms were measured at).

    .venv/bin/python bench/mockvllm_concurrency.py [--levels 1,2,4,8,16,32,64] [--level-seconds 20]
        [--profile JSON] [--draft-tokens K] [--scope NAME] [--json PATH]

`--profile` (a mock profile as JSON, e.g. a pilot's SPECPILOT_MOCK_PROFILE_JSON) and `--scope`
(whose acceptance to use) sweep the arms of a pilot directly, to check the crossover its report
estimates from the windows.

With `--rates`, the sweep is open-loop instead, the way a peak rehearsal loads the arms: one stream of
Poisson arrivals climbing through the offered loads (requests per second, one replica per arm), never
drained between them, so that an arm near its capacity carries its queue on as it would in service.
Each load is read over its last `--window` from the requests that finished in it: the share completed
within `--deadline` ("behind" where the arm finished fewer than arrived), time per committed token
from the engine's counters, and the capacity: the highest load at which the arm kept up and at least
`--on-time-target` were on time (and at every lower load). The crossover is read off each arm's time
per committed token at the same offered load.

    .venv/bin/python bench/mockvllm_concurrency.py --rates 0.5,1,1.5,2,3,4 [--deadline 20]
        [--on-time-target 0.99] [--level-seconds 60] [--window 15] [--profile JSON] [--scope NAME]
        [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import itertools
import json
import math
import os
import random
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from specpilot.loadgen.sender import ClientOutcome, Status, Target, send
from specpilot.loadgen.summary import quantile
from specpilot.loadgen.workload import PlannedRequest
from specpilot.mockvllm.costmodel import CostParams, expected_tokens_per_round, step_time

# Compute-heavy target (or a small GPU): verification of k+1 tokens per sequence reaches the
# compute roof at a few dozen sequences, so the crossover falls inside the levels measured.
COST = CostParams(
    step_time_s=0.02, per_seq_s=0.00005, per_token_s=0.0004, prefill_per_token_s=0.0001, draft_cost_ratio=0.1
)
ALPHA = 0.7
K = 4
INPUT_TOKENS, OUTPUT_TOKENS = 256, 128
PROFILE: dict[str, Any] = {"cost": dataclasses.asdict(COST), "acceptance": {"default": ALPHA}}
SPECULATIVE: dict[str, Any] = {"method": "draft_model", "model": "draft-1b", "num_speculative_tokens": K}
SCOPE = "default"
DEADLINE = 20.0  # seconds: on time in the open-loop sweep


def configure(profile: dict[str, Any] | None, draft_tokens: int | None, scope: str | None) -> None:
    """Sweep another profile, draft length or scope's acceptance than the defaults above."""
    global COST, ALPHA, K, SCOPE  # noqa: PLW0603 - the bench's settings, set once before it runs
    if profile is not None:
        PROFILE.clear()
        PROFILE.update(profile)
        COST = CostParams(**{**dataclasses.asdict(CostParams()), **profile.get("cost", {})})
    if scope is not None:
        SCOPE = scope
    acceptance = PROFILE.get("acceptance", {})
    ALPHA = acceptance.get("scopes", {}).get(SCOPE, acceptance.get("default", 0.7))
    if draft_tokens is not None:
        K = draft_tokens
        SPECULATIVE["num_speculative_tokens"] = K


def crossover(rows: list[tuple[int, float]]) -> float | None:
    """The first concurrency at which the speculative / ordinary ratio rises through 1."""
    for (c0, r0), (c1, r1) in itertools.pairwise(rows):
        if r0 < 1 <= r1:
            return c0 + (c1 - c0) * (1 - r0) / (r1 - r0)
    return None


def _at(points: list[tuple[float, float]], x: float) -> float | None:
    """Piecewise-linear through (load, value) points sorted by load; None outside them."""
    for (x0, y0), (x1, y1) in itertools.pairwise(points):
        if x0 <= x <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return None


def offered_crossover(ordinary: list[tuple[float, float]], speculative: list[tuple[float, float]]) -> float | None:
    """The first offered load at which the speculative arm's time per committed token rises through the
    ordinary arm's, each arm's (throughput, tpct) read at the same load, within both arms' loads."""
    ordinary, speculative = sorted(ordinary), sorted(speculative)
    low, high = max(ordinary[0][0], speculative[0][0]), min(ordinary[-1][0], speculative[-1][0])
    grid = [low + (high - low) * i / 200 for i in range(201)] if high > low else []
    diffs = [(x, s - o) for x in grid if (s := _at(speculative, x)) is not None and (o := _at(ordinary, x)) is not None]
    for (x0, d0), (x1, d1) in itertools.pairwise(diffs):
        if d0 < 0 <= d1:
            return x0 + (x1 - x0) * (-d0) / (d1 - d0) if d1 != d0 else x0
    return None


COUNTERS = (
    "vllm:request_decode_time_seconds_sum",
    "vllm:request_decode_time_seconds_count",
    "vllm:generation_tokens_total",
    "vllm:spec_decode_num_drafts_total",
    "vllm:spec_decode_num_accepted_tokens_total",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_mock(port: int, time_scale: float, speculative: bool) -> subprocess.Popen[bytes]:
    args = ["bench-model", "--host", "127.0.0.1", "--port", str(port), "--time-scale", str(time_scale)]
    if speculative:
        args += ["--speculative-config", json.dumps(SPECULATIVE)]
    env = {**os.environ, "SPECPILOT_MOCK_PROFILE_JSON": json.dumps(PROFILE)}
    return subprocess.Popen(
        [sys.executable, "-m", "specpilot.cli", "mock-vllm", *args], env=env, stderr=subprocess.DEVNULL
    )


async def wait_ready(session: aiohttp.ClientSession, url: str) -> None:
    for _ in range(100):
        try:
            async with session.get(url + "/health") as response:
                if response.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.1)
    raise RuntimeError(f"{url} did not become healthy")


@contextlib.asynccontextmanager
async def both_arms(time_scale: float) -> AsyncIterator[list[str]]:
    """An ordinary and a speculative mock server on loopback, ready: their URLs."""
    ports = (free_port(), free_port())
    servers = [start_mock(ports[0], time_scale, False), start_mock(ports[1], time_scale, True)]
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    try:
        async with aiohttp.ClientSession() as session:
            for url in urls:
                await wait_ready(session, url)
        yield urls
    finally:
        for server in servers:
            server.terminate()
            server.wait(timeout=10)


async def counters(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    async with session.get(url + "/metrics") as response:
        text = await response.text()
    out = dict.fromkeys(COUNTERS, 0.0)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in out:
                out[sample.name] += sample.value
    return out


async def closed_loop(target: Target, concurrency: int, seconds: float) -> list[ClientOutcome]:
    """`concurrency` clients, each sending its next request when the previous one ends. Their first
    requests are spread over one ordinary request's duration, so the level starts without a burst."""
    outcomes: list[ClientOutcome] = []
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        stop_at = time.monotonic() + seconds * target.time_scale
        ramp = OUTPUT_TOKENS * COST.step_time_s * target.time_scale

        async def client(worker: int) -> None:
            await asyncio.sleep(ramp * worker / concurrency)
            index = 0
            while time.monotonic() < stop_at:
                request = PlannedRequest(at=0.0, scope=SCOPE, input_tokens=INPUT_TOKENS, output_tokens=OUTPUT_TOKENS)
                outcomes.append(await send(session, target, request, worker * 100_000 + index))
                index += 1

        await asyncio.gather(*(client(w) for w in range(concurrency)))
    return outcomes


async def climb(
    url: str, target: Target, rates: list[float], *, seconds: float, window: float, on_time_target: float
) -> list[dict[str, Any]]:
    """One Poisson stream whose rate climbs through `rates`, `seconds` each and never drained between,
    as a rehearsal's ladder loads an arm; each level is read over its last `window` seconds from the
    requests that finished in it. Stops after the first level the arm does not meet."""
    scale, draw, rows = target.time_scale, random.Random(7), []
    finished: list[tuple[float, ClientOutcome]] = []  # (model seconds from the start when it ended, outcome)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        start, at = time.monotonic(), 0.0
        sent: list[asyncio.Task[None]] = []

        async def one(index: int, offset: float) -> None:
            await asyncio.sleep(max(0.0, start + offset * scale - time.monotonic()))
            request = PlannedRequest(
                at=offset, scope=SCOPE, input_tokens=INPUT_TOKENS, output_tokens=OUTPUT_TOKENS, deadline_s=DEADLINE
            )
            outcome = await send(session, target, request, index)
            finished.append(((time.monotonic() - start) / scale, outcome))

        async def until(offset: float) -> None:
            await asyncio.sleep(max(0.0, start + offset * scale - time.monotonic()))

        try:
            for level, rate in enumerate(rates):
                end = (level + 1) * seconds
                while (at := at + draw.expovariate(rate)) < end:
                    sent.append(asyncio.create_task(one(len(sent), at)))
                at = end
                await until(end - window)
                before = await counters(session, url)
                await until(end)
                after = await counters(session, url)
                read = [outcome for ended, outcome in finished if end - window <= ended < end]
                rows.append(level_row(rate, read, before, after, window))
                if not met(rows[-1], on_time_target):
                    break
        finally:
            for task in sent:
                task.cancel()
            await asyncio.gather(*sent, return_exceptions=True)
    return rows


def level_row(
    rate: float, read: list[ClientOutcome], before: dict[str, float], after: dict[str, float], window: float
) -> dict[str, Any]:
    """A level's figures from the requests that finished in its window and the engine's counters."""
    expected = rate * window
    return {
        "rate": rate,
        "requests": len(read),
        # it kept up: it finished as many as arrived, within three standard deviations of Poisson arrivals
        "kept_up": len(read) >= expected - 3 * math.sqrt(expected),
        "on_time": sum(o.on_time for o in read) / len(read) if read else float("nan"),
        "tpct_s": tpct(before, after),
    }


def tpct(before: dict[str, float], after: dict[str, float]) -> float:
    """Time per committed token between two reads of the engine's counters, as the operator computes it:
    decode seconds over the tokens after each request's first."""
    tokens = (after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"]) - (
        after["vllm:request_decode_time_seconds_count"] - before["vllm:request_decode_time_seconds_count"]
    )
    decode = after["vllm:request_decode_time_seconds_sum"] - before["vllm:request_decode_time_seconds_sum"]
    return decode / tokens if tokens else float("nan")


def capacity(rows: list[dict[str, Any]], target: float) -> float | None:
    """The highest offered load at which the arm kept up and met the on-time `target`, as at every
    lower load."""
    found = None
    for row in sorted(rows, key=lambda r: float(r["rate"])):
        if not met(row, target):
            break
        found = row["rate"]
    return found


def met(row: dict[str, Any], target: float) -> bool:
    return bool(row["kept_up"]) and float(row["on_time"]) >= target


async def sweep(
    rates: list[float], seconds: float, window: float, time_scale: float, on_time_target: float
) -> dict[str, Any]:
    """The open-loop climb: both arms at once, on the same arrivals."""
    async with both_arms(time_scale) as urls:
        # a request three deadlines late is a timeout: an overloaded arm's queue does not hold the sweep
        timeout = 3 * DEADLINE
        targets = [Target(base_url=u, model="bench-model", time_scale=time_scale, timeout_s=timeout) for u in urls]
        print(f"profile {json.dumps(PROFILE)}; speculative arm: {json.dumps(SPECULATIVE)}")
        print(
            f"open loop (Poisson) climbing {len(rates)} loads, {INPUT_TOKENS} input / {OUTPUT_TOKENS} output tokens, "
            f"deadline {DEADLINE:g} s, {seconds:g} model s per load read over its last {window:g}, "
            f"time scale {time_scale:g}"
        )
        climbed = await asyncio.gather(
            *(
                climb(url, target, rates, seconds=seconds, window=window, on_time_target=on_time_target)
                for url, target in zip(urls, targets, strict=True)
            )
        )
        rows = dict(zip(("ordinary", "speculative"), climbed, strict=True))
        print(f"{'load':>6} | {'ord on time':>14} {'spec on time':>14} | {'ord tpct ms':>11} {'spec tpct ms':>12}")
        for index, rate in enumerate(rates):
            found = [arm_rows[index] if index < len(arm_rows) else None for arm_rows in rows.values()]
            on_time = [f"{f['on_time']:.1%}{'' if f['kept_up'] else ' behind'}" if f else "-" for f in found]
            tpct = [f"{f['tpct_s'] * 1e3:.2f}" if f else "-" for f in found]
            print(f"{rate:>6.2f} | {on_time[0]:>14} {on_time[1]:>14} | {tpct[0]:>11} {tpct[1]:>12}", flush=True)
        capacities = {arm: capacity(swept, on_time_target) for arm, swept in rows.items()}
        crossing = offered_crossover(
            [(r["rate"], r["tpct_s"]) for r in rows["ordinary"]],
            [(r["rate"], r["tpct_s"]) for r in rows["speculative"]],
        )
        for arm, value in capacities.items():
            print(f"{arm} capacity at {on_time_target:g} on time: " + (f"{value:g}" if value else "below every load"))
        print("crossover: " + (f"{crossing:.2f} requests per second per replica" if crossing else "none measured"))
        return {"scope": SCOPE, "rows": rows, "capacity": capacities, "offered_crossover": crossing}


def analytic(concurrency: int, k: int) -> float:
    """Decode-only time per committed token for `concurrency` running sequences."""
    duration = step_time(COST, k, decode_seqs=concurrency, prefill_seqs=0, prefill_tokens=0)
    return duration / (expected_tokens_per_round(ALPHA, k) if k else 1.0)


async def measure(url: str, target: Target, concurrency: int, seconds: float) -> dict[str, Any]:
    async with aiohttp.ClientSession() as session:
        before = await counters(session, url)
        outcomes = await closed_loop(target, concurrency, seconds)
        after = await counters(session, url)
    delta = {name: after[name] - before[name] for name in COUNTERS}
    ttfts = sorted(o.ttft_s for o in outcomes if o.status is Status.OK and o.ttft_s is not None)
    drafts = delta["vllm:spec_decode_num_drafts_total"]
    return {
        "tpct_s": tpct(before, after),
        "ttft_p99_s": quantile(ttfts, 0.99) if ttfts else float("nan"),
        "acceptance_length": 1 + delta["vllm:spec_decode_num_accepted_tokens_total"] / drafts if drafts else 1.0,
        "requests": len(outcomes),
        "failed": sum(o.status is not Status.OK for o in outcomes),
        "throughput_rps": len(outcomes) / (seconds * target.time_scale),
    }


HEADER = (
    f"{'conc':>5} | {'ord tpct ms':>11} {'spec tpct ms':>12} {'spec/ord':>8} | {'decode-only model':>17} | "
    f"{'ord TTFT p99':>12} {'spec TTFT p99':>13} | {'acc len':>7} | requests"
)


def row(concurrency: int, ordinary: dict[str, Any], speculative: dict[str, Any]) -> str:
    """One table line: measured tpct per arm and their ratio, the decode-only model, TTFT p99."""
    failed = ordinary["failed"] + speculative["failed"]
    return (
        f"{concurrency:>5} | {ordinary['tpct_s'] * 1e3:>11.2f} {speculative['tpct_s'] * 1e3:>12.2f} "
        f"{speculative['tpct_s'] / ordinary['tpct_s']:>8.2f} | "
        f"{analytic(concurrency, 0) * 1e3:>7.2f} / {analytic(concurrency, K) * 1e3:>7.2f} | "
        f"{ordinary['ttft_p99_s'] * 1e3:>10.1f}ms {speculative['ttft_p99_s'] * 1e3:>11.1f}ms | "
        f"{speculative['acceptance_length']:>7.2f} | {ordinary['requests']}/{speculative['requests']}"
        + (f" ({failed} failed)" if failed else "")
    )


async def main(levels: list[int], seconds: float, time_scale: float) -> dict[str, Any]:
    async with both_arms(time_scale) as urls:
        targets = [Target(base_url=u, model="bench-model", time_scale=time_scale, timeout_s=600) for u in urls]
        print(f"profile {json.dumps(PROFILE)}; speculative arm: {json.dumps(SPECULATIVE)}")
        print(
            f"closed loop, {INPUT_TOKENS} input / {OUTPUT_TOKENS} output tokens, {seconds:g} model s per level, "
            f"time scale {time_scale:g}"
        )
        print(HEADER)
        print("-" * len(HEADER))
        ratios = []
        curves: dict[str, list[tuple[float, float]]] = {"ordinary": [], "speculative": []}
        for concurrency in levels:
            ordinary, speculative = await asyncio.gather(
                *(measure(u, t, concurrency, seconds) for u, t in zip(urls, targets, strict=True))
            )
            print(row(concurrency, ordinary, speculative), flush=True)
            ratios.append((concurrency, speculative["tpct_s"] / ordinary["tpct_s"]))
            for name, measured in (("ordinary", ordinary), ("speculative", speculative)):
                curves[name].append((measured["throughput_rps"], measured["tpct_s"]))
        found = crossover(ratios)
        offered = offered_crossover(curves["ordinary"], curves["speculative"])
        print(f"scope {SCOPE} (acceptance {ALPHA:g}): crossover " + (f"{found:.2f}" if found else "none measured"))
        print(
            "  as offered load: "
            + (f"{offered:.2f} requests per second per replica" if offered else "none within both arms' loads")
        )
        return {"scope": SCOPE, "ratios": ratios, "crossover": found, "curves": curves, "offered_crossover": offered}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", default="1,2,4,8,16,32,64", help="comma-separated concurrency levels")
    parser.add_argument("--level-seconds", type=float, default=30.0, help="model seconds of load per level")
    parser.add_argument("--time-scale", type=float, default=0.5, help="wall seconds per model second")
    parser.add_argument("--profile", help="mock profile as JSON (cost, acceptance) instead of the default")
    parser.add_argument("--draft-tokens", type=int, help=f"num_speculative_tokens (default {K})")
    parser.add_argument("--scope", help="scope whose acceptance the profile gives (default: its default)")
    parser.add_argument("--input-tokens", type=int, default=INPUT_TOKENS)
    parser.add_argument("--output-tokens", type=int, default=OUTPUT_TOKENS)
    parser.add_argument("--json", help="also write the ratios and the crossover here")
    parser.add_argument("--rates", help="comma-separated offered loads: an open-loop sweep instead")
    parser.add_argument("--deadline", type=float, default=DEADLINE, help="seconds: on time in the open-loop sweep")
    parser.add_argument("--on-time-target", type=float, default=0.99, help="what capacity means (open loop)")
    parser.add_argument("--window", type=float, help="model seconds each load is read over (open loop; a quarter)")
    options = parser.parse_args()
    configure(json.loads(options.profile) if options.profile else None, options.draft_tokens, options.scope)
    INPUT_TOKENS, OUTPUT_TOKENS, DEADLINE = options.input_tokens, options.output_tokens, options.deadline
    if options.rates:
        rates = [float(x) for x in options.rates.split(",")]
        window = options.window or options.level_seconds / 4
        result = asyncio.run(sweep(rates, options.level_seconds, window, options.time_scale, options.on_time_target))
    else:
        levels = [int(x) for x in options.levels.split(",")]
        result = asyncio.run(main(levels, options.level_seconds, options.time_scale))
    if options.json:
        with open(options.json, "w") as out:
            json.dump(result, out)
