"""What the router changes in what it passes on: a request's head and body on their way to the engine,
and the response head on its way back to the client."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from specpilot.router.reader import Request
from specpilot.wire.names import SCOPE_HEADER, Arm

ARM_HEADER = "X-Specpilot-Arm"
HOP_BY_HOP = frozenset(
    h.lower()
    for h in (
        "Connection",
        "Keep-Alive",
        "Proxy-Authenticate",
        "Proxy-Authorization",
        "Proxy-Connection",
        "TE",
        "Trailer",
        "Transfer-Encoding",
        "Upgrade",
        "Host",
        "Content-Length",
        "Expect",
    )
)
_HOP_BY_HOP_BYTES = frozenset(h.encode() for h in HOP_BY_HOP)
_ARM_HEADER = ARM_HEADER.encode()
_SCOPE_HEADER = SCOPE_HEADER.encode()
_USAGE_OPTION = b'{"stream_options":{"include_usage":true},'
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def request_line(request: Request, address: str) -> bytes:
    """The request line and ``Host`` of the request sent to the endpoint at `address`."""
    return b"%s %s HTTP/1.1\r\nHost: %s\r\n" % (request.method.encode(), request.target, address.encode())


def forwarded(request: Request, replace: Mapping[str, str], length: int) -> bytes:
    """The header block sent upstream: the client's end-to-end headers, `replace` set, the body's length."""
    headers = request.headers
    replaced = {name.lower() for name in replace}
    lines = [
        f"{name}: {value}\r\n"
        for name, value in headers.items()
        if name.lower() not in HOP_BY_HOP and name.lower() not in replaced
    ]
    lines += (f"{name}: {value}\r\n" for name, value in replace.items())
    if length or request.method in _BODY_METHODS or "Content-Length" in headers or "Transfer-Encoding" in headers:
        lines.append(f"Content-Length: {length}\r\n")
    lines.append("\r\n")
    return "".join(lines).encode("latin-1")


def ask_for_usage(doc: Mapping[str, Any], body: bytes) -> tuple[bytes, bool]:
    """The body with ``stream_options.include_usage`` set, and whether the router added it."""
    options = doc.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") is True:
        return body, False
    if options is None and "stream_options" not in doc:
        start = body.index(b"{")
        return _USAGE_OPTION + body[start + 1 :], True
    # Written again whole: read by the standard library, which keeps integers of any size exact
    # (orjson reads those past 64 bits as floats).
    exact = json.loads(body)
    patched = {**exact, "stream_options": {**(options if isinstance(options, dict) else {}), "include_usage": True}}
    return json.dumps(patched, ensure_ascii=False, separators=(",", ":")).encode(), True


def relayed(headers: list[tuple[bytes, bytes]], *, named: tuple[Arm, str] | None) -> tuple[bytes, int | None, bool]:
    """The engine's response headers as the client gets them, hop-by-hop ones dropped, with the arm and
    scope when `named`; and the body's Content-Length (None: unknown), and whether it is an event stream."""
    length: int | None = None
    event_stream = False
    lines: list[bytes] = []
    for name, value in headers:
        lower = name.lower()
        if lower == b"content-length":
            length = int(value) if value.isdigit() else None
        elif lower == b"content-type":
            event_stream = value.startswith(b"text/event-stream")
        if lower not in _HOP_BY_HOP_BYTES:
            lines += (name, b": ", value, b"\r\n")
    if named is not None:
        arm, scope = named
        lines += (_ARM_HEADER, b": ", arm.value.encode(), b"\r\n")
        lines += (_SCOPE_HEADER, b": ", scope.encode(), b"\r\n")
    return b"".join(lines), length, event_stream
