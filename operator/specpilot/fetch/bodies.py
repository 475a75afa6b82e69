"""Every body the operator reads from a server a pilot reaches (engine pods, routers, webhooks, a
Prometheus) is read here, with a cap enforced while it arrives: one tenant's server answering without
end could otherwise fill the memory of the operator every pilot shares.

A body past its cap is refused as soon as the cap is passed (a `Content-Length` over it before a byte
is read), by `TooLarge`: a `Refused` call, which callers already turn into a failed call, naming the cap.
"""

from __future__ import annotations

import aiohttp

from specpilot.fetch.outbound import Refused

MAX_BODY_BYTES = 16 * 1024 * 1024  # a vLLM exposition is ~50 kB, a full samples page a few MB
# A probe's answer: at most 4,096 tokens (a case's maxTokens), streamed as one event of a few hundred
# bytes per token (tool call deltas included), so a legitimate answer stays well under 4 MiB.
PROBE_ANSWER_BYTES = 4 * 1024 * 1024


class TooLarge(Refused):
    """A body past its cap, of which no more is read."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self.limit = limit

    def __str__(self) -> str:
        return f"answer over {self.limit} bytes refused (the operator reads no more of a body)"


async def read_body(response: aiohttp.ClientResponse, limit: int = MAX_BODY_BYTES) -> bytes:
    """The body as it arrives, refused past `limit` bytes so that a runaway server cannot fill memory."""
    if response.content_length is not None and response.content_length > limit:
        raise TooLarge(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_any():
        size += len(chunk)
        if size > limit:
            raise TooLarge(limit)
        chunks.append(chunk)
    return b"".join(chunks)
