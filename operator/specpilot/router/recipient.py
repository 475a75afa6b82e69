"""Who an exchange's answer goes to: the client's connection, or nobody.

`specpilot.router.exchange` and `specpilot.router.relay` write an answer through a `Recipient`.
`specpilot.router.server.ClientConnection` is one; `NOBODY` takes the answer of a mirrored copy and
drops it, without backpressure, so the copy goes through the same code and is measured the same way
as the request it copies, at the engine's own pace.
"""

from __future__ import annotations

import asyncio
from typing import Protocol


class Flow(Protocol):
    """Pauses an upstream transport while the recipient cannot take more."""

    def attach(self, source: asyncio.Transport | None) -> None: ...

    def detach(self, source: asyncio.Transport | None) -> None: ...


class Recipient(Protocol):
    """Where a response goes: its head, its body piece by piece, and how it ends."""

    @property
    def flow(self) -> Flow: ...

    def respond(self, status: int, reason: str, headers: bytes, length: int | None) -> None: ...

    def write(self, data: bytes) -> None: ...

    def finish(self) -> None: ...

    def cut(self) -> None: ...

    def error(self, status: int, message: str) -> None: ...


class _NoFlow:
    def attach(self, source: asyncio.Transport | None) -> None:
        pass

    def detach(self, source: asyncio.Transport | None) -> None:
        pass


class _Nobody:
    """Takes every answer and drops it; never asks the upstream to wait."""

    flow: Flow = _NoFlow()

    def respond(self, status: int, reason: str, headers: bytes, length: int | None) -> None:
        pass

    def write(self, data: bytes) -> None:
        pass

    def finish(self) -> None:
        pass

    def cut(self) -> None:
        pass

    def error(self, status: int, message: str) -> None:
        pass


NOBODY: Recipient = _Nobody()
