"""Reading a client's requests: httptools parses the bytes, `RequestReader` holds each request to the
`Limits` as it comes and hands it on whole, or raises the `Refusal` the client is answered with."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import unquote

import httptools
from multidict import CIMultiDict


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


class Refusal(Exception):
    """A request the router will not take: the status and message of its answer, and the reason counted.
    A `quiet` one is logged at debug level only."""

    def __init__(self, status: int, reason: str, message: str, *, quiet: bool = False) -> None:
        super().__init__(message)
        self.status, self.reason, self.message, self.quiet = status, reason, message, quiet


class RequestReader:
    """The httptools callbacks of one connection: each request checked against the limits and assembled.

    `busy` says a response is under way: a request that begins then is pipelined, and from then on
    everything the client sends is dropped. `began` tells of a request's first byte, `proceed` of a
    head that asks ``Expect: 100-continue`` and is acceptable, `whole` hands on the whole request.
    """

    def __init__(
        self,
        limits: Limits,
        *,
        busy: Callable[[], bool],
        began: Callable[[], None],
        proceed: Callable[[], None],
        whole: Callable[[Request], None],
    ) -> None:
        self._limits = limits
        self._max_head = limits.max_header_bytes * (limits.max_headers + 1)
        self._busy, self._began, self._proceed, self._whole = busy, began, proceed, whole
        self._parser = httptools.HttpRequestParser(self)
        self.reading = False  # a request has begun and is not whole yet
        self.pipelined = False  # a request came before the previous response ended
        self.http11 = True
        self._head_done = False
        self._head_size = 0
        self._url = b""
        self._headers: CIMultiDict[str] = CIMultiDict()
        self._body: list[bytes] = []
        self._body_size = 0

    def feed(self, data: bytes) -> None:
        """Parse what the client sent; a request it may not send raises its `Refusal`."""
        if not self.reading:
            self._head_size = 0
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            if not isinstance(exc.__context__, Refusal):
                raise
            raise exc.__context__ from None
        except httptools.HttpParserUpgrade:
            raise Refusal(
                501, "unsupported", "protocol upgrades (WebSocket, h2c) and CONNECT are not supported"
            ) from None
        except httptools.HttpParserError as exc:
            if self.pipelined:
                return
            if data.startswith(b"PRI * HTTP/2.0"):
                raise Refusal(505, "unsupported", "HTTP/2 is not supported: send HTTP/1.1") from None
            raise Refusal(400, "malformed_http", f"malformed HTTP request: {exc}", quiet=True) from None
        if self.reading and not self._head_done:
            self._head_size += len(data)
            if self._head_size > self._max_head:
                raise Refusal(431, "headers_too_large", "request head too large")

    # httptools callbacks

    def on_message_begin(self) -> None:
        if self._busy():
            self.pipelined = True
            return
        self.reading, self._head_done = True, False
        self._url, self._headers, self._body, self._body_size = b"", CIMultiDict(), [], 0
        self._began()

    def on_url(self, url: bytes) -> None:
        if self.pipelined:
            return
        self._url += url
        if len(self._url) > self._limits.max_header_bytes:
            raise Refusal(414, "headers_too_large", f"request target over {self._limits.max_header_bytes} bytes")

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.pipelined:
            return
        limits = self._limits
        if len(name) + len(value) + 2 > limits.max_header_bytes:
            raise Refusal(431, "headers_too_large", f"a header field is over {limits.max_header_bytes} bytes")
        if len(self._headers) >= limits.max_headers:
            raise Refusal(431, "headers_too_large", f"more than {limits.max_headers} header fields")
        self._headers.add(name.decode("latin-1"), value.decode("latin-1"))

    def on_headers_complete(self) -> None:
        if self.pipelined:
            return
        self._head_done = True
        parser = self._parser
        if parser.should_upgrade() or parser.get_method() == b"CONNECT":
            raise Refusal(501, "unsupported", "protocol upgrades (WebSocket, h2c) and CONNECT are unsupported")
        version = parser.get_http_version()
        if version not in ("1.1", "1.0"):
            raise Refusal(505, "unsupported", f"HTTP/{version} is not supported: send HTTP/1.1")
        self.http11 = version == "1.1"
        length = self._headers.get("Content-Length")
        if length is not None and length.isdigit() and int(length) > self._limits.max_body_bytes:
            raise Refusal(413, "body_too_large", f"request body over {self._limits.max_body_bytes} bytes")
        expect = self._headers.get("Expect")
        if expect is not None:
            if expect.lower() != "100-continue":
                raise Refusal(417, "unsupported", f"expectation {expect!r} is not supported")
            if self.http11:
                self._proceed()

    def on_body(self, body: bytes) -> None:
        if self.pipelined:
            return
        self._body_size += len(body)
        if self._body_size > self._limits.max_body_bytes:
            raise Refusal(413, "body_too_large", f"request body over {self._limits.max_body_bytes} bytes")
        self._body.append(body)

    def on_message_complete(self) -> None:
        if self.pipelined:
            return
        self.reading = False
        target = self._url
        if not target.startswith(b"/"):
            try:
                target = _origin_form(httptools.parse_url(target))
            except httptools.HttpParserInvalidURLError:
                raise Refusal(400, "malformed_http", "request target must be a path or an absolute URL") from None
        parser, body = self._parser, self._body
        self._body = []
        self._whole(
            Request(
                method=parser.get_method().decode("ascii"),
                target=target,
                path=unquote(target.partition(b"?")[0].decode("latin-1")),
                headers=self._headers,
                body=b"".join(body) if len(body) != 1 else body[0],
                keep_alive=parser.should_keep_alive(),
            )
        )


def _origin_form(url: object) -> bytes:
    """The path and query of an absolute-form target (``http://host/v1/models?x``)."""
    path: bytes = getattr(url, "path", None) or b"/"
    query: bytes | None = getattr(url, "query", None)
    return path + b"?" + query if query else path
