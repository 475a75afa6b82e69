"""Keep-alive HTTP/1.1 connections to the engines, pooled per endpoint, parsed by httptools.

A response is handed to its `Sink` as it is parsed, in the same callback that read the bytes:
`head`, then `body` for each piece as it arrives, then `end`; or `failed`. Bodies may be framed
by Content-Length, chunked or the connection's close. A status outside 200-599 (1xx included: the
router never asks for one) is a malformed response.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol, cast

import httptools

IDLE_TIMEOUT = 30.0  # an idle pooled connection older than this is closed instead of reused


class UpstreamClosed(ConnectionError):
    """The engine closed the connection before the response was whole."""


class MalformedResponse(Exception):
    """The engine's bytes are not an HTTP/1.1 response."""


class Sink(Protocol):
    """Where a response goes as it is read."""

    def head(self, status: int, reason: bytes, headers: list[tuple[bytes, bytes]]) -> None: ...

    def body(self, data: bytes) -> None: ...

    def end(self) -> None: ...

    def failed(self, exc: Exception, *, before_response: bool) -> None: ...


class UpstreamConnection(asyncio.Protocol):
    """One connection to an engine; one exchange at a time."""

    def __init__(self, pool: UpstreamPool, key: tuple[str, int]) -> None:
        self._pool, self.key = pool, key
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._sink: Sink | None = None
        self._parser: httptools.HttpResponseParser | None = None
        self._responded = False  # a byte of the current response has come
        self._head_seen = False
        self._head_only = False
        self._framed = False  # Content-Length or chunked: the body's end is known without a close
        self._reason = b""
        self._headers: list[tuple[bytes, bytes]] = []

    def send(self, data: bytes, sink: Sink, *, head_only: bool = False) -> None:
        """Write a request; its response goes to `sink` (`head_only`: a HEAD request, no body follows)."""
        assert self.transport is not None
        self._sink, self._parser = sink, httptools.HttpResponseParser(_Callbacks(self, sink))
        self._responded = self._head_seen = self._framed = False
        self._head_only = head_only
        self._reason, self._headers = b"", []
        self.transport.write(data)

    def abandon(self) -> None:
        """Drop the exchange under way and close (the engine sees the request cancelled)."""
        self._sink = None
        self.close()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses

    def data_received(self, data: bytes) -> None:
        self._responded = True
        if self._sink is None or self._parser is None:
            self.close()  # bytes nobody asked for: the connection cannot be trusted again
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            cause = exc.__context__
            self._fail(cause if isinstance(cause, MalformedResponse) else MalformedResponse(str(cause)))
        except httptools.HttpParserError as exc:
            self._fail(MalformedResponse(str(exc) or type(exc).__name__))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._pool.forget(self)
        sink, self._sink = self._sink, None
        if sink is None:
            return
        if self._head_seen and not self._framed and not self._head_only:
            sink.end()  # a body delimited by the connection's close
            return
        reason = exc if exc is not None else UpstreamClosed("the engine closed the connection")
        sink.failed(reason, before_response=not self._responded)

    # httptools callbacks

    def on_message_begin(self) -> None:
        if self._head_seen:
            raise MalformedResponse("more than one response to one request")

    def on_status(self, status: bytes) -> None:
        self._reason += status

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))
        if name.lower() in (b"content-length", b"transfer-encoding"):
            self._framed = True

    def on_headers_complete(self) -> None:
        assert self._parser is not None and self._sink is not None
        status = self._parser.get_status_code()
        if not 200 <= status <= 599:
            raise MalformedResponse(f"status {status}")
        self._head_seen = True
        self._sink.head(status, self._reason, self._headers)
        if self._head_only or status in (204, 304):
            self._framed = True
        if self._head_only:
            self._complete(reuse=False)

    def on_message_complete(self) -> None:
        if self._sink is not None and self._parser is not None:
            self._complete(reuse=self._parser.should_keep_alive())

    def _complete(self, *, reuse: bool) -> None:
        sink, self._sink = self._sink, None
        if reuse:
            self._pool.release(self)
        else:
            self.close()
        if sink is not None:
            sink.end()

    def _fail(self, exc: Exception) -> None:
        sink, self._sink = self._sink, None
        self.close()
        if sink is not None:
            sink.failed(exc, before_response=False)


class _Callbacks:
    """The parser's callbacks for one exchange: the body goes straight to the sink, the rest to the connection."""

    __slots__ = ("on_body", "on_header", "on_headers_complete", "on_message_begin", "on_message_complete", "on_status")

    def __init__(self, conn: UpstreamConnection, sink: Sink) -> None:
        self.on_message_begin = conn.on_message_begin
        self.on_status = conn.on_status
        self.on_header = conn.on_header
        self.on_headers_complete = conn.on_headers_complete
        self.on_body = sink.body
        self.on_message_complete = conn.on_message_complete


class UpstreamPool:
    """Idle keep-alive connections per endpoint, most recently used first."""

    def __init__(self, *, connect_timeout: float) -> None:
        self._connect_timeout = connect_timeout
        self._idle: dict[tuple[str, int], list[UpstreamConnection]] = {}

    async def connect(self, host: str, port: int) -> UpstreamConnection:
        """An idle connection to ``host:port``, else a new one; raises OSError or TimeoutError."""
        key = (host, port)
        idle = self._idle.get(key)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if not conn.closed and now - conn.idle_since < IDLE_TIMEOUT:
                return conn
            conn.close()
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(self._connect_timeout):
            _, conn = await loop.create_connection(lambda: UpstreamConnection(self, key), host, port)
        return conn

    def release(self, conn: UpstreamConnection) -> None:
        conn.idle_since = time.monotonic()
        self._idle.setdefault(conn.key, []).append(conn)

    def forget(self, conn: UpstreamConnection) -> None:
        idle = self._idle.get(conn.key)
        if idle and conn in idle:
            idle.remove(conn)

    def close(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()
