"""What scraping vLLM engines costs the operator, measured side by side in one run.

    .venv/bin/python bench/scrape.py [--endpoints 1000] [--interval 10] [--cycles 6] [--servers 4]

(a) Parser: a mock vLLM with a speculative config serves some traffic on loopback, then its
/metrics is parsed over and over by `specpilot.metrics.exposition.parse_exposition` (the families
`engine_window` reads) and by prometheus-client's full ``text_string_to_metric_families``; CPU
milliseconds per exposition for both, and the ratio (target >= 20x).

(b) Fleet: `--servers` child processes (this file, ``serve`` mode) listen on `--endpoints` loopback
ports in all and serve that exposition gzip-compressed when asked; this process scrapes every one
of them every `--interval` seconds through `specpilot.fetch.scrape.scrape_all` (one session,
kept-alive connections, bounded concurrency) for `--cycles` cycles and reads its own CPU time at
each tick, so a cycle's CPU includes the idle wait (target <= 0.25 core, i.e. <= 2.5 s per 10-s
cycle). The first cycle opens the connections; the steady figure is the mean of the others.
Everything stays on 127.0.0.1; a default run takes under two minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from specpilot.fetch.outbound import allowing_loopback
from specpilot.fetch.scrape import ScrapeTarget, scrape_all, scrape_session
from specpilot.metrics.engine_window import ENGINE_FAMILIES, EngineScrape
from specpilot.metrics.exposition import parse_exposition
from specpilot.mockvllm.config import parse_args
from specpilot.mockvllm.profile import Profile
from specpilot.mockvllm.server import MockServer

SPECULATIVE = '{"method": "draft_model", "model": "org/draft", "num_speculative_tokens": 4}'
TARGET_RATIO = 20.0
TARGET_CORES = 0.25


async def realistic_exposition() -> bytes:
    """/metrics of a speculative mock vLLM after 48 mixed requests (its counters and histograms filled)."""
    server = MockServer(parse_args(["org/target", "--time-scale", "0.01", "-sc", SPECULATIVE]), Profile(), env={})
    await server.start("127.0.0.1", 0, None)
    url = f"http://127.0.0.1:{server.port}"
    try:
        async with aiohttp.ClientSession() as session:

            async def one(i: int) -> None:
                body = {"prompt": f"bench {i} " * (1 + i % 7), "max_tokens": 16 + 8 * (i % 9), "stream": i % 2 == 0}
                async with session.post(f"{url}/v1/completions", json=body) as response:
                    await response.read()

            await asyncio.gather(*(one(i) for i in range(48)))
            async with session.get(f"{url}/metrics") as response:
                return await response.read()
    finally:
        await server.stop()


def cpu_ms_per_parse(parse: Callable[[str], None], text: str, *, seconds: float = 3.0) -> float:
    """CPU milliseconds per call, over enough calls to fill about `seconds` of CPU."""
    calls, started = 0, time.process_time()
    while time.process_time() - started < seconds:
        parse(text)
        calls += 1
    return (time.process_time() - started) / calls * 1e3


def full_parse(text: str) -> None:
    for family in text_string_to_metric_families(text):
        for _ in family.samples:
            pass


def ours(text: str) -> None:
    parse_exposition(text, ENGINE_FAMILIES)


def start_servers(body: Path, endpoints: int, servers: int) -> tuple[list[subprocess.Popen[str]], list[int]]:
    processes, ports = [], []
    for i in range(servers):
        share = endpoints // servers + (1 if i < endpoints % servers else 0)
        process = subprocess.Popen(
            [sys.executable, __file__, "serve", "--ports", str(share), "--body", str(body)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        processes.append(process)
    for process in processes:
        assert process.stdout is not None
        ports += json.loads(process.stdout.readline())
    return processes, ports


async def fleet(ports: list[int], *, interval: float, cycles: int, concurrency: int) -> list[dict[str, float]]:
    targets = [ScrapeTarget(f"engine-{i}", f"http://127.0.0.1:{port}/metrics") for i, port in enumerate(ports)]
    rows: list[dict[str, float]] = []
    async with scrape_session(
        addresses=allowing_loopback(), limit=concurrency, limit_per_host=2, keepalive_s=3 * interval
    ) as session:
        first_tick = time.monotonic()
        cpu_at_tick = time.process_time()
        for cycle in range(cycles):
            tick = first_tick + cycle * interval
            started = time.monotonic()
            results = await scrape_all(
                session,
                targets,
                families=ENGINE_FAMILIES,
                timeout_s=5,
                at=datetime.now(UTC),
                concurrency=concurrency,
            )
            wall = time.monotonic() - started
            failed = sum(not isinstance(r, EngineScrape) or bool(r.exposition.problems) for r in results)
            sockets = len(os.listdir("/proc/self/fd"))
            await asyncio.sleep(max(0.0, tick + interval - time.monotonic()))
            cpu_now = time.process_time()
            rows.append({"wall": wall, "cpu": cpu_now - cpu_at_tick, "failed": failed, "fds": sockets})
            cpu_at_tick = cpu_now
    return rows


async def serve(ports: int, plain: bytes) -> None:
    """Child mode: the exposition on `ports` loopback ports; prints the ports, stops when stdin closes."""
    compressed = gzip.compress(plain, compresslevel=6)

    async def metrics(request: web.Request) -> web.Response:
        if "gzip" in request.headers.get("Accept-Encoding", ""):
            return web.Response(body=compressed, headers={"Content-Encoding": "gzip", "Content-Type": "text/plain"})
        return web.Response(body=plain, headers={"Content-Type": "text/plain"})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    for _ in range(ports):
        await web.TCPSite(runner, "127.0.0.1", 0, backlog=1024).start()
    print(json.dumps([address[1] for address in runner.addresses]), flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)
    await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", nargs="?", default="bench", choices=("bench", "serve"))
    parser.add_argument("--endpoints", type=int, default=1000)
    parser.add_argument("--interval", type=float, default=10.0)
    parser.add_argument("--cycles", type=int, default=6)
    parser.add_argument("--servers", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--ports", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--body", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode == "serve":
        asyncio.run(serve(args.ports, args.body.read_bytes()))
        return

    body = asyncio.run(realistic_exposition())
    text = body.decode()
    kept = sum(len(series) for series in parse_exposition(text, ENGINE_FAMILIES).samples.values())
    full_ms = cpu_ms_per_parse(full_parse, text)
    ours_ms = cpu_ms_per_parse(ours, text)
    ratio = full_ms / ours_ms
    print(
        f"## (a) Parse one vLLM exposition ({len(body) / 1024:.0f} KiB, {text.count(chr(10))} lines, "
        f"gzip {len(gzip.compress(body)) / 1024:.1f} KiB; {kept} samples of {len(ENGINE_FAMILIES)} families kept)\n"
    )
    print("| parser | CPU ms per exposition |")
    print("|---|---:|")
    print(f"| prometheus_client text_string_to_metric_families (full) | {full_ms:.3f} |")
    print(f"| specpilot parse_exposition (prefix-filtered) | {ours_ms:.3f} |")
    print(f"| ratio | {ratio:.0f}x (target >= {TARGET_RATIO:.0f}x: {'met' if ratio >= TARGET_RATIO else 'MISSED'}) |\n")

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "metrics.txt"
        path.write_bytes(body)
        processes, ports = start_servers(path, args.endpoints, args.servers)
        try:
            rows = asyncio.run(fleet(ports, interval=args.interval, cycles=args.cycles, concurrency=args.concurrency))
        finally:
            for process in processes:
                assert process.stdin is not None
                process.stdin.close()
            for process in processes:
                process.wait(timeout=30)

    print(
        f"## (b) {len(ports)} endpoints scraped every {args.interval:g} s, gzip, keep-alive, "
        f"concurrency {args.concurrency} ({os.cpu_count()} CPUs here)\n"
    )
    print("| cycle | scrape wall s | CPU s per cycle | cores | failed | open fds |")
    print("|---:|---:|---:|---:|---:|---:|")
    for i, row in enumerate(rows, 1):
        cores = row["cpu"] / args.interval
        note = " (connects)" if i == 1 else ""
        cells = (f"{row['wall']:.2f}", f"{row['cpu']:.3f}", f"{cores:.3f}", f"{row['failed']:.0f}", f"{row['fds']:.0f}")
        print(f"| {i}{note} | {' | '.join(cells)} |")
    steady = [row["cpu"] for row in rows[1:]] or [rows[0]["cpu"]]
    cores = statistics.mean(steady) / args.interval
    verdict = "met" if cores <= TARGET_CORES else "MISSED"
    print(
        f"| steady mean | {statistics.mean(row['wall'] for row in rows[1:] or rows):.2f} | "
        f"{statistics.mean(steady):.3f} | {cores:.3f} | | |\n"
    )
    full_cores = len(ports) * full_ms / 1e3 / args.interval
    print(
        f"- steady CPU: {cores:.3f} cores (target <= {TARGET_CORES}: {verdict}; {TARGET_CORES / cores:.1f}x headroom)"
    )
    print(
        f"- of which parsing, from (a): {len(ports) * ours_ms / 1e3 / args.interval:.3f} cores; "
        f"prometheus_client's full parse alone would be {full_cores:.2f} cores"
    )


if __name__ == "__main__":
    main()
