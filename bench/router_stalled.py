"""How much memory the router holds for clients that stop reading a stream: the backpressure bound.

    .venv/bin/python bench/router_stalled.py [--clients 32] [--hold 10] [--stream-mb 64]

An upstream in this process streams SSE chat chunks (4 KiB each) as fast as its socket takes them,
up to ``--stream-mb`` per request. The router (its own process, pinned to ``--proxy-cpu``) relays
them to ``--clients`` clients that read the response head and then nothing for ``--hold`` seconds.
The router's resident memory (``VmRSS`` from /proc) is sampled throughout; the figure is its growth
per stalled stream, next to what the upstream managed to write per stream (the rest of the stream
waits upstream, because the router stopped reading) and what one reading client got in the same
time (what the router would have had to hold without backpressure). Markdown to stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from router import SPECPILOT, free_port, pinned, process, wait_http  # the sibling benchmark

CHUNK = {"id": "x", "object": "chat.completion.chunk",
         "choices": [{"index": 0, "delta": {"content": "x" * 4000}, "finish_reason": None}]}  # fmt: skip
EVENT = b"data: " + json.dumps(CHUNK).encode() + b"\n\n"
FRAME = b"%x\r\n%s\r\n" % (len(EVENT), EVENT)
SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


class Flood:
    """An upstream that streams as fast as each connection takes it; counts what it wrote."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.written: list[int] = []
        self.port = 0

    async def start(self) -> asyncio.Server:
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = int(server.sockets[0].getsockname()[1])
        return server

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if b"/v1/models" in head.split(b"\r\n", 1)[0]:
                    body = b'{"object": "list", "data": []}'
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
                    continue
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                writer.write(SSE_HEAD)
                index = len(self.written)
                self.written.append(0)
                while self.written[index] < self.limit:
                    writer.write(FRAME)
                    self.written[index] += len(FRAME)
                    await writer.drain()
                writer.write(b"0\r\n\r\n")
        writer.close()


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


REQUEST = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}).encode()
HEAD = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
        % len(REQUEST))  # fmt: skip


async def stalled_client(port: int) -> socket.socket:
    """A client that sends one stream request, reads the head, then stops reading."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, ("127.0.0.1", port))
    await loop.sock_sendall(sock, HEAD + REQUEST)
    head = b""
    while b"\r\n\r\n" not in head:
        head += await loop.sock_recv(sock, 1)
    return sock


async def reading_client(port: int, seconds: float) -> int:
    """Bytes one client that reads everything gets in `seconds`."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(HEAD + REQUEST)
    got, end = 0, time.monotonic() + seconds
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            while time.monotonic() < end and (data := await reader.read(1 << 20)):
                got += len(data)
    writer.close()
    return got


async def measure(args: argparse.Namespace, tmp: Path) -> dict[str, float]:
    flood = Flood(args.stream_mb << 20)
    server = await flood.start()
    port, admin = free_port(), free_port()
    routes = {"pilot": "bench", "generation": 1, "updatedAt": datetime.now(UTC).isoformat(),
              "scopes": [{"name": "default", "weights": {"baseline": 100}}]}  # fmt: skip
    (tmp / "routes.json").write_text(json.dumps(routes))
    router = [SPECPILOT, "router", "--pilot", "bench", "--listen", f"127.0.0.1:{port}", "--admin-listen",
              f"127.0.0.1:{admin}", "--static-routes", str(tmp / "routes.json"), "--static-endpoints",
              f"baseline=127.0.0.1:{flood.port}", "--max-table-age", "0", "--log-level", "WARNING"]  # fmt: skip
    with process(pinned(args.proxy_cpu, router), tmp / "router.log") as proc:
        await asyncio.to_thread(wait_http, f"http://127.0.0.1:{admin}/readyz")
        reading = await reading_client(port, 1.0)  # warm the router up, and see what one reader gets
        await asyncio.sleep(1.0)
        idle = rss_bytes(proc.pid)
        flood.written.clear()
        socks = [await stalled_client(port) for _ in range(args.clients)]
        peak, samples, end = idle, [], time.monotonic() + args.hold
        while time.monotonic() < end:
            await asyncio.sleep(0.25)
            rss = rss_bytes(proc.pid)
            samples.append(rss)
            peak = max(peak, rss)
        written = sorted(flood.written)
        for sock in socks:
            sock.close()
    await asyncio.sleep(0.5)  # the router is gone: the upstream's writers see their connections close
    server.close()
    return {
        "idle_rss_mb": idle / 2**20,
        "peak_rss_mb": peak / 2**20,
        "last_second_rss_mb": max(samples[-4:]) / 2**20,
        "growth_per_stream_kb": (peak - idle) / args.clients / 1024,
        "upstream_written_per_stream_median_kb": written[len(written) // 2] / 1024,
        "upstream_written_per_stream_max_kb": written[-1] / 1024,
        "one_reader_mb_per_s": reading / 2**20,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clients", type=int, default=32, help="clients that stop reading")
    p.add_argument("--hold", type=float, default=10.0, help="seconds the clients stay stalled")
    p.add_argument("--stream-mb", type=int, default=64, help="the most one stream sends")
    p.add_argument("--proxy-cpu", default="0", help="the core the router is pinned to")
    p.add_argument("--load-cpus", default="1", help="cores for this process (upstream and clients)")
    args = p.parse_args()
    if args.load_cpus and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(c) for c in args.load_cpus.split(",")})
    with tempfile.TemporaryDirectory(prefix="bench-stalled-") as tmp:
        figures = asyncio.run(measure(args, Path(tmp)))
    print(f"| {args.clients} clients stalled for {args.hold:g} s | value |\n|---|---:|")
    for key, value in figures.items():
        print(f"| {key} | {value:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
