"""What the scope router adds to a streamed request, next to nginx and a bare aiohttp relay, in one run.

    .venv/bin/python bench/router.py [--concurrency 1,16,64,256] [--seconds 6] [--rounds 3]

Everything runs on loopback: one mock vLLM (the upstream), the router (static routes, every
request to the baseline arm), nginx (``proxy_buffering off``, keep-alive upstream) and
``bench/passthrough.py`` (aiohttp server and client with nothing else: the floor under the
router's own work), each proxy pinned to the same single core, while the mock and this load
client share the other cores. For each concurrency level, closed-loop clients stream chat
completions for ``--seconds`` per mode, ``--rounds`` times with the mode order rotated, so drift
hits every mode alike. Added latency is a proxy's quantile minus the direct quantile, with a 95%
bootstrap interval in brackets; the ``direct-again`` mode (a second direct run) shows the noise
floor of that difference. Results go to ``bench/results/router-<time>.json`` (raw TTFT and
end-to-end samples included) and a Markdown table to stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

from specpilot.loadgen import stats

ROOT = Path(__file__).resolve().parents[1]
SPECPILOT = str(Path(sys.executable).with_name("specpilot"))
MODES = ("direct", "router", "nginx", "aiohttp", "direct-again")
STEP_S = 0.020  # the mock's default engine step (model seconds)
BOOTSTRAP = 200
NGINX_CONF = """
daemon off;
master_process off;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    upstream mock {{ server 127.0.0.1:{upstream}; keepalive 1024; }}
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        location / {{
            proxy_pass http://mock;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 600s;
        }}
    }}
}}
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_http(url: str, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while True:
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@contextmanager
def process(argv: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Run `argv` for the block's duration, output to `log`; stop it (and only it) afterwards."""
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def pinned(cpus: str, argv: list[str]) -> list[str]:
    return ["taskset", "-c", cpus, *argv] if cpus and shutil.which("taskset") else argv


@dataclass
class Run:
    """Samples of one mode at one concurrency, pooled over rounds."""

    ttft: list[float] = field(default_factory=list)
    e2e: list[float] = field(default_factory=list)
    chunks: int = 0
    seconds: float = 0.0
    errors: int = 0


def quantile(values: list[float], q: float) -> float:
    """The q-quantile of unsorted values; NaN (an empty table cell) when there are none."""
    return stats.quantile(sorted(values), q) if values else float("nan")


async def stream_once(session: aiohttp.ClientSession, url: str, body: bytes, run: Run, record: bool) -> None:
    started = time.perf_counter()
    ttft: float | None = None
    chunks = 0
    try:
        async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as resp:
            if resp.status != 200:
                await resp.read()
                run.errors += record
                return
            while data := await resp.content.readany():
                if ttft is None and b'"content": "' in data.replace(b'"content": ""', b""):
                    ttft = time.perf_counter() - started
                chunks += data.count(b"\n\n")
    except aiohttp.ClientError:
        run.errors += record
        return
    if record and ttft is not None:
        run.ttft.append(ttft)
        run.e2e.append(time.perf_counter() - started)
        run.chunks += chunks


@dataclass(frozen=True)
class Load:
    """The closed-loop workload of one measurement."""

    concurrency: int
    seconds: float
    warmup: float
    max_tokens: int
    pause: float  # upper bound of the random pause before each request


async def load(url: str, spec: Load, run: Run) -> None:
    """`concurrency` closed-loop streams for `warmup` + `seconds`; only the last `seconds` count.

    Each request follows a random pause: the mock's engine steps on a fixed clock, and a loop that
    sends the next request the instant the last one ends would lock onto that clock, so a proxy's
    fraction of a millisecond would show up as whole engine steps of waiting.
    """
    concurrency, seconds, warmup, max_tokens = spec.concurrency, spec.seconds, spec.warmup, spec.max_tokens
    body = json.dumps(
        {
            "model": "bench",
            "messages": [{"role": "user", "content": "hello"}],
            "stream": True,
            "max_tokens": max_tokens,
            "ignore_eos": True,
        }
    ).encode()
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as session:
        start = time.perf_counter()
        measure_from, end = start + warmup, start + warmup + seconds

        async def worker() -> None:
            rng = random.Random()
            while time.perf_counter() < end:
                await asyncio.sleep(rng.uniform(0, spec.pause))
                await stream_once(session, url, body, run, record=time.perf_counter() >= measure_from)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        run.seconds += time.perf_counter() - measure_from


def added(run: list[float], direct: list[float], q: float, rng: random.Random) -> tuple[float, float, float]:
    """Quantile `q` of `run` minus that of `direct`, in ms, with a 95% bootstrap interval."""
    point = quantile(run, q) - quantile(direct, q)
    draws = sorted(
        quantile(rng.choices(run, k=len(run)), q) - quantile(rng.choices(direct, k=len(direct)), q)
        for _ in range(BOOTSTRAP)
    )
    return point * 1e3, draws[int(0.025 * BOOTSTRAP)] * 1e3, draws[int(0.975 * BOOTSTRAP) - 1] * 1e3


def summarise(results: dict[int, dict[str, Run]]) -> list[dict[str, Any]]:
    rng = random.Random(0)
    rows = []
    for concurrency, runs in results.items():
        direct = runs["direct"]
        for mode, run in runs.items():
            row: dict[str, Any] = {
                "concurrency": concurrency,
                "mode": mode,
                "requests": len(run.ttft),
                "errors": run.errors,
                "ttft_p50_ms": quantile(run.ttft, 0.5) * 1e3,
                "ttft_p99_ms": quantile(run.ttft, 0.99) * 1e3,
                "e2e_p99_ms": quantile(run.e2e, 0.99) * 1e3,
                "chunks_per_s": run.chunks / run.seconds if run.seconds else 0.0,
            }
            if mode != "direct":
                row["added_ttft_p50_ms"] = added(run.ttft, direct.ttft, 0.5, rng)
                row["added_ttft_p99_ms"] = added(run.ttft, direct.ttft, 0.99, rng)
                row["added_e2e_p99_ms"] = added(run.e2e, direct.e2e, 0.99, rng)
            rows.append(row)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| streams | mode | requests | TTFT p50 ms | added TTFT p50 ms | added TTFT p99 ms | added e2e p99 ms "
        "| chunks/s |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]

    def cell(value: tuple[float, float, float]) -> str:
        return f"{value[0]:+.2f} [{value[1]:+.2f}, {value[2]:+.2f}]"

    for r in rows:
        keys = ("added_ttft_p50_ms", "added_ttft_p99_ms", "added_e2e_p99_ms")
        extra = " | ".join(cell(r[k]) if k in r else "-" for k in keys)
        lines.append(
            f"| {r['concurrency']} | {r['mode']} | {r['requests']} | {r['ttft_p50_ms']:.2f} | {extra} "
            f"| {r['chunks_per_s']:.0f} |"
        )
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--concurrency", default="1,16,64,256", help="comma-separated stream counts")
    p.add_argument("--seconds", type=float, default=6.0, help="measured seconds per mode and round")
    p.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds before each measurement")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=32, help="output tokens per request")
    p.add_argument("--time-scale", type=float, default=0.25, help="the mock's --time-scale")
    p.add_argument("--proxy-cpu", default="0", help="the one core the router and nginx are pinned to")
    p.add_argument("--load-cpus", default="1", help="cores for the mock vLLM and this load client")
    p.add_argument("--output", type=Path, default=None)
    args = p.parse_args()
    if shutil.which("nginx") is None:
        print("nginx is needed (apt-get install -y nginx)", file=sys.stderr)
        return 2
    levels = [int(c) for c in args.concurrency.split(",")]
    if args.load_cpus and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(c) for c in args.load_cpus.split(",")})
    ports = {name: free_port() for name in ("mock", "router", "admin", "nginx", "aiohttp")}
    with tempfile.TemporaryDirectory(prefix="bench-router-") as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "routes.json").write_text(
            json.dumps(
                {
                    "pilot": "bench",
                    "generation": 1,
                    "updatedAt": datetime.now(UTC).isoformat(),
                    "defaultScope": "default",
                    "scopes": [{"name": "default", "weights": {"baseline": 100}}],
                }
            )
        )
        (tmp / "nginx.conf").write_text(NGINX_CONF.format(tmp=tmp, upstream=ports["mock"], port=ports["nginx"]))
        mock = [
            SPECPILOT,
            "mock-vllm",
            "bench",
            "--host",
            "127.0.0.1",
            "--port",
            str(ports["mock"]),
            "--time-scale",
            str(args.time_scale),
            "--max-num-seqs",
            "1024",
            "--disable-uvicorn-access-log",
        ]
        router = [
            SPECPILOT,
            "router",
            "--pilot",
            "bench",
            "--listen",
            f"127.0.0.1:{ports['router']}",
            "--admin-listen",
            f"127.0.0.1:{ports['admin']}",
            "--static-routes",
            str(tmp / "routes.json"),
            "--static-endpoints",
            f"baseline=127.0.0.1:{ports['mock']}",
            "--max-table-age",
            "0",
            "--max-samples",
            "200000",
            "--log-level",
            "WARNING",
        ]
        nginx = ["nginx", "-p", str(tmp), "-c", str(tmp / "nginx.conf")]
        floor = [sys.executable, str(ROOT / "bench" / "passthrough.py"), str(ports["aiohttp"])]
        floor.append(f"127.0.0.1:{ports['mock']}")
        with (
            process(pinned(args.load_cpus, mock), tmp / "mock.log"),
            process(pinned(args.proxy_cpu, router), tmp / "router.log"),
            process(pinned(args.proxy_cpu, nginx), tmp / "nginx.log"),
            process(pinned(args.proxy_cpu, floor), tmp / "aiohttp.log"),
        ):
            wait_http(f"http://127.0.0.1:{ports['mock']}/v1/models")
            wait_http(f"http://127.0.0.1:{ports['admin']}/readyz")
            wait_http(f"http://127.0.0.1:{ports['nginx']}/v1/models")
            wait_http(f"http://127.0.0.1:{ports['aiohttp']}/v1/models")
            urls = {
                "direct": f"http://127.0.0.1:{ports['mock']}/v1/chat/completions",
                "router": f"http://127.0.0.1:{ports['router']}/v1/chat/completions",
                "nginx": f"http://127.0.0.1:{ports['nginx']}/v1/chat/completions",
                "aiohttp": f"http://127.0.0.1:{ports['aiohttp']}/v1/chat/completions",
                "direct-again": f"http://127.0.0.1:{ports['mock']}/v1/chat/completions",
            }
            results: dict[int, dict[str, Run]] = {}
            for concurrency in levels:
                runs = results[concurrency] = {mode: Run() for mode in MODES}
                spec = Load(concurrency, args.seconds, args.warmup, args.max_tokens, pause=2 * STEP_S * args.time_scale)
                for round_ in range(args.rounds):
                    order = MODES[round_ % len(MODES) :] + MODES[: round_ % len(MODES)]
                    for mode in order:
                        asyncio.run(load(urls[mode], spec, runs[mode]))
                print(f"{concurrency} streams done", file=sys.stderr)
    rows = summarise(results)
    report = {
        "at": datetime.now(UTC).isoformat(),
        "settings": {k: str(v) for k, v in vars(args).items()},
        "cpus": os.cpu_count(),
        "rows": rows,
        "samples": {
            str(c): {mode: {"ttft": run.ttft, "e2e": run.e2e} for mode, run in runs.items()}
            for c, runs in results.items()
        },
    }
    output = args.output or ROOT / "bench" / "results" / f"router-{datetime.now(UTC):%Y%m%dT%H%M%S}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2))
    print(table(rows))
    print(f"\nraw results: {output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
