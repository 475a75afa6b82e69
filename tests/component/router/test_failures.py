"""Failures are passed on clearly and counted: rejections, errors, timeouts, cancellations."""

from __future__ import annotations

import asyncio
import json

import pytest
from tests.component.router.harness import Harness, HarnessFactory


@pytest.mark.parametrize(
    ("status", "outcome"),
    [(429, "rejected"), (503, "rejected"), (500, "upstream_error"), (400, "client_error")],
)
async def test_upstream_error_statuses_pass_through_and_count(
    make_router: HarnessFactory, status: int, outcome: str
) -> None:
    h = await make_router(routes=Harness.table(Harness.scope("code", spec=100, deadline=5)))
    async with await h.chat(team="code", headers={"x-fake-status": str(status)}) as resp:
        assert resp.status == status
        assert (await resp.json())["error"]["code"] == status
    (sample,) = (await h.samples())["samples"]
    assert (sample["status"], sample["outcome"]) == (status, outcome)
    assert sample["deadlineMet"] is (None if outcome == "client_error" else False)
    metric = await h.metrics()
    assert metric("specpilot_router_requests_total", scope="code", arm="speculative", outcome=outcome) == 1
    assert metric("specpilot_router_e2e_seconds_count", scope="code", arm="speculative", outcome=outcome) == 1


@pytest.mark.parametrize(
    ("fault", "client_sees"),
    [
        ({"x-fake-drop-after": "2"}, b"upstream failed mid-response"),
        ({"x-fake-error-after": "2"}, b"engine died"),
        ({"x-fake-no-done": "1"}, None),
    ],
    ids=["dropped-connection", "error-event", "no-done"],
)
async def test_broken_streams_count_as_upstream_errors(
    make_router: HarnessFactory, fault: dict[str, str], client_sees: bytes | None
) -> None:
    h = await make_router()
    async with await h.chat(team="code", headers=fault) as resp:
        assert resp.status == 200
        events = await h.read_sse(resp)
    if client_sees is not None:
        assert client_sees in b"".join(events)
    (sample,) = (await h.samples())["samples"]
    assert sample["outcome"] == "upstream_error"


async def test_garbage_events_are_passed_on_without_harm(make_router: HarnessFactory) -> None:
    h = await make_router()
    async with await h.chat(team="code", headers={"x-fake-garbage": "1"}) as resp:
        events = await h.read_sse(resp)
    assert b"{not json" in events and events[-1] == b"[DONE]"
    (sample,) = (await h.samples())["samples"]
    assert sample["outcome"] == "ok" and sample["outputTokens"] == 4


async def test_no_answer_in_time_is_504_and_the_upstream_request_is_cancelled(make_router: HarnessFactory) -> None:
    h = await make_router("--request-timeout", "0.2")
    async with await h.chat(team="code", headers={"x-fake-hang": "1"}) as resp:
        assert resp.status == 504
        assert (await resp.json())["error"]["type"] == "GatewayTimeoutError"
    await h.wait_for(lambda: h.speculative.cancelled == 1)
    (sample,) = (await h.samples())["samples"]
    assert (sample["status"], sample["outcome"]) == (504, "timeout")


async def test_a_stream_cut_by_the_timeout_ends_with_an_error_event(make_router: HarnessFactory) -> None:
    h = await make_router("--request-timeout", "0.3")
    async with await h.chat(team="code", headers={"x-fake-gap": "0.1", "x-fake-chunks": "50"}) as resp:
        assert resp.status == 200
        events = await h.read_sse(resp)
    assert json.loads(events[-2])["error"]["code"] == 504 and events[-1] == b"[DONE]"
    await h.wait_for(lambda: h.speculative.active == 0)
    (sample,) = (await h.samples())["samples"]
    assert sample["outcome"] == "timeout" and sample["ttftSeconds"] is not None


@pytest.mark.parametrize("when", ["before-headers", "mid-stream"])
async def test_a_client_that_leaves_cancels_the_upstream_request(make_router: HarnessFactory, when: str) -> None:
    h = await make_router()
    fault = {"x-fake-hang": "1"} if when == "before-headers" else {"x-fake-gap": "0.05", "x-fake-chunks": "200"}
    task = asyncio.create_task(h.chat(team="code", headers=fault))
    await h.wait_for(lambda: h.speculative.active == 1)
    if when == "mid-stream":
        resp = await task
        await resp.content.readany()
        resp.close()
    else:
        task.cancel()
    await h.wait_for(lambda: h.speculative.cancelled == 1 and h.speculative.active == 0)
    await h.wait_for(lambda: h.router.samples.since(0, 10).samples != ())
    (sample,) = (await h.samples())["samples"]
    assert sample["outcome"] == "client_cancel"
    assert h.router.state.outstanding == {}
    assert (await h.metrics())("specpilot_router_in_flight", scope="code", arm="speculative") == 0


async def test_a_client_that_leaves_after_done_got_an_ok_answer(make_router: HarnessFactory) -> None:
    h = await make_router()
    resp = await h.chat(team="code", headers={"x-fake-linger": "1"})
    seen = b""
    while b"[DONE]" not in seen:
        seen += await resp.content.readany()
    resp.close()
    await h.wait_for(lambda: h.router.samples.since(0, 10).samples != ())
    (sample,) = (await h.samples())["samples"]
    assert (sample["outcome"], sample["outputTokens"]) == ("ok", 4)


async def test_no_endpoint_anywhere_is_503(make_router: HarnessFactory) -> None:
    h = await make_router(spec_endpoints="")
    h.router.state.set_endpoints({})
    async with await h.chat(team="code") as resp:
        assert resp.status == 503
        assert "no ready endpoint" in (await resp.json())["error"]["message"]
    (sample,) = (await h.samples())["samples"]
    assert (sample["arm"], sample["outcome"]) == ("baseline", "no_endpoint")
    async with h.client.get(f"{h.admin}/readyz") as resp:
        assert resp.status == 503


async def test_every_endpoint_refusing_is_502(make_router: HarnessFactory, free_port: int) -> None:
    h = await make_router(spec_endpoints=f"127.0.0.1:{free_port}")
    await h.baseline.stop()
    async with await h.chat(team="code") as resp:
        assert resp.status == 502
        assert (await resp.json())["error"]["type"] == "BadGatewayError"
    (sample,) = (await h.samples())["samples"]
    assert sample["outcome"] == "upstream_error"
