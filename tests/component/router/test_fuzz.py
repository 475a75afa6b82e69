"""Malformed requests and malformed upstream responses: no crash, no leaked connection or count.

Seeded and bounded: a few hundred cases, each with a short timeout, all on loopback.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import socket
import struct
from collections.abc import Callable

import aiohttp
import pytest
from tests.component.router.harness import Harness, HarnessFactory, _established

from specpilot.router.core.choice import Endpoint
from specpilot.wire.names import Arm

SEED = 20261129
CASES = 150
# Answers a malformed or odd request may get: the upstream's own, or a refusal that names what is wrong.
ANSWERS = {b"HTTP/1.1 %d" % status for status in (200, 400, 404, 408, 413, 414, 431, 501, 502, 503, 504, 505)}

Payload = Callable[[random.Random], bytes]


def _junk(rng: random.Random, size: int = 200) -> bytes:
    return bytes(rng.randrange(256) for _ in range(rng.randrange(1, size)))


def _json_junk(rng: random.Random, depth: int = 0) -> object:
    kinds = ["int", "str", "null", "bool", "float"] + (["list", "dict"] if depth < 3 else [])
    kind = rng.choice(kinds)
    if kind == "list":
        return [_json_junk(rng, depth + 1) for _ in range(rng.randrange(4))]
    if kind == "dict":
        keys = ["model", "stream", "stream_options", "messages", "include_usage", "prompt", "max_tokens", "x"]
        return {rng.choice(keys): _json_junk(rng, depth + 1) for _ in range(rng.randrange(5))}
    return {"int": rng.randrange(-5, 5), "str": rng.choice(["", "code-1", "\u00e9", "\x00"]), "null": None,
            "bool": rng.random() < 0.5, "float": rng.random() * 1e308}[kind]  # fmt: skip


def _request(body: bytes, *, path: str = "/v1/chat/completions", headers: str = "", length: int | None = None) -> bytes:
    size = len(body) if length is None else length
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {size}\r\n{headers}\r\n"
    ).encode() + body


RAW: list[Payload] = [
    _junk,
    lambda rng: b"GET /v1/models HTTP/1.1\r\n" + _junk(rng) + b"\r\n\r\n",
    lambda rng: _request(json.dumps(_json_junk(rng)).encode()),
    lambda rng: _request(json.dumps({"model": "code-1", "stream": True, "stream_options": _json_junk(rng)}).encode()),
    lambda rng: _request(b'{"model": "code-1", "stream": true}', length=rng.randrange(40, 400)),  # truncated body
    lambda rng: _request(b'{"model": "code-1"}' + _junk(rng), length=19),  # pipelined junk after the body
    lambda rng: _request(_junk(rng)),
    lambda rng: _request('{"stream": true}'.encode("utf-16")),
    lambda rng: (
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        + rng.choice([b"zz\r\n", b"5\r\n{}\r\n", b"ffffffff\r\n", b"3\r\n{}}\r\n0\r\n\r\n"])
    ),
    lambda rng: (
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * rng.randrange(5000, 20000) + b"\r\n\r\n"
    ),
    lambda rng: b"P\x00ST /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n",
    lambda rng: b"BREW /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
    lambda rng: b"GET /v1/../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n",
    lambda rng: b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n" * rng.randrange(1, 5),  # pipelined
    lambda rng: _request(b"{}", headers="Content-Length: 5\r\n"),  # duplicate length
    lambda rng: b"GET /v1/models HTTP/1.0\r\n\r\n",
    lambda rng: b"\r\n\r\n\r\n",
]


async def _raw_exchange(host: str, port: int, payload: bytes, *, half_close: bool) -> bytes:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(payload)
        await writer.drain()
        if half_close:
            writer.write_eof()
        async with asyncio.timeout(1):
            return await reader.read(65536)
    except (TimeoutError, ConnectionError):
        return b""
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


class JunkUpstream:
    """Answers every connection with a malformed or broken HTTP response."""

    RESPONSES: list[Payload] = [
        _junk,
        lambda rng: b"HTTP/1.1 200 OK\r\n" + _junk(rng),
        lambda rng: b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"usage":',
        lambda rng: b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        lambda rng: (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 5000\r\n\r\n"
            + b"data: "
            + _junk(rng)
            + b"\n\n"
            + b'data: {"choices": [{"text": 1}]}\n\n'
        ),
        lambda rng: (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
            + b"data: "
            + json.dumps({"choices": [{"delta": {"content": "x"}}], "usage": _json_junk(rng)}).encode()
            + b"\n\n"
            + _junk(rng, 3000)
        ),
        lambda rng: b"HTTP/1.1 999 Weird\r\nContent-Length: 0\r\n\r\n",
        lambda rng: b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        lambda rng: b"",  # close at once
        lambda rng: b"RESET",  # reset the connection
    ]

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self.open = 0
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.open += 1
        try:
            with contextlib.suppress(TimeoutError, ConnectionError):
                async with asyncio.timeout(2):
                    await reader.readuntil(b"\r\n\r\n")
            response = self._rng.choice(self.RESPONSES)(self._rng)
            if response == b"RESET":
                sock = writer.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            else:
                writer.write(response)
                with contextlib.suppress(ConnectionError):
                    await writer.drain()
        finally:
            writer.close()
            self.open -= 1


async def _assert_nothing_leaked(h: Harness) -> None:
    await h.client.close()
    port = h.router.addresses[0][1]
    await h.wait_for(lambda: _established(port) == 0, within=10)
    assert h.router.state.outstanding == {}
    assert h.baseline.active == 0 and h.speculative.active == 0
    registry = h.router.metrics.registry
    for scope in ("code", "default"):
        for arm in Arm:
            assert registry.get_sample_value("specpilot_router_in_flight", {"scope": scope, "arm": arm}) in (None, 0)


@pytest.fixture
def no_errors_logged(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.WARNING)
    return caplog


def _unexpected(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.ERROR or "never retrieved" in r.getMessage() or "Unclosed" in r.getMessage()
    ]


async def test_malformed_requests_get_clear_answers_and_leave_nothing_behind(
    make_router: HarnessFactory, no_errors_logged: pytest.LogCaptureFixture
) -> None:
    h = await make_router("--max-body-bytes", "4096", "--max-header-bytes", "4096", "--request-timeout", "2")
    host, port = h.router.addresses[0]
    rng = random.Random(SEED)
    statuses: list[bytes] = []
    for _ in range(CASES):
        answer = await _raw_exchange(host, port, rng.choice(RAW)(rng), half_close=rng.random() < 0.7)
        statuses.append(answer[:12])
        assert b" 500 " not in answer[:13], answer[:300]
        assert answer == b"" or answer[:12] in ANSWERS, answer[:300]
    assert any(s.startswith(b"HTTP/1.1 400") for s in statuses)
    assert any(s.startswith(b"HTTP/1.1 200") for s in statuses)
    async with await h.chat(team="code") as resp:  # still serving
        assert resp.status == 200 and (await h.read_sse(resp))[-1] == b"[DONE]"
    await _assert_nothing_leaked(h)
    assert _unexpected(no_errors_logged) == []


async def test_malformed_upstream_responses_become_errors_not_crashes(
    make_router: HarnessFactory, no_errors_logged: pytest.LogCaptureFixture
) -> None:
    rng = random.Random(SEED)
    junk = JunkUpstream(rng)
    await junk.start()
    try:
        h = await make_router("--request-timeout", "2")
        h.router.state.set_endpoints(
            {Arm.BASELINE: (Endpoint("127.0.0.1", junk.port),), Arm.SPECULATIVE: (Endpoint("127.0.0.1", junk.port),)}
        )

        async def one(i: int) -> int:
            try:
                if i % 7 == 0:
                    async with h.client.get(f"{h.url}/v1/models") as resp:
                        await resp.read()
                        return resp.status
                async with await h.chat(team="code", stream=i % 2 == 0) as resp:
                    await resp.read()
                    return resp.status
            except aiohttp.ClientPayloadError:  # a cut body reaches the client as a cut body
                return -1

        for batch in range(0, CASES, 10):
            statuses = await asyncio.gather(*(one(i) for i in range(batch, batch + 10)))
            # what upstream sent when it was a response (all 200s here), else the router's own 502 or 504
            assert set(statuses) <= {-1, 200, 502, 504}, statuses
        page = h.router.samples.since(0, 1000)
        assert page.samples and {s.outcome.value for s in page.samples} <= {"ok", "upstream_error", "timeout",
                                                                            "client_error", "rejected"}  # fmt: skip
        await h.wait_for(lambda: junk.open == 0, within=10)
        h.router.state.set_endpoints({Arm.BASELINE: (Endpoint("127.0.0.1", h.baseline.port),)})
        async with await h.chat(team="code") as resp:
            assert resp.status == 200
            await resp.read()
        await _assert_nothing_leaked(h)
    finally:
        await junk.stop()
    assert _unexpected(no_errors_logged) == []
