"""The traffic port's HTTP/1.1 server: one asyncio Protocol per client connection, parsed by httptools.

Supported: HTTP/1.0 and 1.1, keep-alive, Content-Length and chunked request bodies (read whole,
up to the body limit), ``Expect: 100-continue``. Responses are written as they come, with
Content-Length when it is known, else chunked (close-delimited to an HTTP/1.0 client). Not
supported, and refused with a clear answer: HTTP/2 (505), protocol upgrades and CONNECT (501),
pipelining (a request sent before the previous response ended is answered 400 after that
response, and the connection closes); request trailers are dropped. A request must arrive whole
within the read timeout (else 408), so a client that trickles its request holds only its socket.

The handler gets each whole request as a `Request` and answers through the connection:
`respond`, `write`, `finish`, `cut`, or `error` for an answer of its own. While the client's write
buffer is over its high-water mark the connection pauses `source` (the upstream transport), so
a client that stops reading holds about one high-water mark and one upstream read in the router.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import cast
from urllib.parse import unquote

import httptools
from multidict import CIMultiDict

log = logging.getLogger("specpilot.router.http")

WRITE_HIGH_WATER = 64 << 10  # client write buffer above which upstream reading pauses
IDLE_TIMEOUT = 75.0  # a keep-alive connection with no request in progress closes after this
LINGER_SECONDS = 2.0  # after a refusal, how long what the client still sends is read and dropped
ERROR_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    408: "RequestTimeoutError",
    413: "RequestEntityTooLargeError",
    414: "URITooLongError",
    417: "ExpectationFailedError",
    431: "RequestHeaderFieldsTooLargeError",
    501: "NotImplementedError",
    502: "BadGatewayError",
    503: "ServiceUnavailableError",
    504: "GatewayTimeoutError",
    505: "HTTPVersionNotSupportedError",
}
_REASONS = {
    100: "Continue",
    400: "Bad Request",
    404: "Not Found",
    408: "Request Timeout",
    413: "Content Too Large",
    414: "URI Too Long",
    417: "Expectation Failed",
    431: "Request Header Fields Too Large",
    499: "Client Closed Request",
    501: "Not Implemented",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
    505: "HTTP Version Not Supported",
}


def error_body(status: int, message: str) -> bytes:
    """An error in the OpenAI/vLLM shape: ``{"error": {message, type, param, code}}``."""
    kind = ERROR_TYPES.get(status, "Error")
    return json.dumps({"error": {"message": message, "type": kind, "param": None, "code": status}}).encode()


@dataclass(frozen=True, slots=True)
class Limits:
    """What a client may send."""

    max_body_bytes: int
    max_header_bytes: int  # longest request line or header field
    max_headers: int
    read_timeout: float  # seconds from a request's first byte to its last


@dataclass(slots=True)
class Request:
    """One whole request as the client sent it."""

    method: str
    target: bytes  # the request target as sent, passed on unchanged
    path: str  # its path, percent-decoded
    headers: CIMultiDict[str]
    body: bytes
    keep_alive: bool


Handler = Callable[[Request, "ClientConnection"], Coroutine[object, object, None]]


class _Refusal(Exception):
    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message


class Server:
    """What every connection of the traffic port shares: the handler, limits and the live set."""

    def __init__(self, handler: Handler, limits: Limits, refused: Callable[[str], None]) -> None:
        self.handler, self.limits, self.refused = handler, limits, refused
        self.connections: set[ClientConnection] = set()
        self.draining = False  # responses close their connection: the server is stopping
        self.max_head = limits.max_header_bytes * (limits.max_headers + 1)

    def __call__(self) -> ClientConnection:
        return ClientConnection(self)

    def in_flight(self) -> list[asyncio.Task[None]]:
        """The requests in progress."""
        return [conn.task for conn in self.connections if conn.task is not None]

    def close_idle(self) -> None:
        for conn in list(self.connections):
            if conn.task is None:
                conn.close()

    def abort_all(self) -> None:
        for conn in list(self.connections):
            conn.abort()


class ClientConnection(asyncio.Protocol):
    """One client connection: parse requests, hand each to the handler, write its response."""

    def __init__(self, server: Server) -> None:
        self._server = server
        self._limits = server.limits
        self._loop = asyncio.get_running_loop()
        self._parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.task: asyncio.Task[None] | None = None
        self.source: asyncio.Transport | None = None  # paused while this client's buffer is full
        self.gone = False
        self._paused = False
        self._timer: asyncio.TimerHandle | None = None
        self._reading = False  # a request has begun and is not whole yet
        self._head_done = False
        self._head_size = 0
        self._url = b""
        self._headers: CIMultiDict[str] = CIMultiDict()
        self._body: list[bytes] = []
        self._body_size = 0
        self._pipelined = False
        self._http11 = True
        self._keep_alive = True
        self._chunked = False
        self._close_after = False
        self._head_request = False
        self._lingering = False  # refused: the answer is out, what still comes is dropped
        self._responding = False  # a request is whole and its response not yet
        self._bodiless = False  # HEAD, 204 or 304: the response has no body

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        self._server.connections.add(self)
        self._arm(IDLE_TIMEOUT)

    def data_received(self, data: bytes) -> None:
        if self._pipelined or self._lingering or self.gone:
            return  # the rest of a pipelined request: dropped, answered 400 after the current response
        if not self._reading:
            self._head_size = 0
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            if not isinstance(exc.__context__, _Refusal):
                raise
            self._refuse(exc.__context__)
        except httptools.HttpParserUpgrade:
            self._refuse(
                _Refusal(501, "unsupported", "protocol upgrades (WebSocket, h2c) and CONNECT are not supported")
            )
        except httptools.HttpParserError as exc:
            if self._pipelined:
                return
            if data.startswith(b"PRI * HTTP/2.0"):
                self._refuse(_Refusal(505, "unsupported", "HTTP/2 is not supported: send HTTP/1.1"))
            else:
                self._refuse(_Refusal(400, "malformed_http", f"malformed HTTP request: {exc}"), quiet=True)
        else:
            if self._reading and not self._head_done:
                self._head_size += len(data)
                if self._head_size > self._server.max_head:
                    self._refuse(_Refusal(431, "headers_too_large", "request head too large"))

    def eof_received(self) -> bool:
        # A client that half-closes is taken to have left, as nginx and aiohttp take it.
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.gone = True
        self._server.connections.discard(self)
        if self._timer is not None:
            self._timer.cancel()
        if self.task is not None:
            self.task.cancel()

    def attach(self, source: asyncio.Transport | None) -> None:
        """Pause `source` whenever this client's write buffer is full (now too, if it is)."""
        self.source = source
        if source is not None and self._paused:
            source.pause_reading()

    def detach(self, source: asyncio.Transport | None) -> None:
        """`source` is done with this client: never leave it paused (it may go back to the pool)."""
        if self.source is source:
            self.source = None
            if source is not None and self._paused:
                source.resume_reading()

    def pause_writing(self) -> None:
        self._paused = True
        if self.source is not None:
            self.source.pause_reading()

    def resume_writing(self) -> None:
        self._paused = False
        if self.source is not None:
            self.source.resume_reading()

    # httptools callbacks

    def on_message_begin(self) -> None:
        if self._responding:
            self._pipelined = True
            return
        self._reading, self._head_done = True, False
        self._url, self._headers, self._body, self._body_size = b"", CIMultiDict(), [], 0
        self._arm(self._limits.read_timeout)

    def on_url(self, url: bytes) -> None:
        if self._pipelined:
            return
        self._url += url
        if len(self._url) > self._limits.max_header_bytes:
            raise _Refusal(414, "headers_too_large", f"request target over {self._limits.max_header_bytes} bytes")

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._pipelined:
            return
        limits = self._limits
        if len(name) + len(value) + 2 > limits.max_header_bytes:
            raise _Refusal(431, "headers_too_large", f"a header field is over {limits.max_header_bytes} bytes")
        if len(self._headers) >= limits.max_headers:
            raise _Refusal(431, "headers_too_large", f"more than {limits.max_headers} header fields")
        self._headers.add(name.decode("latin-1"), value.decode("latin-1"))

    def on_headers_complete(self) -> None:
        if self._pipelined:
            return
        self._head_done = True
        parser = self._parser
        if parser.should_upgrade() or parser.get_method() == b"CONNECT":
            raise _Refusal(501, "unsupported", "protocol upgrades (WebSocket, h2c) and CONNECT are unsupported")
        version = parser.get_http_version()
        if version not in ("1.1", "1.0"):
            raise _Refusal(505, "unsupported", f"HTTP/{version} is not supported: send HTTP/1.1")
        self._http11 = version == "1.1"
        length = self._headers.get("Content-Length")
        if length is not None and length.isdigit() and int(length) > self._limits.max_body_bytes:
            raise _Refusal(413, "body_too_large", f"request body over {self._limits.max_body_bytes} bytes")
        expect = self._headers.get("Expect")
        if expect is not None:
            if expect.lower() != "100-continue":
                raise _Refusal(417, "unsupported", f"expectation {expect!r} is not supported")
            if self._http11 and self.transport is not None:
                self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # the head is acceptable: send the body

    def on_body(self, body: bytes) -> None:
        if self._pipelined:
            return
        self._body_size += len(body)
        if self._body_size > self._limits.max_body_bytes:
            raise _Refusal(413, "body_too_large", f"request body over {self._limits.max_body_bytes} bytes")
        self._body.append(body)

    def on_message_complete(self) -> None:
        if self._pipelined:
            return
        self._reading = False
        self._disarm()
        parser = self._parser
        target = self._url
        if not target.startswith(b"/"):
            try:
                target = _origin_form(httptools.parse_url(target))
            except httptools.HttpParserInvalidURLError:
                raise _Refusal(400, "malformed_http", "request target must be a path or an absolute URL") from None
        request = Request(
            method=parser.get_method().decode("ascii"),
            target=target,
            path=unquote(target.partition(b"?")[0].decode("latin-1")),
            headers=self._headers,
            body=b"".join(self._body) if len(self._body) != 1 else self._body[0],
            keep_alive=parser.should_keep_alive(),
        )
        self._keep_alive = request.keep_alive
        self._responding = True
        self._head_request = request.method == "HEAD"
        self._body = []
        self.task = self._loop.create_task(self._server.handler(request, self))
        self.task.add_done_callback(self._handled)

    # Writing the response

    def respond(self, status: int, reason: str, headers: bytes, length: int | None) -> None:
        """Send the response head; `headers` is the header block (``Name: value\\r\\n`` lines)."""
        if self._head_request or status in (204, 304):
            self._bodiless, length = True, length if self._head_request else None
        self._chunked = length is None and self._http11 and not self._bodiless
        self._close_after = (
            not self._keep_alive
            or (length is None and not self._http11 and not self._bodiless)
            or self._server.draining
        )
        framing = (
            b"Transfer-Encoding: chunked\r\n"
            if self._chunked
            else b""
            if length is None
            else b"Content-Length: %d\r\n" % length
        )
        connection = b"Connection: close\r\n" if self._close_after else b""
        head = b"HTTP/1.1 %d %s\r\n" % (status, reason.encode("latin-1")) + headers + framing + connection + b"\r\n"
        if self.transport is not None and not self.gone:
            self.transport.write(head)

    def write(self, data: bytes) -> None:
        transport = self.transport
        if transport is None or self.gone or not data or self._bodiless:
            return
        if self._chunked:
            transport.write(b"%x\r\n" % len(data) + data + b"\r\n")
        else:
            transport.write(data)

    def finish(self) -> None:
        """The response is whole; the connection takes the next request or closes."""
        if self._chunked and self.transport is not None and not self.gone:
            self.transport.write(b"0\r\n\r\n")
        self._chunked = self._bodiless = self._responding = False
        if self._lingering:
            self._linger()
        elif self._pipelined:
            self._keep_alive, self._lingering = False, True
            self.error(400, "pipelined requests are not supported: wait for each response before the next request")
        elif self._close_after:
            self.close()
        else:
            self._arm(IDLE_TIMEOUT)

    def cut(self) -> None:
        """End a response that cannot be finished: close after what was written, so it reads as cut."""
        self._close_after = True
        self.close()

    def error(self, status: int, message: str) -> None:
        """The router's own whole answer."""
        body = error_body(status, message)
        self.respond(status, _REASONS.get(status, "Error"), b"Content-Type: application/json\r\n", len(body))
        self.write(body)
        self.finish()

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    # Internals

    def _handled(self, task: asyncio.Task[None]) -> None:
        current = task is self.task  # else the next request has begun: this one's response was whole
        if current:
            self.task = None
        if not task.cancelled() and task.exception() is not None:
            log.error("request handler failed", exc_info=task.exception())
            self.abort()
        elif current and self._responding and not self.gone:
            self._responding = False  # the handler ended without a whole answer: nothing else can follow
            self.close()

    def _refuse(self, refusal: _Refusal, *, quiet: bool = False) -> None:
        """Answer a request the router will not take, and close the connection."""
        self._server.refused(refusal.reason)
        if quiet:
            log.debug("malformed HTTP request refused")
        self._reading = False
        self._disarm()
        if self._responding:  # refused while a response is under way: only closing is left
            self._pipelined = True
            return
        self._keep_alive = False
        self._lingering = True
        self.error(refusal.status, refusal.message)

    def _linger(self) -> None:
        """Close after a refusal without a reset: stop writing, drop what still comes, close soon.

        Closing with unread bytes would reset the connection, and the client might lose the answer.
        """
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if transport.can_write_eof():
            transport.write_eof()
            self._arm(LINGER_SECONDS)
        else:
            transport.close()

    def _arm(self, seconds: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop.call_later(seconds, self._timed_out)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _timed_out(self) -> None:
        self._timer = None
        if self._lingering:
            self.abort()
        elif self._reading:
            self._refuse(_Refusal(408, "read_timeout", f"request not received within {self._limits.read_timeout:g} s"))
        elif not self._responding:
            self.close()


def _origin_form(url: object) -> bytes:
    """The path and query of an absolute-form target (``http://host/v1/models?x``)."""
    path: bytes = getattr(url, "path", None) or b"/"
    query: bytes | None = getattr(url, "query", None)
    return path + b"?" + query if query else path
