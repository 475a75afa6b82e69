"""HTTP/1.1 on the traffic port, byte by byte: framing, Expect, limits, slow and stalled clients, resets."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import socket
import struct
import termios
from collections.abc import AsyncIterator

import aiohttp
import pytest
from tests.component.router.harness import TEAM_HEADER, Harness, HarnessFactory, _established

from specpilot.router.core.choice import Endpoint
from specpilot.router.server import NEW_CONNECTION_GRACE, WRITE_HIGH_WATER, Limits, Server
from specpilot.testing.waiting import eventually
from specpilot.wire.names import Arm

CHAT = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": False}).encode()


def _head(*lines: str, path: str = "/v1/chat/completions", method: str = "POST") -> bytes:
    return (f"{method} {path} HTTP/1.1\r\nHost: x\r\n{TEAM_HEADER}: code\r\n" + "".join(f"{line}\r\n" for line in lines)
            + "\r\n").encode()  # fmt: skip


@contextlib.asynccontextmanager
async def _connection(h: Harness) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    host, port = h.router.addresses[0]
    reader, writer = await asyncio.open_connection(host, port)
    try:
        yield reader, writer
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def _exchange(h: Harness, payload: bytes) -> bytes:
    """Send `payload` and read until the router closes the connection."""
    async with _connection(h) as (reader, writer):
        writer.write(payload)
        async with asyncio.timeout(5):
            return await reader.read(-1)


async def test_a_chunked_request_body_is_read_whole_and_sent_on_with_its_length(make_router: HarnessFactory) -> None:
    h = await make_router()
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(CHAT[i : i + 7]), CHAT[i : i + 7]) for i in range(0, len(CHAT), 7))
    answer = await _exchange(h, _head("Transfer-Encoding: chunked", "Connection: close") + chunked + b"0\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200 ")
    received = h.speculative.received[-1]
    assert received.body == CHAT
    assert received.headers["Content-Length"] == str(len(CHAT)) and "Transfer-Encoding" not in received.headers


async def test_expect_100_continue_is_answered_before_the_body(make_router: HarnessFactory) -> None:
    h = await make_router()
    async with _connection(h) as (reader, writer):
        writer.write(_head("Expect: 100-continue", f"Content-Length: {len(CHAT)}", "Connection: close"))
        async with asyncio.timeout(5):
            assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
            writer.write(CHAT)
            answer = await reader.read(-1)
    assert answer.startswith(b"HTTP/1.1 200 ") and b'"usage"' in answer
    assert "Expect" not in h.speculative.received[-1].headers  # the router answered it; upstream gets the body


@pytest.mark.parametrize(
    ("expect", "length", "status"),
    [("100-continue", 5000, b"413"), ("something-else", 10, b"417")],
    ids=["too-large", "unknown-expectation"],
)
async def test_an_expectation_the_router_will_not_meet_is_refused_before_the_body(
    make_router: HarnessFactory, expect: str, length: int, status: bytes
) -> None:
    h = await make_router("--max-body-bytes", "1000")
    answer = await _exchange(h, _head(f"Expect: {expect}", f"Content-Length: {length}"))
    assert answer.startswith(b"HTTP/1.1 " + status) and b"100 Continue" not in answer
    assert h.speculative.received == []


@pytest.mark.parametrize(
    ("payload", "status"),
    [
        (_head("X-Big: " + "x" * 2000), b"431"),
        (_head(*(f"X-H{i}: v" for i in range(30))), b"431"),
        (_head(path="/v1/models?" + "q" * 2000, method="GET"), b"414"),
        (b"GET /v1/models HTTP/1.1\r\nX-Endless: " + b"x" * 200_000, b"431"),  # a head that never ends
    ],
    ids=["long-field", "many-fields", "long-target", "endless-head"],
)
async def test_oversized_heads_are_refused_with_431_or_414(
    make_router: HarnessFactory, payload: bytes, status: bytes
) -> None:
    h = await make_router("--max-header-bytes", "1024", "--max-headers", "20")
    answer = await _exchange(h, payload)
    assert answer.startswith(b"HTTP/1.1 " + status), answer[:200]
    assert (await h.metrics())("specpilot_router_refused_total", reason="headers_too_large") == 1
    assert h.speculative.received == [] and h.baseline.received == []


async def test_clients_that_trickle_their_requests_hold_nothing_and_are_timed_out(make_router: HarnessFactory) -> None:
    h = await make_router("--read-timeout", "0.5")
    request = _head(f"Content-Length: {len(CHAT)}") + CHAT
    host, port = h.router.addresses[0]
    slow = [await asyncio.open_connection(host, port) for _ in range(20)]

    async def trickle(writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            for i in range(len(request)):
                writer.write(request[i : i + 1])
                await asyncio.sleep(0.05)  # a byte every 50 ms: the request outlasts the read timeout

    trickling = [asyncio.create_task(trickle(writer)) for _, writer in slow]
    for _ in range(5):  # served at once while twenty clients trickle
        async with await h.chat(team="code") as resp:
            assert resp.status == 200 and (await h.read_sse(resp))[-1] == b"[DONE]"
    async with asyncio.timeout(5):
        answers = [await reader.read(-1) for reader, _ in slow]
    assert all(not task.done() for task in trickling)  # cut off long before the requests were whole
    assert all(a.startswith(b"HTTP/1.1 408 ") and b"RequestTimeoutError" in a for a in answers)
    for task in trickling:
        task.cancel()
    for _, writer in slow:
        writer.close()
    assert (await h.metrics())("specpilot_router_refused_total", reason="read_timeout") == 20
    assert len(h.speculative.received) == 5


async def test_a_client_that_stops_reading_stops_upstream_and_holds_memory_to_a_bound(
    make_router: HarnessFactory,
) -> None:
    h = await make_router()
    body = json.dumps({"model": "m", "messages": [], "stream": True}).encode()
    request = _head(f"Content-Length: {len(body)}", "x-fake-chunks: 4000", "x-fake-per-chunk: 3000") + body
    host, port = h.router.addresses[0]
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, port))
    reader, writer = await asyncio.open_connection(sock=sock)
    try:
        writer.write(request)
        await reader.readuntil(b"\r\n\r\n")  # the head, then nothing more is read
        await h.wait_for(lambda: h.speculative.active == 1)
        (conn,) = h.router.traffic.connections if h.router.traffic else ()
        buffered: list[int] = []

        def buffer_while_upstream_flows() -> bool:
            assert conn.transport is not None
            buffered.append(conn.transport.get_write_buffer_size())
            return conn.flow.source is not None and not conn.flow.source.is_reading()

        await h.wait_for(buffer_while_upstream_flows)  # until the router pauses upstream
        for _ in range(50):  # and while fifty exchanges on its admin port show its loop turning
            await h.metrics()
            assert conn.transport is not None
            buffered.append(conn.transport.get_write_buffer_size())
        # ~36 MB of events, more than the sockets' buffers hold, are held back: upstream is paused and
        # the router buffers one high-water mark plus at most one read from upstream.
        assert max(buffered) <= WRITE_HIGH_WATER + (256 << 10), max(buffered)
        assert conn.flow.source is not None and not conn.flow.source.is_reading()
        assert h.speculative.active == 1  # the engine's writes are held back too
        tail, total = b"", 0
        async with asyncio.timeout(30):
            while not tail.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n"):
                data = await reader.read(1 << 20)
                assert data
                tail, total = (tail + data)[-64:], total + len(data)
    finally:
        writer.close()
    assert total > 4000 * 3 * 3000
    await h.wait_for(lambda: h.router.samples.since(0, 10).samples != ())
    (sample,) = (await h.samples())["samples"]
    assert sample["outcome"] == "ok" and sample["outputTokens"] == 4000 * 3000


class ResettingUpstream:
    """Sends `before` of a response, then resets the connection."""

    def __init__(self, before: bytes) -> None:
        self.before, self.port, self.served = before, 0, 0
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.served += 1
        await reader.readuntil(b"\r\n\r\n")
        writer.write(self.before)
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        sock = writer.get_extra_info("socket")
        await eventually("the router's kernel to acknowledge the head", lambda: _unacknowledged(sock) == 0)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.close()


def _unacknowledged(sock: socket.socket) -> int:
    """Bytes written to `sock` that its peer has not acknowledged yet (Linux's SIOCOUTQ)."""
    return int(struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0" * 4))[0])


SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
EVENT = b'data: {"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": null}]}\n\n'


@pytest.mark.parametrize(
    ("before", "stream"),
    [
        (SSE_HEAD + b"%x\r\n%s\r\n" % (len(EVENT * 2), EVENT * 2), True),
        (b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{"id":', False),
    ],
    ids=["stream", "whole-body"],
)
async def test_an_upstream_reset_mid_response_ends_it_as_an_upstream_error(
    make_router: HarnessFactory, before: bytes, stream: bool
) -> None:
    upstream = ResettingUpstream(before)
    await upstream.start()
    try:
        h = await make_router()
        h.router.state.set_endpoints({Arm.BASELINE: (Endpoint("127.0.0.1", h.baseline.port),),
                                      Arm.SPECULATIVE: (Endpoint("127.0.0.1", upstream.port),)})  # fmt: skip
        async with await h.chat(team="code", stream=stream) as resp:
            assert resp.status == 200 and resp.headers["X-Specpilot-Arm"] == "speculative"
            if stream:
                events = await h.read_sse(resp)
                assert events[:2] == [EVENT[6:-2]] * 2 and events[-1] == b"[DONE]"
                assert b"upstream failed mid-response" in events[-2]
            else:
                with pytest.raises(aiohttp.ClientPayloadError):
                    await resp.read()
        await h.wait_for(lambda: h.router.samples.since(0, 10).samples != ())
        (sample,) = (await h.samples())["samples"]
        assert (sample["outcome"], sample["status"]) == ("upstream_error", 200)
        assert h.router.state.outstanding == {}
    finally:
        await upstream.stop()


async def test_an_upstream_reset_before_any_byte_is_retried_elsewhere(make_router: HarnessFactory) -> None:
    upstream = ResettingUpstream(b"")
    await upstream.start()
    try:
        h = await make_router()
        h.router.state.set_endpoints({Arm.BASELINE: (Endpoint("127.0.0.1", h.baseline.port),),
                                      Arm.SPECULATIVE: (Endpoint("127.0.0.1", upstream.port),)})  # fmt: skip
        async with await h.chat(team="code") as resp:
            assert resp.status == 200 and resp.headers["X-Specpilot-Arm"] == "baseline"
            assert (await h.read_sse(resp))[-1] == b"[DONE]"
        assert upstream.served == 1
        (sample,) = (await h.samples())["samples"]
        assert (sample["outcome"], sample["fallback"]) == ("ok", "speculative_unavailable")
    finally:
        await upstream.stop()


@pytest.mark.parametrize(
    ("payload", "status", "says"),
    [
        (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", b"505", b"HTTP/2 is not supported"),
        (_head("Connection: Upgrade", "Upgrade: websocket", method="GET", path="/v1/models"), b"501", b"upgrades"),
        (b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com\r\n\r\n", b"501", b"CONNECT"),
    ],
    ids=["http2", "websocket", "connect"],
)
async def test_what_is_not_supported_is_refused_clearly(
    make_router: HarnessFactory, payload: bytes, status: bytes, says: bytes
) -> None:
    h = await make_router()
    answer = await _exchange(h, payload)
    assert answer.startswith(b"HTTP/1.1 " + status) and says in answer
    assert h.baseline.received == []


async def test_a_pipelined_request_is_answered_400_after_the_first_response(make_router: HarnessFactory) -> None:
    h = await make_router()
    get = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
    answer = await _exchange(h, get * 3)
    first, _, rest = answer.partition(b"\r\n\r\n")
    assert first.startswith(b"HTTP/1.1 200 ")
    assert rest.count(b"HTTP/1.1 400 ") == 1 and b"pipelined requests are not supported" in rest
    assert len(h.baseline.received) == 1


async def test_an_http10_client_gets_a_close_delimited_stream(make_router: HarnessFactory) -> None:
    h = await make_router()
    body = json.dumps({"model": "m", "messages": [], "stream": True}).encode()
    answer = await _exchange(
        h, f"POST /v1/chat/completions HTTP/1.0\r\n{TEAM_HEADER}: code\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        + body,
    )  # fmt: skip
    head, _, stream = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ") and b"Transfer-Encoding" not in head
    assert stream.endswith(b"data: [DONE]\n\n") and stream.count(b'"content": "tok') == 4


async def test_keep_alive_reuses_one_connection_on_each_side(make_router: HarnessFactory) -> None:
    h = await make_router()
    async with _connection(h) as (reader, writer):
        for _ in range(5):
            writer.write(_head(f"Content-Length: {len(CHAT)}") + CHAT)
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200 ") and b"Connection: close" not in head
            length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
            assert b'"usage"' in await reader.readexactly(length)
        assert _established(h.router.addresses[0][1]) == 1
        assert _established(h.speculative.port) == 1
    assert len((await h.samples())["samples"]) == 5


async def test_an_upstream_connection_paused_for_a_slow_client_goes_back_to_the_pool_reading(
    make_router: HarnessFactory,
) -> None:
    h = await make_router()
    request = _head(f"Content-Length: {len(CHAT)}", "x-fake-chunks: 500000", "Connection: close") + CHAT
    host, port = h.router.addresses[0]
    for _ in range(3):  # each on the same pooled upstream connection
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect((host, port))
        reader, writer = await asyncio.open_connection(sock=sock, limit=1 << 16)
        writer.write(request)
        answer = b""
        async with asyncio.timeout(20):
            while data := await reader.read(1 << 14):  # slowly: the router keeps pausing upstream
                answer += data
                await asyncio.sleep(0.001)  # a slow reader's pause between reads
        writer.close()
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 ") and json.loads(body)["usage"]["completion_tokens"] == 500000
    assert _established(h.speculative.port) == 1
    assert [s["outcome"] for s in (await h.samples())["samples"]] == ["ok"] * 3


class _Transport(asyncio.Transport):
    """Just enough transport to watch reading pause and resume."""

    def __init__(self) -> None:
        super().__init__()
        self.reading = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def is_reading(self) -> bool:
        return self.reading

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass


async def _unanswered(request: object, conn: object) -> None:
    """A request handler that does nothing: the test drives the connection's reading alone."""


async def test_upstream_reading_follows_the_clients_buffer_and_resumes_when_the_exchange_ends() -> None:
    server = Server(_unanswered, Limits(1000, 1000, 10, 1.0), lambda reason: None)
    client = server()
    client.connection_made(_Transport())
    first, second = _Transport(), _Transport()
    client.flow.attach(first)
    client.pause_writing()  # the client's buffer is full
    assert not first.reading
    client.resume_writing()
    assert first.reading
    client.pause_writing()
    client.flow.detach(first)  # the response is whole while paused: the connection goes back to the pool reading
    assert first.reading
    client.flow.attach(second)  # the next exchange starts paused, as the client still is
    assert not second.reading
    client.connection_lost(None)


async def test_a_stopping_router_answers_a_connection_it_just_accepted_and_closes_idle_ones(
    make_router: HarnessFactory,
) -> None:
    """A client sends its request as soon as it has connected: the router, stopping, answers what a connection
    it accepted brings (closing it after), closes a keep-alive connection between requests at once, and one
    that brings nothing after NEW_CONNECTION_GRACE."""
    h = await make_router()
    traffic = h.router.traffic
    assert traffic is not None
    async with _connection(h) as (kept, kept_writer), _connection(h) as (fresh, fresh_writer):
        kept_writer.write(_head(f"Content-Length: {len(CHAT)}") + CHAT)  # answered, then kept alive
        head = await kept.readuntil(b"\r\n\r\n")
        await kept.readexactly(int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0]))
        async with _connection(h) as (silent, _):
            await eventually("three connections accepted", lambda: len(traffic.connections) == 3)
            began = asyncio.get_running_loop().time()
            stopping = asyncio.create_task(h.router.stop())
            async with asyncio.timeout(1):
                assert await kept.read(-1) == b"", "the idle keep-alive connection closes at once"
            fresh_writer.write(_head(f"Content-Length: {len(CHAT)}") + CHAT)  # its request, a moment late
            async with asyncio.timeout(5):
                answer = await fresh.read(-1)
            assert answer.startswith(b"HTTP/1.1 200 ") and b"Connection: close" in answer.split(b"\r\n\r\n")[0]
            async with asyncio.timeout(NEW_CONNECTION_GRACE + 5):
                assert await silent.read(-1) == b""
                await stopping
            assert asyncio.get_running_loop().time() - began >= NEW_CONNECTION_GRACE
    assert [s.outcome for s in h.router.samples.since(0, 10).samples] == ["ok", "ok"]  # its admin port is closed
