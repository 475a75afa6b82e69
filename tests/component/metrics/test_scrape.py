"""Scraping engines over loopback: a mock vLLM's counters move with its traffic, one kept-alive
gzip connection per pod, bounded concurrency, and every broken server an inconclusive reason."""

from __future__ import annotations

import asyncio
import gzip
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from tests.component.loopback import Serve

from specpilot.fetch import scrape as scraping
from specpilot.fetch.outbound import allowing_loopback
from specpilot.fetch.scrape import MAX_BODY_BYTES, ScrapeTarget, scrape_all, scrape_session
from specpilot.metrics.engine_window import ENGINE_FAMILIES, EngineScrape, Scrape, ScrapeFailure, engine_window
from specpilot.metrics.exposition import parse_exposition

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
END = T0 + timedelta(seconds=60)
SPEC = ("--speculative-config", '{"model": "org/draft", "num_speculative_tokens": 3}')


async def traffic(url: str, *, requests: int, max_tokens: int) -> None:
    async with aiohttp.ClientSession() as session:

        async def one(index: int) -> None:
            body = {"prompt": f"probe {index}", "max_tokens": max_tokens, "ignore_eos": True, "stream": index % 2 == 0}
            async with session.post(url + "/v1/completions", json=body) as response:
                assert response.status == 200
                await response.read()

        await asyncio.gather(*(one(i) for i in range(requests)))


def window(*scrapes: Scrape, speculative: bool = True) -> Any:
    return engine_window(
        scrapes, start=T0, end=END, tolerance=timedelta(seconds=15), quantile=0.99, speculative=speculative
    )


async def exposition_of(url: str) -> bytes:
    async with aiohttp.ClientSession() as session, session.get(url + "/metrics") as response:
        return await response.read()


async def test_counters_move_as_a_mock_vllm_serves_traffic(mock_vllm: Any, scrape: Any) -> None:
    mock = await mock_vllm("--time-scale", "0.01", *SPEC)
    target = ScrapeTarget("spec-0", mock.url + "/metrics")
    async with scrape_session(addresses=allowing_loopback()) as session:
        before = await scraping.scrape(session, target, families=ENGINE_FAMILIES, timeout_s=5, at=T0)
        await traffic(mock.url, requests=8, max_tokens=40)
        after = await scraping.scrape(session, target, families=ENGINE_FAMILIES, timeout_s=5, at=END)
    assert isinstance(before, EngineScrape) and isinstance(after, EngineScrape)
    assert before.exposition.problems == after.exposition.problems == ()

    def generated(s: EngineScrape) -> float:
        return sum(s.exposition.series("vllm:generation_tokens_total").values())

    assert generated(before) == 0 and generated(after) == 8 * 40
    got = window(before, after)
    assert got.inconclusive is None
    m = await scrape(mock.url)  # prometheus-client's parse of the same counters, all grown from 0
    finished = m["vllm:request_decode_time_seconds_count"]
    assert finished == 8
    assert got.time_per_committed_token == pytest.approx(m["vllm:request_decode_time_seconds_sum"] / (320 - finished))
    accepted, drafts = m["vllm:spec_decode_num_accepted_tokens_total"], m["vllm:spec_decode_num_drafts_total"]
    assert got.acceptance_length == pytest.approx(1 + accepted / drafts)
    assert got.acceptance_rate == pytest.approx(accepted / m["vllm:spec_decode_num_draft_tokens_total"])
    assert 1 < got.acceptance_length <= 4
    assert len(got.per_position_acceptance) == 3
    assert list(got.per_position_acceptance) == sorted(got.per_position_acceptance, reverse=True)
    assert got.inter_token_latency is not None and got.inter_token_latency.value > 0
    assert got.kv_usage == ((T0, 0.0), (END, 0.0)) and got.running == 0


async def test_one_kept_alive_gzip_connection_serves_every_cycle(mock_vllm: Any, serve: Serve) -> None:
    text = await exposition_of((await mock_vllm("--time-scale", "0.01", *SPEC)).url)
    seen: list[tuple[str | None, Any]] = []

    async def metrics(request: web.Request) -> web.Response:
        seen.append(
            (request.headers.get("Accept-Encoding"), request.transport and request.transport.get_extra_info("peername"))
        )
        return web.Response(
            body=gzip.compress(text), headers={"Content-Encoding": "gzip", "Content-Type": "text/plain"}
        )

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    url = (await serve(app)).url
    async with scrape_session(addresses=allowing_loopback()) as session:
        results = [
            await scraping.scrape(
                session, ScrapeTarget("a", url + "/metrics"), families=ENGINE_FAMILIES, timeout_s=5, at=T0
            )
            for _ in range(3)
        ]
    expected = parse_exposition(text, ENGINE_FAMILIES)
    assert all(isinstance(r, EngineScrape) and r.exposition == expected for r in results)
    assert [encoding for encoding, _ in seen] == ["gzip"] * 3
    assert len({peer for _, peer in seen}) == 1  # the same client socket every time


async def broken_app(text: bytes) -> web.Application:
    """One misbehaviour per path; ``/good`` serves a real exposition."""

    async def good(_: web.Request) -> web.Response:
        return web.Response(body=text)

    async def truncated(_: web.Request) -> web.Response:
        return web.Response(body=text[: len(text) // 2 - 7])

    async def garbage(_: web.Request) -> web.Response:
        return web.Response(body=b"\x89PNG\r\n\x1a\n\x00\xff\xfe")

    async def html(_: web.Request) -> web.Response:
        return web.Response(text="<html><body>not metrics</body></html>\n", content_type="text/html")

    async def unavailable(_: web.Request) -> web.Response:
        return web.Response(status=503)

    async def cut(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Length": str(len(text))})
        await response.prepare(request)
        await response.write(text[:1000])
        assert request.transport is not None
        request.transport.close()
        return response

    async def bad_gzip(_: web.Request) -> web.Response:
        return web.Response(body=gzip.compress(text)[:500], headers={"Content-Encoding": "gzip"})

    async def brotli(_: web.Request) -> web.Response:
        return web.Response(body=b"\x0b\x02\x80", headers={"Content-Encoding": "br"})

    async def slow(_: web.Request) -> web.Response:
        answer: asyncio.Future[web.Response] = asyncio.get_running_loop().create_future()
        return await answer  # never resolved: the scrape's 0.3 s timeout ends it

    async def huge(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Length": str(MAX_BODY_BYTES + 1)})
        await response.prepare(request)
        await response.write(text)
        return response

    app = web.Application()
    for handler in (good, truncated, garbage, html, unavailable, cut, bad_gzip, brotli, slow, huge):
        app.router.add_get(f"/{handler.__name__}", handler)
    return app


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("/truncated", "a at 2026-11-29T12:01:00+00:00: truncated: the last line has no newline"),
        ("/garbage", "a at 2026-11-29T12:01:00+00:00: not UTF-8 text"),
        ("/html", "a at 2026-11-29T12:01:00+00:00: no vllm:generation_tokens_total"),
        (
            "/unavailable",
            "a: no scrape within 15s of the window end (last good scrape at 2026-11-29T12:00:00+00:00; "
            "then: GET http://127.0.0.1:{port}/unavailable: HTTP 503)",
        ),
        ("/cut", "then: GET http://127.0.0.1:{port}/cut: body cut off"),
        ("/bad_gzip", "then: GET http://127.0.0.1:{port}/bad_gzip: gzip body cut off before its end)"),
        ("/brotli", "then: GET http://127.0.0.1:{port}/brotli: Content-Encoding 'br', though only gzip was accepted)"),
        ("/slow", "then: GET http://127.0.0.1:{port}/slow: no answer within 0.3s)"),
        ("/huge", f"then: GET http://127.0.0.1:{{port}}/huge: body over {MAX_BODY_BYTES} bytes)"),
        (":refused", "then: GET http://127.0.0.1:{free}/metrics: ClientConnectorError: Cannot connect to host"),
    ],
    ids=["truncated", "garbage", "html", "503", "cut-off", "bad-gzip", "not-gzip", "timeout", "too-large", "refused"],
)
async def test_a_broken_server_makes_the_window_inconclusive_with_a_reason(
    mock_vllm: Any, serve: Serve, free_port: int, path: str, reason: str
) -> None:
    text = await exposition_of((await mock_vllm("--time-scale", "0.01", *SPEC)).url)
    url = (await serve(await broken_app(text))).url
    port = url.rsplit(":", 1)[1]
    bad = f"http://127.0.0.1:{free_port}/metrics" if path == ":refused" else url + path
    async with scrape_session(addresses=allowing_loopback()) as session:
        first = await scraping.scrape(
            session, ScrapeTarget("a", url + "/good"), families=ENGINE_FAMILIES, timeout_s=5, at=T0
        )
        last = await scraping.scrape(session, ScrapeTarget("a", bad), families=ENGINE_FAMILIES, timeout_s=0.3, at=END)
    assert isinstance(first, EngineScrape) and first.exposition.problems == ()
    got = window(first, last)
    assert got.inconclusive is not None
    assert reason.format(port=port, free=free_port) in got.inconclusive, got.inconclusive


async def test_scrape_all_keeps_the_targets_order_under_its_concurrency_bound(serve: Serve, free_port: int) -> None:
    in_flight = highest = answered = 0
    changed = asyncio.Condition()

    async def metrics(_: web.Request) -> web.Response:
        """Each answer held until the bound's worth of scrapes are in flight (or all the rest are)."""
        nonlocal in_flight, highest, answered
        async with changed:
            in_flight += 1
            highest = max(highest, in_flight)
            changed.notify_all()
            await changed.wait_for(lambda: in_flight >= 4 or answered + in_flight == len(urls))
            in_flight -= 1
            answered += 1
            changed.notify_all()
        return web.Response(text="vllm:num_requests_running 1\n")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    urls = (await serve(app, ports=12)).urls
    targets = [ScrapeTarget(f"pod-{i}", f"{url}/metrics") for i, url in enumerate(urls)]
    targets.insert(5, ScrapeTarget("gone", f"http://127.0.0.1:{free_port}/metrics"))
    async with scrape_session(addresses=allowing_loopback()) as session:
        results = await scrape_all(
            session, targets, families=("vllm:num_requests_running",), timeout_s=5, at=T0, concurrency=4
        )
    assert [r.pod for r in results] == [t.pod for t in targets]
    assert isinstance(results[5], ScrapeFailure)
    assert all(isinstance(r, EngineScrape) and r.exposition.problems == () for i, r in enumerate(results) if i != 5)
    assert highest == 4
