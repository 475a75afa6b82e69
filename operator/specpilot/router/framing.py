"""How a response goes on the wire to the client: its head, and its body as it is or chunked."""

from __future__ import annotations

from dataclasses import dataclass

LAST_CHUNK = b"0\r\n\r\n"


@dataclass(frozen=True, slots=True)
class Framing:
    """How one response's body is sent, and whether the connection closes after it."""

    chunked: bool = False
    bodiless: bool = False  # HEAD, 204 or 304: the response has no body
    close: bool = False


def frame_response(
    status: int,
    reason: str,
    headers: bytes,
    length: int | None,
    *,
    head_request: bool,
    http11: bool,
    keep_alive: bool,
    draining: bool,
) -> tuple[Framing, bytes]:
    """The framing of a response and its head; `headers` is the header block (``Name: value\\r\\n`` lines).

    With its `length` known the body goes as it is, else chunked (close-delimited to an HTTP/1.0 client).
    """
    bodiless = head_request or status in (204, 304)
    if bodiless:
        length = length if head_request else None
    chunked = length is None and http11 and not bodiless
    close = not keep_alive or (length is None and not http11 and not bodiless) or draining
    framing = (
        b"Transfer-Encoding: chunked\r\n" if chunked else b"" if length is None else b"Content-Length: %d\r\n" % length
    )
    connection = b"Connection: close\r\n" if close else b""
    head = b"HTTP/1.1 %d %s\r\n" % (status, reason.encode("latin-1")) + headers + framing + connection + b"\r\n"
    return Framing(chunked=chunked, bodiless=bodiless, close=close), head


def chunk(data: bytes) -> bytes:
    """`data` as one chunk of a chunked body."""
    return b"%x\r\n" % len(data) + data + b"\r\n"
