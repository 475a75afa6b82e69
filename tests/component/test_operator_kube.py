"""The operator's API client against a throttling fake API server: a 429 is waited out as the server
asks (Retry-After, in seconds or as a date), a few times, then reported."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import aiohttp
import pytest
from aiohttp import web
from tests.component.loopback import Serve

from specpilot.controller.kube import THROTTLED_RETRIES, ApiError, Kube
from specpilot.kubeaccess import Fixed, KubeAccess, retry_after

CONFIGMAP = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "p1-routes", "namespace": "ns1"}}


class Throttling:
    """Answers 429 with each of `waits` as Retry-After, then applies."""

    def __init__(self) -> None:
        self.waits: list[str] = []
        self.calls = 0

    async def apply(self, request: web.Request) -> web.Response:
        self.calls += 1
        if self.waits:
            status = {"kind": "Status", "code": 429, "message": "too many requests, retry later"}
            return web.json_response(status, status=429, headers={"Retry-After": self.waits.pop(0)})
        body = await request.json()
        return web.json_response({**body, "metadata": {**body["metadata"], "resourceVersion": "7"}})


@pytest.fixture
async def server(serve: Serve) -> tuple[Throttling, str]:
    fake = Throttling()
    app = web.Application()
    app.router.add_patch("/api/v1/namespaces/ns1/configmaps/p1-routes", fake.apply)
    return fake, (await serve(app)).url


async def test_a_throttled_call_waits_as_the_server_asks_then_lands(server: tuple[Throttling, str]) -> None:
    fake, url = server
    waited: list[float] = []

    async def sleep(seconds: float) -> None:
        waited.append(seconds)

    soon = format_datetime(datetime.now(UTC) + timedelta(seconds=20), usegmt=True)
    fake.waits = ["3", soon]
    async with aiohttp.ClientSession() as session:
        kube = Kube(KubeAccess(url, Fixed()), session, observe=lambda *_: None, sleep=sleep)
        out = await kube.apply(CONFIGMAP)
        assert out["metadata"]["resourceVersion"] == "7" and fake.calls == 3
        assert waited[0] == 3.0 and 15 < waited[1] <= 20, waited

        fake.waits = ["1"] * (THROTTLED_RETRIES + 1)
        with pytest.raises(ApiError) as refused:
            await kube.apply(CONFIGMAP)
    assert refused.value.code == 429 and "too many requests" in str(refused.value)
    assert waited[2:] == [1.0] * THROTTLED_RETRIES


def test_retry_after_reads_seconds_and_dates_and_caps_them() -> None:
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    assert retry_after({"Retry-After": "5"}, now=now) == 5.0
    assert retry_after({"Retry-After": "Tue, 01 Dec 2026 12:00:09 GMT"}, now=now) == 9.0
    assert retry_after({"Retry-After": "3600"}, now=now) == 30.0  # capped
    assert retry_after({"Retry-After": "soon"}, now=now) == 1.0 == retry_after({}, now=now)
    assert retry_after({"Retry-After": "Tue, 01 Dec 2026 11:00:00 GMT"}, now=now) == 0.0  # already past
