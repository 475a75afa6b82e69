"""What the component tier's loopback fixtures hand to a test: a started mock vLLM, a way to start more,
a reader of a server's /metrics, and an app served on loopback."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from specpilot.mockvllm.server import MockServer


@dataclass
class RunningMock:
    """A started mock and where to reach it."""

    server: MockServer
    url: str
    admin_url: str
    crashes: list[int]


StartMock = Callable[..., Awaitable[RunningMock]]


Scrape = Callable[[str], Awaitable[dict[str, float]]]


@dataclass(frozen=True)
class Served:
    """An app served on loopback: a base URL per port, and a way to stop it before the test ends."""

    urls: tuple[str, ...]
    runner: web.AppRunner

    @property
    def url(self) -> str:
        return self.urls[0]

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    async def stop(self) -> None:
        await self.runner.cleanup()


Serve = Callable[..., Awaitable[Served]]
