"""What the scope router adds to a streamed request, next to its peers, in one run.

    .venv/bin/python bench/router.py [--concurrency 1,16,64,256] [--seconds 6] [--rounds 3]
                                     [--peers nginx,go,litellm,aiohttp,protocols]

Everything runs on loopback: one mock vLLM (the upstream) and, each pinned to the same single core
(``--proxy-cpu``), the router (static routes, every request to the baseline arm) and its peers:

- ``nginx``: ``proxy_pass`` with ``proxy_buffering off`` and a keep-alive upstream;
- ``go``: ``httputil.ReverseProxy`` flushing every write, built from ``bench/reverseproxy.go`` with
  the installed Go toolchain into ``~/.cache/specpilot/bench``;
- ``litellm``: the LiteLLM proxy, one worker, from its own virtualenv that this script creates
  under ``~/.cache/specpilot/bench-litellm`` (a few minutes, once);
- ``aiohttp``: ``bench/passthrough.py``, a bare aiohttp server + client relay;
- ``protocols``: ``bench/protocol_relay.py``, the router's own design (asyncio Protocols, httptools,
  uvloop) relaying bytes with none of the router's work: what CPython costs for the events alone;
- ``router-ref`` with ``--router-ref DIR``: the router from another source tree, for before and after
  (``git archive REF operator | tar -x -C /tmp/ref``, then ``--router-ref /tmp/ref/operator``).

A peer whose binary is missing (and cannot be built) is left out, with a note. The mock and this
load client share the other cores (``--load-cpus``). For each concurrency level, closed-loop
clients stream chat completions for ``--seconds`` per mode, ``--rounds`` times with the mode order
rotated, so drift hits every mode alike. CPU per request is the proxy's user + system time from
``/proc`` (its whole process group) over the requests it served. Added latency is a proxy's
quantile minus the direct quantile, with a 95% bootstrap interval in brackets; the ``direct-again``
mode (a second direct run) shows the noise floor of that difference. Ratios between the router and
its peers follow the table. Results go to ``bench/results/router-<time>.json`` (raw samples
included) and Markdown to stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

from specpilot.loadgen import summary

ROOT = Path(__file__).resolve().parents[1]
SPECPILOT = str(Path(sys.executable).with_name("specpilot"))
CACHE = Path.home() / ".cache" / "specpilot"
GO_PROXY = CACHE / "bench" / "reverseproxy"
LITELLM_VENV = CACHE / "bench-litellm"
PEERS = ("nginx", "go", "litellm", "aiohttp", "protocols")
STEP_S = 0.020  # the mock's default engine step (model seconds)
BOOTSTRAP = 200
CLOCK_TICK = os.sysconf("SC_CLK_TCK")
CONTENT = re.compile(rb'"content": ?"[^"]')  # a chunk with output (the role chunk's content is "")
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
LITELLM_CONF = """
model_list:
  - model_name: bench
    litellm_params:
      model: hosted_vllm/bench
      api_base: http://127.0.0.1:{upstream}/v1
      api_key: none
litellm_settings:
  drop_params: true
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_http(url: str, within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while True:
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@contextmanager
def process(argv: list[str], log: Path, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """Run `argv` for the block's duration, output to `log`; stop it (and its group) afterwards."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env, cwd=log.parent
        )
    try:
        yield proc
    finally:
        with_group(proc, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with_group(proc, signal.SIGKILL)
            proc.wait()


def with_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)  # its own session: the group is this process and its children only


def pinned(cpus: str, argv: list[str]) -> list[str]:
    return ["taskset", "-c", cpus, *argv] if cpus and shutil.which("taskset") else argv


def cpu_seconds(group: int) -> float:
    """User + system CPU seconds of every live process in process group `group`, from /proc."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == group:  # pgrp; utime and stime are fields 14 and 15 of stat(5)
            total += int(fields[11]) + int(fields[12])
    return total / CLOCK_TICK


def go_proxy() -> Path | None:
    """The Go peer, built from bench/reverseproxy.go when it is missing or older than its source."""
    source = ROOT / "bench" / "reverseproxy.go"
    if GO_PROXY.exists() and GO_PROXY.stat().st_mtime >= source.stat().st_mtime:
        return GO_PROXY
    go = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None)
    if go is None:
        return None
    GO_PROXY.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([go, "build", "-o", str(GO_PROXY), str(source)], check=True, cwd=ROOT)
    return GO_PROXY


def litellm() -> Path | None:
    """The LiteLLM proxy's entry point, installed into its own virtualenv on first use."""
    entry = LITELLM_VENV / "bin" / "litellm"
    if not entry.exists():
        print(f"installing LiteLLM into {LITELLM_VENV} (once; a few minutes)", file=sys.stderr)
        try:
            subprocess.run([sys.executable, "-m", "venv", str(LITELLM_VENV)], check=True)
            pip = str(LITELLM_VENV / "bin" / "pip")
            subprocess.run([pip, "install", "-q", "litellm[proxy]"], check=True)
        except subprocess.CalledProcessError as exc:
            print(f"LiteLLM could not be installed ({exc}); left out", file=sys.stderr)
            return None
    return entry


@dataclass
class Run:
    """Samples of one mode at one concurrency, pooled over rounds."""

    ttft: list[float] = field(default_factory=list)
    e2e: list[float] = field(default_factory=list)
    chunks: int = 0
    seconds: float = 0.0
    errors: int = 0
    served: int = 0  # every answered request, warm-up included (CPU is counted over the same span)
    cpu: float = 0.0


def quantile(values: list[float], q: float) -> float:
    """The q-quantile of unsorted values; NaN (an empty table cell) when there are none."""
    return summary.quantile(sorted(values), q) if values else float("nan")


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
                if ttft is None and CONTENT.search(data):
                    ttft = time.perf_counter() - started
                chunks += data.count(b"\n\n")
    except aiohttp.ClientError:
        run.errors += record
        return
    run.served += 1
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
    if not run or not direct:
        return float("nan"), float("nan"), float("nan")
    point = quantile(run, q) - quantile(direct, q)
    draws = sorted(
        quantile(rng.choices(run, k=len(run)), q) - quantile(rng.choices(direct, k=len(direct)), q)
        for _ in range(BOOTSTRAP)
    )
    return point * 1e3, draws[int(0.025 * BOOTSTRAP)] * 1e3, draws[int(0.975 * BOOTSTRAP) - 1] * 1e3


ADDED = {
    "added_ttft_p50_ms": ("ttft", 0.5),
    "added_ttft_p99_ms": ("ttft", 0.99),
    "added_e2e_p50_ms": ("e2e", 0.5),
    "added_e2e_p99_ms": ("e2e", 0.99),
}


def summarise(results: dict[int, dict[str, Run]], proxies: set[str]) -> list[dict[str, Any]]:
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
                "cpu_ms_per_request": run.cpu / run.served * 1e3 if mode in proxies and run.served else None,
                "ttft_p50_ms": quantile(run.ttft, 0.5) * 1e3,
                "e2e_p50_ms": quantile(run.e2e, 0.5) * 1e3,
                "chunks_per_request": run.chunks / len(run.ttft) if run.ttft else 0.0,
            }
            if mode != "direct":
                for key, (what, q) in ADDED.items():
                    row[key] = added(getattr(run, what), getattr(direct, what), q, rng)
            rows.append(row)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| streams | mode | requests | CPU ms/request | TTFT p50 ms | added TTFT p50 ms | added TTFT p99 ms "
        "| added e2e p50 ms | added e2e p99 ms | chunks/request |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def cell(value: tuple[float, float, float]) -> str:
        return f"{value[0]:+.2f} [{value[1]:+.2f}, {value[2]:+.2f}]"

    for r in rows:
        extra = " | ".join(cell(r[k]) if k in r else "-" for k in ADDED)
        cpu = "-" if r["cpu_ms_per_request"] is None else f"{r['cpu_ms_per_request']:.2f}"
        lines.append(
            f"| {r['concurrency']} | {r['mode']} | {r['requests']} | {cpu} | {r['ttft_p50_ms']:.2f} | {extra} "
            f"| {r['chunks_per_request']:.0f} |"
        )
    return "\n".join(lines)


def ratios(rows: list[dict[str, Any]]) -> tuple[str, list[str]]:
    """The router against each peer per level, and the targets checked on this run: at most 1.7x the
    CPU per request of the protocols floor (the router's design with none of its work), and at least
    10x cheaper than LiteLLM. nginx is shown beside them; its cost is out of CPython's reach."""
    by = {(r["concurrency"], r["mode"]): r for r in rows}
    levels = sorted({r["concurrency"] for r in rows})
    peers = [m for m in ("router-ref", *PEERS) if any((c, m) in by for c in levels)]
    lines = [
        "| streams | peer | peer CPU / router CPU | router added TTFT p50 - peer's, ms |",
        "|---:|---|---:|---:|",
    ]
    for c in levels:
        router = by.get((c, "router"))
        for peer in peers:
            other = by.get((c, peer))
            if router is None or other is None or not router["cpu_ms_per_request"] or not other["cpu_ms_per_request"]:
                continue
            lines.append(
                f"| {c} | {peer} | {other['cpu_ms_per_request'] / router['cpu_ms_per_request']:.2f} "
                f"| {router['added_ttft_p50_ms'][0] - other['added_ttft_p50_ms'][0]:+.2f} |"
            )
    checks: list[str] = []
    for c in levels:
        router, floor, lite = by.get((c, "router")), by.get((c, "protocols")), by.get((c, "litellm"))
        if router is None or not router["cpu_ms_per_request"]:
            continue
        if floor is not None and floor["cpu_ms_per_request"]:
            ratio = router["cpu_ms_per_request"] / floor["cpu_ms_per_request"]
            checks.append(f"{c} streams: router CPU/request = {ratio:.2f} x the protocols floor's (target <= 1.7): "
                          + ("met" if ratio <= 1.7 else "NOT met"))  # fmt: skip
        if lite is not None and lite["cpu_ms_per_request"]:
            times = lite["cpu_ms_per_request"] / router["cpu_ms_per_request"]
            checks.append(f"{c} streams: LiteLLM CPU/request = {times:.1f} x the router's (target >= 10): "
                          + ("met" if times >= 10 else "NOT met"))  # fmt: skip
    return "\n".join(lines), checks


@dataclass
class Proxy:
    """A proxy under test: how to start it and where to send requests."""

    name: str
    argv: list[str]
    port: int
    ready: str  # a URL that answers once it serves
    env: dict[str, str] | None = None


def proxies(args: argparse.Namespace, tmp: Path, mock: int, wanted: set[str]) -> list[Proxy]:
    """The router and each wanted peer that is there (or can be built), with a note for the others."""
    port = free_port()
    admin = free_port()
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
    router = [SPECPILOT, "router", "--pilot", "bench", "--listen", f"127.0.0.1:{port}",
              "--admin-listen", f"127.0.0.1:{admin}", "--static-routes", str(tmp / "routes.json"),
              "--static-endpoints", f"baseline=127.0.0.1:{mock}", "--max-table-age", "0",
              "--max-samples", "200000", "--log-level", "WARNING"]  # fmt: skip
    found = [Proxy("router", router, port, f"http://127.0.0.1:{admin}/readyz")]
    if args.router_ref is not None:  # the same router flags, run from another source tree
        port, admin = free_port(), free_port()
        argv = [sys.executable, "-m", "specpilot.cli", *router[1:]]
        argv[argv.index("--listen") + 1], argv[argv.index("--admin-listen") + 1] = (
            f"127.0.0.1:{port}",
            f"127.0.0.1:{admin}",
        )
        env = {**os.environ, "PYTHONPATH": str(args.router_ref.resolve())}
        found.append(Proxy("router-ref", argv, port, f"http://127.0.0.1:{admin}/readyz", env))
    if "nginx" in wanted:
        if shutil.which("nginx"):
            port = free_port()
            (tmp / "nginx.conf").write_text(NGINX_CONF.format(tmp=tmp, upstream=mock, port=port))
            argv = ["nginx", "-p", str(tmp), "-c", str(tmp / "nginx.conf")]
            found.append(Proxy("nginx", argv, port, f"http://127.0.0.1:{port}/v1/models"))
        else:
            print("nginx left out: not installed (apt-get install -y nginx)", file=sys.stderr)
    if "go" in wanted:
        binary = go_proxy()
        if binary is not None:
            port = free_port()
            argv = [str(binary), f"127.0.0.1:{port}", f"http://127.0.0.1:{mock}"]
            env = {**os.environ, "GOMAXPROCS": "1"}
            found.append(Proxy("go", argv, port, f"http://127.0.0.1:{port}/v1/models", env))
        else:
            print("go left out: no Go toolchain to build bench/reverseproxy.go", file=sys.stderr)
    if "litellm" in wanted:
        entry = litellm()
        if entry is not None:
            port = free_port()
            (tmp / "litellm.yaml").write_text(LITELLM_CONF.format(upstream=mock))
            argv = [str(entry), "--config", str(tmp / "litellm.yaml"), "--host", "127.0.0.1", "--port", str(port),
                    "--num_workers", "1"]  # fmt: skip
            env = {**os.environ, "LITELLM_LOG": "ERROR", "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true"}
            found.append(Proxy("litellm", argv, port, f"http://127.0.0.1:{port}/health/liveliness", env))
    if "aiohttp" in wanted:
        port = free_port()
        argv = [sys.executable, str(ROOT / "bench" / "passthrough.py"), str(port), f"127.0.0.1:{mock}"]
        found.append(Proxy("aiohttp", argv, port, f"http://127.0.0.1:{port}/v1/models"))
    if "protocols" in wanted:
        port = free_port()
        argv = [sys.executable, str(ROOT / "bench" / "protocol_relay.py"), str(port), f"127.0.0.1:{mock}"]
        found.append(Proxy("protocols", argv, port, f"http://127.0.0.1:{port}/v1/models"))
    return found


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--concurrency", default="1,16,64,256", help="comma-separated stream counts")
    p.add_argument("--seconds", type=float, default=6.0, help="measured seconds per mode and round")
    p.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds before each measurement")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=32, help="output tokens per request")
    p.add_argument("--time-scale", type=float, default=0.25, help="the mock's --time-scale")
    p.add_argument("--peers", default=",".join(PEERS), help=f"which of {', '.join(PEERS)} to run beside the router")
    p.add_argument(
        "--router-ref",
        type=Path,
        default=None,
        help="also run the router from this source tree (its operator/ folder), as router-ref",
    )
    p.add_argument("--proxy-cpu", default="0", help="the one core every proxy is pinned to")
    p.add_argument("--load-cpus", default="1", help="cores for the mock vLLM and this load client")
    p.add_argument("--output", type=Path, default=None)
    args = p.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    wanted = {peer for peer in args.peers.split(",") if peer}
    if wanted - set(PEERS):
        p.error(f"--peers: unknown {', '.join(sorted(wanted - set(PEERS)))}")
    if args.load_cpus and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(c) for c in args.load_cpus.split(",")})
    mock_port = free_port()
    with tempfile.TemporaryDirectory(prefix="bench-router-") as tmp_name, ExitStack() as running:
        tmp = Path(tmp_name)
        mock = [SPECPILOT, "mock-vllm", "bench", "--host", "127.0.0.1", "--port", str(mock_port), "--time-scale",
                str(args.time_scale), "--max-num-seqs", "1024", "--disable-uvicorn-access-log"]  # fmt: skip
        running.enter_context(process(pinned(args.load_cpus, mock), tmp / "mock.log"))
        wait_http(f"http://127.0.0.1:{mock_port}/v1/models")
        under_test = proxies(args, tmp, mock_port, wanted)
        groups: dict[str, int] = {}
        for proxy in under_test:
            argv = pinned(args.proxy_cpu, proxy.argv)
            proc = running.enter_context(process(argv, tmp / f"{proxy.name}.log", proxy.env))
            groups[proxy.name] = proc.pid
        for proxy in under_test:
            wait_http(proxy.ready, within=180)
        direct = f"http://127.0.0.1:{mock_port}/v1/chat/completions"
        urls = {"direct": direct, **{x.name: f"http://127.0.0.1:{x.port}/v1/chat/completions" for x in under_test}}
        urls["direct-again"] = direct
        modes = list(urls)
        results: dict[int, dict[str, Run]] = {}
        for concurrency in levels:
            runs = results[concurrency] = {mode: Run() for mode in modes}
            spec = Load(concurrency, args.seconds, args.warmup, args.max_tokens, pause=2 * STEP_S * args.time_scale)
            for round_ in range(args.rounds):
                order = modes[round_ % len(modes) :] + modes[: round_ % len(modes)]
                for mode in order:
                    group = groups.get(mode)
                    before = cpu_seconds(group) if group else 0.0
                    asyncio.run(load(urls[mode], spec, runs[mode]))
                    if group:
                        runs[mode].cpu += cpu_seconds(group) - before
            print(f"{concurrency} streams done", file=sys.stderr)
    rows = summarise(results, set(groups))
    ratio_table, checks = ratios(rows)
    report = {
        "at": datetime.now(UTC).isoformat(),
        "settings": {k: str(v) for k, v in vars(args).items()},
        "cpus": os.cpu_count(),
        "modes": modes,
        "rows": rows,
        "checks": checks,
        "samples": {
            str(c): {mode: {"ttft": run.ttft, "e2e": run.e2e} for mode, run in runs.items()}
            for c, runs in results.items()
        },
    }
    output = args.output or ROOT / "bench" / "results" / f"router-{datetime.now(UTC):%Y%m%dT%H%M%S}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2))
    print(table(rows))
    print()
    print(ratio_table)
    print()
    print("\n".join(f"- {check}" for check in checks))
    print(f"\nraw results: {output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
