"""The bounded sample log and its cursor."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from specpilot.router.core.sample_log import SampleLog
from specpilot.wire.names import Arm
from specpilot.wire.samples import OpenRequest, RequestOutcome, RequestSample


def fill(log: SampleLog, count: int) -> None:
    for _ in range(count):
        log.append(
            RequestSample(
                seq=log.next_seq(), at=0.0, scope="s", arm=Arm.BASELINE, endpoint="e", model="m", stream=True,
                status=200, outcome=RequestOutcome.OK, e2e=1.0, ttft=0.1, output_tokens=3, tokens_from_usage=True,
                decode=0.2, deadline_met=None, fallback=None,
            )
        )  # fmt: skip


@pytest.mark.parametrize(
    ("written", "cursor", "limit", "expected"),
    [
        pytest.param(0, 0, 10, ([], 0, 0), id="empty"),
        pytest.param(3, 0, 10, ([1, 2, 3], 3, 0), id="all"),
        pytest.param(3, 1, 10, ([2, 3], 3, 0), id="after-cursor"),
        pytest.param(3, 3, 10, ([], 3, 0), id="caught-up"),
        pytest.param(5, 0, 2, ([1, 2], 2, 0), id="paged"),
        pytest.param(8, 0, 10, ([4, 5, 6, 7, 8], 8, 3), id="oldest-dropped"),
        pytest.param(8, 2, 2, ([4, 5], 5, 1), id="dropped-and-paged"),
        pytest.param(8, 6, 10, ([7, 8], 8, 0), id="within-ring"),
        pytest.param(3, 99, 10, ([], 3, 0), id="cursor-from-an-earlier-epoch"),
        pytest.param(3, -5, 10, ([1, 2, 3], 3, 0), id="negative-cursor"),
    ],
)
def test_since_returns_samples_after_the_cursor_and_counts_the_lost(
    written: int, cursor: int, limit: int, expected: tuple[list[int], int, int]
) -> None:
    seqs, next_cursor, dropped = expected
    log = SampleLog(capacity=5)
    fill(log, written)
    page = log.since(cursor, limit)
    assert [s.seq for s in page.samples] == seqs
    assert page.next_cursor == next_cursor
    assert page.dropped == dropped
    assert page.epoch == log.epoch


def test_reading_in_pages_sees_every_sample_once() -> None:
    log = SampleLog(capacity=100)
    fill(log, 37)
    cursor, seen = 0, []
    while page := log.since(cursor, 10).samples:
        seen += [s.seq for s in page]
        cursor = page[-1].seq
    assert seen == list(range(1, 38))


def test_each_router_start_has_its_own_epoch() -> None:
    assert SampleLog(1).epoch != SampleLog(1).epoch


def test_a_page_lists_the_requests_in_flight_on_the_arm_each_is_on_when_it_is_made() -> None:
    @dataclass
    class Proxied:
        at: float
        scope: str
        arm: Arm

    log = SampleLog(5)
    first, second = Proxied(1.0, "chat", Arm.SPECULATIVE), Proxied(2.0, "chat", Arm.CONTROL)
    log.opened(first)
    log.opened(second)
    first.arm = Arm.BASELINE  # diverted after it was opened
    assert log.since(0, 10).open == (
        OpenRequest(at=1.0, scope="chat", arm=Arm.BASELINE),
        OpenRequest(at=2.0, scope="chat", arm=Arm.CONTROL),
    )
    log.closed(first)
    log.closed(first)  # closing twice is harmless
    assert [r.at for r in log.since(0, 10).open] == [2.0]
