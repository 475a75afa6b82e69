"""The admin port: samples with a cursor, metrics that agree with them, health and routes."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from tests.component.router.harness import Harness, HarnessFactory

from specpilot.testing.waiting import eventually
from specpilot.wire.routes import RoutingTable


def mixed() -> RoutingTable:
    """A fresh table (its age counts from now) with a split `code` scope and an all-baseline `chat` scope."""
    return Harness.table(Harness.scope("code", spec=50, deadline=5), Harness.scope("chat"))


async def send_mix(h: Harness) -> None:
    for i in range(24):
        code = i % 2 == 1  # the other half names the chat scope in the scope header
        headers = {} if code else {"X-Specpilot-Scope": "chat"}
        if i % 6 == 5:
            headers["x-fake-status"] = "503"
        async with await h.chat(team="code" if code else None, headers=headers, stream=i % 3 != 0) as resp:
            await resp.read()


async def test_samples_are_read_with_a_cursor_and_bounded(make_router: HarnessFactory) -> None:
    h = await make_router("--max-samples", "10", routes=mixed())
    await send_mix(h)
    first = await h.samples()
    assert [s["seq"] for s in first["samples"]] == list(range(15, 25))
    assert first["dropped"] == 14 and first["next"] == 24
    async with await h.chat(team="code") as resp:
        await resp.read()
    after = await h.samples(since=first["next"])
    assert [s["seq"] for s in after["samples"]] == [25]
    assert after["dropped"] == 0 and after["epoch"] == first["epoch"]
    async with h.client.get(f"{h.admin}/samples", params={"since": "20", "limit": "2"}) as resp:
        page = await resp.json()
    assert [s["seq"] for s in page["samples"]] == [21, 22] and page["next"] == 22
    async with h.client.get(f"{h.admin}/samples", params={"since": "x"}) as resp:
        assert resp.status == 400


async def test_metrics_agree_with_samples_per_scope_and_arm(make_router: HarnessFactory) -> None:
    h = await make_router(routes=mixed())
    await send_mix(h)
    samples = (await h.samples())["samples"]
    assert len(samples) == 24
    metric = await h.metrics()
    by_outcome = Counter((s["scope"], s["arm"], s["outcome"]) for s in samples)
    for (scope, arm, outcome), count in by_outcome.items():
        assert metric("specpilot_router_requests_total", scope=scope, arm=arm, outcome=outcome) == count
    for (scope, arm), count in Counter((s["scope"], s["arm"]) for s in samples if s["ttftSeconds"]).items():
        assert metric("specpilot_router_ttft_seconds_count", scope=scope, arm=arm) == count
        ttft_sum = sum(s["ttftSeconds"] for s in samples if s["ttftSeconds"] and (s["scope"], s["arm"]) == (scope, arm))
        assert abs(metric("specpilot_router_ttft_seconds_sum", scope=scope, arm=arm) - ttft_sum) < 1e-9
    for (scope, arm), tokens in _sum_tokens(samples).items():
        assert metric("specpilot_router_output_tokens_total", scope=scope, arm=arm) == tokens
    met = Counter((s["arm"], s["deadlineMet"]) for s in samples if s["scope"] == "code")
    for (arm, ok), count in met.items():
        assert metric("specpilot_router_deadline_total", scope="code", arm=arm, met="true" if ok else "false") == count
    assert metric("specpilot_router_route_weight", scope="code", arm="speculative") == 50
    assert metric("specpilot_router_table_generation") == 1
    assert metric("specpilot_router_ready_endpoints", arm="baseline") == 1


def _sum_tokens(samples: list[dict[str, object]]) -> Counter[tuple[str, str]]:
    tokens: Counter[tuple[str, str]] = Counter()
    for s in samples:
        tokens[(str(s["scope"]), str(s["arm"]))] += int(s["outputTokens"] or 0)  # type: ignore[call-overload]
    return tokens


async def test_health_readiness_and_effective_routes(make_router: HarnessFactory) -> None:
    h = await make_router(spec_endpoints="", routes=mixed())
    for path in ("/healthz", "/readyz"):
        async with h.client.get(f"{h.admin}{path}") as resp:
            assert resp.status == 200
    async with h.client.get(f"{h.admin}/routes") as resp:
        routes = await resp.json()
    assert routes["generation"] == 1 and routes["tableFallback"] is None
    assert routes["scopes"]["code"]["weights"] == {"baseline": 100, "speculative": 0, "control": 0, "alternative": 0}
    assert routes["scopes"]["code"]["fallbacks"] == ["speculative_unavailable"]
    assert routes["endpoints"]["speculative"] == []


async def test_a_stale_table_shows_on_routes_and_metrics_without_traffic(make_router: HarnessFactory) -> None:
    h = await make_router("--max-table-age", "60", routes=mixed())
    h.use(Harness.table(Harness.scope("code", spec=50), age=61))
    async with h.client.get(f"{h.admin}/routes") as resp:
        assert (await resp.json())["tableFallback"] == "table_stale"
    metric = await h.metrics()
    assert metric("specpilot_router_table_fallback", reason="table_stale") == 1
    assert metric("specpilot_router_route_weight", scope="code", arm="speculative") == 0
    async with await h.chat(team="code") as resp:
        assert resp.headers["X-Specpilot-Arm"] == "baseline"


async def test_admin_and_traffic_ports_are_apart(make_router: HarnessFactory) -> None:
    h = await make_router()
    assert h.router.addresses[0] != h.router.addresses[1]
    async with h.client.post(f"{h.admin}/v1/chat/completions", json={}) as resp:
        assert resp.status in (404, 405)
    async with h.client.get(f"{h.url}/samples") as resp:
        assert resp.status == 404


async def test_samples_list_the_requests_in_flight_on_their_arms_until_they_finish(make_router: HarnessFactory) -> None:
    """A request still being answered is in no sample yet, so a reader could not count it as sent: each
    page lists it (with its mirrored copy) until its sample is made."""
    h = await make_router(routes=Harness.table(Harness.scope("code", spec=100, mirror=True)), control=True)
    slow = asyncio.ensure_future(h.chat(team="code", headers={"x-fake-chunks": "4", "x-fake-gap": "0.5"}))
    log = h.router.samples
    await eventually("the request and its copy in flight", lambda: len(log.since(0, 10).open) == 2)
    page = await h.samples()
    assert page["samples"] == []
    assert sorted(r["arm"] for r in page["open"]) == ["control", "speculative"]  # the request and its copy
    assert {r["scope"] for r in page["open"]} == {"code"}
    assert max(r["at"] for r in page["open"]) - min(r["at"] for r in page["open"]) < 0.01  # sent at once
    async with await slow as response:
        await response.read()
    await eventually("both ended", lambda: not log.since(0, 10).open)  # the copy may end a moment later
    done = await h.samples()
    assert done["open"] == [] and sorted(s["arm"] for s in done["samples"]) == ["control", "speculative"]
    started = {s["arm"]: s["at"] for s in done["samples"]}
    assert started == pytest.approx({r["arm"]: r["at"] for r in page["open"]}, abs=1e-5)
