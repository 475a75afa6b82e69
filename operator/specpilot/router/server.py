"""The traffic port's HTTP/1.1 server: one asyncio Protocol per client connection, parsed by httptools.

Supported: HTTP/1.0 and 1.1, keep-alive, Content-Length and chunked request bodies (read whole,
up to the body limit), ``Expect: 100-continue``. Responses are written as they come, with
Content-Length when it is known, else chunked (close-delimited to an HTTP/1.0 client). Not
supported, and refused with a clear answer: HTTP/2 (505), protocol upgrades and CONNECT (501),
pipelining (a request sent before the previous response ended is answered 400 after that
response, and the connection closes); request trailers are dropped. A request must arrive whole
within the read timeout (else 408), so a client that trickles its request holds only its socket.

Requests are read by `specpilot.router.reader`, responses framed by `specpilot.router.framing`.
The handler gets each whole request as a `Request` and answers through the connection:
`respond`, `write`, `finish`, `cut`, or `error` for an answer of its own. While the client's write
buffer is over its high-water mark the connection's `flow` pauses its `source` (the upstream
transport), so a client that stops reading holds about one high-water mark and one upstream read
in the router.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Callable, Coroutine
from dataclasses import replace
from typing import cast

from specpilot.router.framing import LAST_CHUNK, Framing, chunk, frame_response
from specpilot.router.reader import Limits, Refusal, Request, RequestReader

log = logging.getLogger("specpilot.router.http")

WRITE_HIGH_WATER = 64 << 10  # client write buffer above which upstream reading pauses
IDLE_TIMEOUT = 75.0  # a keep-alive connection with no request in progress closes after this
# A connection accepted but with no request begun yet, while the router stops: its request is on its way (a
# client sends it as soon as it has connected), so it is given this long to begin before it counts as idle.
NEW_CONNECTION_GRACE = 2.0
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


Handler = Callable[[Request, "ClientConnection"], Coroutine[object, object, None]]


class Server:
    """What every connection of the traffic port shares: the handler, limits and the live set."""

    def __init__(self, handler: Handler, limits: Limits, refused: Callable[[str], None]) -> None:
        self.handler, self.limits, self.refused = handler, limits, refused
        self.connections: set[ClientConnection] = set()
        self.draining = False  # responses close their connection: the server is stopping

    def __call__(self) -> ClientConnection:
        return ClientConnection(self)

    def close_idle(self) -> None:
        """Close the connections with no request in progress: between requests, or accepted more than
        NEW_CONNECTION_GRACE ago without one begun."""
        now = asyncio.get_running_loop().time()
        for conn in list(self.connections):
            if conn.task is None and now >= conn.idle_from:
                conn.close()

    def abort_all(self) -> None:
        for conn in list(self.connections):
            conn.abort()


class Backpressure:
    """While the client's write buffer is over its high-water mark, its `source` does not read."""

    def __init__(self) -> None:
        self.source: asyncio.Transport | None = None
        self.paused = False

    def attach(self, source: asyncio.Transport | None) -> None:
        """Pause `source` whenever this client's write buffer is full (now too, if it is)."""
        self.source = source
        if source is not None and self.paused:
            source.pause_reading()

    def detach(self, source: asyncio.Transport | None) -> None:
        """`source` is done with this client: never leave it paused (it may go back to the pool)."""
        if self.source is source:
            self.source = None
            if source is not None and self.paused:
                source.resume_reading()

    def pause(self) -> None:
        self.paused = True
        if self.source is not None:
            self.source.pause_reading()

    def resume(self) -> None:
        self.paused = False
        if self.source is not None:
            self.source.resume_reading()


class Countdown:
    """One timer of a connection: arming it again replaces the one running."""

    def __init__(self, loop: asyncio.AbstractEventLoop, expired: Callable[[], None]) -> None:
        self._loop, self._expired = loop, expired
        self._handle: asyncio.TimerHandle | None = None

    def arm(self, seconds: float) -> None:
        self.disarm()
        self._handle = self._loop.call_later(seconds, self._fire)

    def disarm(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _fire(self) -> None:
        self._handle = None
        self._expired()


class ResponseWriter:
    """Writes one response after another to the client, each framed as its request and the server allow."""

    def __init__(self, server: Server) -> None:
        self._server = server
        self.transport: asyncio.Transport | None = None  # the client's, until it has gone
        self.framing = Framing()  # of the response under way
        self.keep_alive = True  # the request asked to keep the connection, and nothing since forbids it
        self.head_request = False

    def proceed(self) -> None:
        """The request's head is acceptable: the client may send its body (``100 Continue``)."""
        if self.transport is not None:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def head(self, status: int, reason: str, headers: bytes, length: int | None, *, http11: bool) -> None:
        self.framing, head = frame_response(
            status,
            reason,
            headers,
            length,
            head_request=self.head_request,
            http11=http11,
            keep_alive=self.keep_alive,
            draining=self._server.draining,
        )
        if self.transport is not None:
            self.transport.write(head)

    def body(self, data: bytes) -> None:
        if self.transport is not None and data and not self.framing.bodiless:
            self.transport.write(chunk(data) if self.framing.chunked else data)

    def end(self) -> bool:
        """The body is whole: end it; whether the connection closes now."""
        if self.framing.chunked and self.transport is not None:
            self.transport.write(LAST_CHUNK)
        self.framing = replace(self.framing, chunked=False, bodiless=False)
        return self.framing.close

    def close_after(self) -> None:
        """The connection closes after what was written."""
        self.framing = replace(self.framing, close=True)


class ClientConnection(asyncio.Protocol):
    """One client connection: read requests, hand each to the handler, write its response."""

    def __init__(self, server: Server) -> None:
        self._server = server
        self._loop = asyncio.get_running_loop()
        self._out = ResponseWriter(server)
        self._reader = RequestReader(
            server.limits,
            busy=lambda: self._responding,
            began=self._began,
            proceed=self._out.proceed,
            whole=self._whole,
        )
        self.transport: asyncio.Transport | None = None
        self.task: asyncio.Task[None] | None = None
        self.idle_from = self._loop.time() + NEW_CONNECTION_GRACE  # then when a response ends; never mid-request
        self.flow = Backpressure()  # pauses the upstream transport while this client's buffer is full
        self.gone = False
        self._timer = Countdown(self._loop, self._timed_out)
        self._lingering = False  # refused: the answer is out, what still comes is dropped
        self._responding = False  # a request is whole and its response not yet

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses
        self.transport = self._out.transport = transport
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        self._server.connections.add(self)
        self._timer.arm(IDLE_TIMEOUT)

    def data_received(self, data: bytes) -> None:
        if self._reader.pipelined or self._lingering or self.gone:
            return  # the rest of a pipelined request: dropped, answered 400 after the current response
        try:
            self._reader.feed(data)
        except Refusal as refusal:
            self._refuse(refusal)

    def eof_received(self) -> bool:
        # A client that half-closes is taken to have left, as nginx and aiohttp take it.
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.gone, self._out.transport = True, None
        self._server.connections.discard(self)
        self._timer.disarm()
        if self.task is not None:
            self.task.cancel()

    def pause_writing(self) -> None:
        self.flow.pause()

    def resume_writing(self) -> None:
        self.flow.resume()

    # What the reader tells

    def _began(self) -> None:
        self.idle_from = math.inf
        self._timer.arm(self._server.limits.read_timeout)

    def _whole(self, request: Request) -> None:
        self._timer.disarm()
        self._out.keep_alive, self._out.head_request = request.keep_alive, request.method == "HEAD"
        self._responding = True
        self.task = self._loop.create_task(self._server.handler(request, self))
        self.task.add_done_callback(self._handled)

    # Writing the response

    def respond(self, status: int, reason: str, headers: bytes, length: int | None) -> None:
        """Send the response head; `headers` is the header block (``Name: value\\r\\n`` lines)."""
        self._out.head(status, reason, headers, length, http11=self._reader.http11)

    def write(self, data: bytes) -> None:
        self._out.body(data)

    def finish(self) -> None:
        """The response is whole; the connection takes the next request or closes."""
        close, self._responding = self._out.end(), False
        self.idle_from = self._loop.time()
        if self._lingering:
            if _linger(self.transport):
                self._timer.arm(LINGER_SECONDS)
        elif self._reader.pipelined:
            self._out.keep_alive, self._lingering = False, True
            self.error(400, "pipelined requests are not supported: wait for each response before the next request")
        elif close:
            self.close()
        else:
            self._timer.arm(IDLE_TIMEOUT)

    def cut(self) -> None:
        """End a response that cannot be finished: close after what was written, so it reads as cut."""
        self._out.close_after()
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

    def _refuse(self, refusal: Refusal) -> None:
        """Answer a request the router will not take, and close the connection."""
        self._server.refused(refusal.reason)
        if refusal.quiet:
            log.debug("malformed HTTP request refused")
        self._reader.reading = False
        self._timer.disarm()
        if self._responding:  # refused while a response is under way: only closing is left
            self._reader.pipelined = True
            return
        self._out.keep_alive = False
        self._lingering = True
        self.error(refusal.status, refusal.message)

    def _timed_out(self) -> None:
        if self._lingering:
            self.abort()
        elif self._reader.reading:
            limits = self._server.limits
            self._refuse(Refusal(408, "read_timeout", f"request not received within {limits.read_timeout:g} s"))
        elif not self._responding:
            self.close()


def _linger(transport: asyncio.Transport | None) -> bool:
    """Close after a refusal without a reset: stop writing, and drop what still comes until closing soon.
    Whether the connection lingers so (else it is closing already, or closed now).

    Closing with unread bytes would reset the connection, and the client might lose the answer.
    """
    if transport is None or transport.is_closing():
        return False
    if transport.can_write_eof():
        transport.write_eof()
        return True
    transport.close()
    return False
