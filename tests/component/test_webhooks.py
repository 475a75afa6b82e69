"""Business webhooks over real HTTP: a failing one is named by its status code, never its reply."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp import web
from tests.component.loopback import Serve

from specpilot.api.spec import Webhook
from specpilot.controller.quality_gates import call_webhooks

SECRET = "internal-dashboard-token=hunter2 " * 200  # what an internal page the URL reaches might say


@pytest.fixture
async def hooks(serve: Serve) -> str:
    """A webhook server on loopback: /ok passes, /fail answers 500 with a long body, /slow never answers."""
    received: list[dict[str, object]] = []

    async def ok(request: web.Request) -> web.Response:
        received.append(await request.json())
        return web.Response(text="fine")

    async def fail(request: web.Request) -> web.Response:
        return web.Response(status=500, text=SECRET)

    async def slow(request: web.Request) -> web.Response:
        answer: asyncio.Future[web.Response] = asyncio.get_running_loop().create_future()
        return await answer  # never resolved: the webhook's timeout ends the call, and the handler with it

    app = web.Application()
    app.add_routes([web.post("/ok", ok), web.post("/fail", fail), web.post("/slow", slow)])
    return (await serve(app)).url


async def test_a_webhook_result_names_the_status_code_and_never_the_reply(hooks: str) -> None:
    webhooks = [
        Webhook.from_wire({"name": "ok", "url": f"{hooks}/ok"}),
        Webhook.from_wire({"name": "fail", "url": f"{hooks}/fail", "critical": True}),
        Webhook.from_wire({"name": "slow", "url": f"{hooks}/slow", "timeout": "1s"}),
    ]
    async with aiohttp.ClientSession() as session:
        ok, fail, slow = await call_webhooks(session, webhooks, {"scope": "chat"})
    assert (ok.ok, ok.detail) == (True, "HTTP 200")
    assert (fail.ok, fail.critical, fail.detail) == (False, True, "HTTP 500")
    assert not slow.ok and slow.detail.startswith("no answer")
    for result in (ok, fail, slow):
        assert "hunter2" not in result.detail and "fine" not in result.detail
