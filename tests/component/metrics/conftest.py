"""Loopback servers for the scraping tests: tiny aiohttp apps that misbehave on purpose, and the
router harness of tests/component/router (a real router with static endpoints) reused as is."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web
from tests.component.router.conftest import free_port, make_router

__all__ = ["Serve", "free_port", "make_router", "serve"]

Serve = Callable[..., Awaitable[list[str]]]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """Serve an app on loopback: `await serve(app, ports=n)` returns a base URL per port."""
    runners: list[web.AppRunner] = []

    async def start(app: web.Application, ports: int = 1) -> list[str]:
        runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await runner.setup()
        runners.append(runner)
        for _ in range(ports):
            await web.TCPSite(runner, "127.0.0.1", 0).start()
        return [f"http://127.0.0.1:{address[1]}" for address in runner.addresses]

    yield start
    for runner in runners:
        await runner.cleanup()
