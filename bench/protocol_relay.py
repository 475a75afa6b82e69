"""The router's design with none of its work: asyncio Protocols, httptools and uvloop relaying bytes.

    python bench/protocol_relay.py LISTEN_PORT UPSTREAM_HOST:PORT

`bench/router.py` runs it beside the router and nginx as ``protocols``. It parses each request,
sends it on over a pooled keep-alive connection and writes the response back piece by piece as it
is read, re-framed as chunked; no classification, routing, measurement, limits or timeouts. So
its CPU per request is what CPython costs for the events of a streamed request on this machine:
the floor under any router written this way.
"""

from __future__ import annotations

import asyncio
import sys
from typing import cast

import httptools
import uvloop


class Upstream(asyncio.Protocol):
    """A keep-alive connection to the engine; the response goes to `client` as it is parsed."""

    def __init__(self, pool: list[Upstream]) -> None:
        self.pool = pool
        self.client: Client | None = None
        self.transport: asyncio.Transport | None = None
        self.parser: httptools.HttpResponseParser | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def send(self, client: Client, request: bytes) -> None:
        assert self.transport is not None
        self.client, self.parser = client, httptools.HttpResponseParser(self)
        self.transport.write(request)

    def data_received(self, data: bytes) -> None:
        assert self.parser is not None
        self.parser.feed_data(data)

    def on_headers_complete(self) -> None:
        assert self.client is not None and self.parser is not None
        self.client.write(b"HTTP/1.1 %d OK\r\nTransfer-Encoding: chunked\r\n\r\n" % self.parser.get_status_code())

    def on_body(self, data: bytes) -> None:
        assert self.client is not None
        self.client.write(b"%x\r\n%b\r\n" % (len(data), data))

    def on_message_complete(self) -> None:
        client, self.client = self.client, None
        assert client is not None
        client.write(b"0\r\n\r\n")
        self.pool.append(self)

    def connection_lost(self, exc: Exception | None) -> None:
        if self in self.pool:
            self.pool.remove(self)


class Client(asyncio.Protocol):
    """A client connection: each whole request goes upstream."""

    def __init__(self, upstream: tuple[str, int], pool: list[Upstream]) -> None:
        self.upstream, self.pool = upstream, pool
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.url = b""
        self.body: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def write(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    def on_url(self, url: bytes) -> None:
        self.url = url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        body, self.body = b"".join(self.body), []
        host, port = self.upstream
        request = b"%s %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%b" % (
            self.parser.get_method(),
            self.url,
            host.encode(),
            port,
            len(body),
            body,
        )
        if self.pool:
            self.pool.pop().send(self, request)
        else:
            asyncio.get_running_loop().create_task(self._connect(request))

    async def _connect(self, request: bytes) -> None:
        host, port = self.upstream
        _, conn = await asyncio.get_running_loop().create_connection(lambda: Upstream(self.pool), host, port)
        conn.send(self, request)


async def serve(port: int, upstream: tuple[str, int]) -> None:
    pool: list[Upstream] = []
    await asyncio.get_running_loop().create_server(lambda: Client(upstream, pool), "127.0.0.1", port, backlog=4096)
    await asyncio.Event().wait()


if __name__ == "__main__":
    host, _, upstream_port = sys.argv[2].rpartition(":")
    uvloop.run(serve(int(sys.argv[1]), (host, int(upstream_port))))
