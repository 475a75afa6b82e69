"""Reading a real router's ``/samples`` with a cursor into the ledger: pages, the next cursor, a
restart seen as a new epoch, and reads that fail or return something else as reasons."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from aiohttp import web
from tests.component.loopback import Serve
from tests.component.router.harness import Harness, HarnessFactory

from specpilot.fetch.outbound import allowing_loopback
from specpilot.fetch.scrape import ReadFailure, read_samples, scrape_session
from specpilot.metrics.arm_requests import arm_requests
from specpilot.metrics.ledger import SampleLedger
from specpilot.wire.names import Arm
from specpilot.wire.samples import RequestOutcome, SamplesPage


async def send(h: Harness, count: int, **headers: str) -> None:
    for _ in range(count):
        async with await h.chat(team="code", headers=headers) as response:
            await response.read()


async def test_samples_are_read_page_by_page_with_the_cursor(make_router: HarnessFactory) -> None:
    h = await make_router()
    started = datetime.now(UTC)
    await send(h, 4)
    await send(h, 1, **{"x-fake-status": "503"})
    ledger = SampleLedger(horizon=timedelta(minutes=10))
    pages = []
    async with scrape_session(addresses=allowing_loopback()) as session:
        for _ in range(3):
            page = await read_samples(session, h.admin, cursor=ledger.cursor("router-0"), limit=3, timeout_s=5)
            assert isinstance(page, SamplesPage)
            pages.append(page)
            read = datetime.now(UTC)  # the window closes at the last good read
            ledger.record("router-0", page, at=read, limit=3)
    assert [[s.seq for s in page.samples] for page in pages] == [[1, 2, 3], [4, 5], []]
    assert ledger.cursor("router-0") == 5
    got = arm_requests(ledger.samples(started, read), scope="code", arm=Arm.SPECULATIVE, start=started, end=read)
    assert got.outcomes == {RequestOutcome.OK: 4, RequestOutcome.REJECTED: 1}
    assert len(got.decode_seconds) == len(got.committed_tokens) == 4
    assert ledger.gaps(started, read) == ()


async def test_a_restarted_router_is_a_new_epoch_and_a_gap(make_router: HarnessFactory) -> None:
    first, second = await make_router(), await make_router()  # the same pod before and after a restart
    await send(first, 2)
    await send(second, 3)
    ledger = SampleLedger(horizon=timedelta(minutes=10))
    async with scrape_session(addresses=allowing_loopback()) as session:
        page = await read_samples(session, first.admin, cursor=0, limit=100, timeout_s=5)
        assert isinstance(page, SamplesPage)
        assert ledger.record("router-0", page, at=datetime.now(UTC), limit=100) == 2
        page = await read_samples(session, second.admin, cursor=ledger.cursor("router-0"), limit=100, timeout_s=5)
        assert isinstance(page, SamplesPage) and [s.seq for s in page.samples] == [3]  # 1 and 2 of the new epoch
        restarted_at = datetime.now(UTC)
        assert ledger.record("router-0", page, at=restarted_at, limit=100) == 0
        page = await read_samples(session, second.admin, cursor=0, limit=100, timeout_s=5)
        assert isinstance(page, SamplesPage)
        assert ledger.record("router-0", page, at=datetime.now(UTC), limit=100) == 3
    (gap,) = ledger.gaps(restarted_at - timedelta(seconds=1), restarted_at)
    assert gap.startswith("router router-0 restarted (epoch ")
    assert len(ledger.samples(restarted_at - timedelta(minutes=1), datetime.now(UTC))) == 5


async def test_failed_reads_come_back_as_reasons(make_router: HarnessFactory, serve: Serve, free_port: int) -> None:
    h = await make_router()

    async def not_a_page(_: web.Request) -> web.Response:
        return web.json_response({"epoch": 7, "samples": []})

    async def not_json(_: web.Request) -> web.Response:
        return web.Response(text="<html>")

    app = web.Application()
    app.router.add_get("/wrong/samples", not_a_page)
    app.router.add_get("/html/samples", not_json)
    url = (await serve(app)).url
    fake = f"http://{h.baseline.address}"  # an engine, not a router: it has no /samples
    async with scrape_session(addresses=allowing_loopback()) as session:
        failures = [
            await read_samples(session, admin, cursor=0, limit=10, timeout_s=5)
            for admin in (fake, f"{url}/wrong", f"{url}/html", f"http://127.0.0.1:{free_port}")
        ]
    assert all(isinstance(f, ReadFailure) for f in failures)
    reasons = [f.reason for f in failures if isinstance(f, ReadFailure)]
    assert reasons[0] == f"GET {fake}/samples: HTTP 404"
    assert reasons[1] == f"GET {url}/wrong/samples: not a samples page: epoch: expected a string, got int 7"
    assert reasons[2].startswith(f"GET {url}/html/samples: not a samples page: Expecting value")
    assert reasons[3].startswith(f"GET http://127.0.0.1:{free_port}/samples: ClientConnectorError: Cannot connect")
