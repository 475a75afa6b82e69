"""The sample ledger: cursors per router pod, samples within the horizon, and every way samples can
be lost (dropped by the ring, a router restart, a pod gone, reads failing) told as a gap."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from specpilot.metrics.ledger import SampleLedger
from specpilot.wire.names import Arm
from specpilot.wire.samples import OpenRequest, RequestSample, SamplesPage
from tests.unit.metrics.builders import ok_sample

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
LIMIT = 100
SAMPLE = ok_sample()


def t(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def finished(seq: int, seconds: float, **changes: object) -> RequestSample:
    """Sample `seq`, finishing `seconds` after T0."""
    return replace(SAMPLE, seq=seq, at=t(seconds).timestamp() - SAMPLE.e2e, **changes)


def page(
    *samples: RequestSample,
    epoch: str = "e1",
    dropped: int = 0,
    cursor: int = 0,
    open: tuple[OpenRequest, ...] = (),
) -> SamplesPage:
    return SamplesPage(
        epoch=epoch, samples=samples, next_cursor=samples[-1].seq if samples else cursor, dropped=dropped, open=open
    )


def ledger(horizon: float = 3600) -> SampleLedger:
    return SampleLedger(horizon=timedelta(seconds=horizon))


def test_cursors_advance_per_pod_and_samples_come_back_by_finish_time() -> None:
    book = ledger()
    assert book.cursor("r-0") == 0
    assert book.record("r-0", page(finished(1, 5), finished(2, 15)), at=t(20), limit=LIMIT) == 2
    assert book.record("r-1", page(finished(1, 12)), at=t(20), limit=LIMIT) == 1
    assert book.record("r-0", page(cursor=2), at=t(30), limit=LIMIT) == 2
    assert (book.cursor("r-0"), book.cursor("r-1")) == (2, 1)
    assert [s.seq for s in book.samples(t(10), t(20))] == [2, 1]
    assert book.gaps(t(0), t(20)) == ()


def test_a_complete_window_has_no_gap_and_a_window_past_the_last_read_has_one() -> None:
    book = ledger()
    book.record("r-0", page(finished(1, 5)), at=t(20), limit=LIMIT)
    assert book.gaps(t(0), t(20)) == ()
    assert book.gaps(t(0), t(25)) == ("router r-0: read only up to 2026-11-29T12:00:20+00:00",)


def test_a_full_page_covers_only_up_to_its_last_sample() -> None:
    book = ledger()
    assert book.record("r-0", page(finished(1, 5), finished(2, 8)), at=t(20), limit=2) == 2
    assert book.gaps(t(0), t(10)) == ("router r-0: read only up to 2026-11-29T12:00:08+00:00",)
    book.record("r-0", page(finished(3, 9)), at=t(21), limit=2)
    assert book.gaps(t(0), t(10)) == ()


def test_dropped_samples_are_a_gap_up_to_the_oldest_sample_kept() -> None:
    book = ledger()
    book.record("r-0", page(finished(1, 5)), at=t(10), limit=LIMIT)
    book.record("r-0", page(finished(9, 40), dropped=7), at=t(50), limit=LIMIT)
    reason = (
        "router r-0: 7 samples that finished between 2026-11-29T12:00:10+00:00 and 2026-11-29T12:00:40+00:00 "
        "were pushed out of its buffer unread"
    )
    assert book.gaps(t(20), t(30)) == (reason,)
    assert book.gaps(t(0), t(10)) == (reason,)  # touches the gap's start: conservative
    assert book.gaps(t(41), t(50)) == ()


def test_dropped_before_the_first_read_is_a_gap_up_to_the_oldest_sample() -> None:
    book = ledger()
    book.record("r-0", page(finished(500, 40), dropped=499), at=t(50), limit=LIMIT)
    assert book.gaps(t(0), t(30)) == (
        "router r-0: 499 samples that finished before 2026-11-29T12:00:40+00:00 were pushed out of its buffer unread",
    )
    assert book.gaps(t(41), t(50)) == ()


def test_a_router_restart_is_a_gap_and_the_new_epoch_is_read_from_the_start() -> None:
    book = ledger()
    book.record("r-0", page(finished(1, 5), finished(2, 8)), at=t(10), limit=LIMIT)
    # Read with the old cursor, the restarted router serves seq > 2 of its new epoch: seq 1-2 would be missed.
    assert book.record("r-0", page(finished(3, 18), epoch="e2"), at=t(20), limit=LIMIT) == 0
    assert book.cursor("r-0") == 0
    assert [s.seq for s in book.samples(t(0), t(20))] == [1, 2]  # the page read with the old cursor is not taken
    reason = (
        "router r-0 restarted (epoch e1 to e2): samples that finished between 2026-11-29T12:00:10+00:00 and "
        "2026-11-29T12:00:20+00:00 were lost"
    )
    assert book.gaps(t(12), t(20)) == (reason,)
    assert (
        book.record(
            "r-0", page(finished(1, 14, scope="x"), finished(2, 16), finished(3, 18), epoch="e2"), at=t(21), limit=LIMIT
        )
        == 3
    )
    assert len(book.samples(t(0), t(20))) == 5
    assert book.gaps(t(20.5), t(21)) == ()


def test_a_failed_read_leaves_the_pod_read_up_to_its_last_good_read_until_one_succeeds() -> None:
    book = ledger()
    book.record("r-0", page(finished(1, 5)), at=t(10), limit=LIMIT)
    book.record_failure("r-0", "GET http://r-0:9090/samples: no answer within 2s", at=t(20))
    assert book.gaps(t(0), t(20)) == (
        "router r-0: read only up to 2026-11-29T12:00:10+00:00; its last read failed at 2026-11-29T12:00:20+00:00: "
        "GET http://r-0:9090/samples: no answer within 2s",
    )
    assert book.gaps(t(0), t(10)) == ()
    book.record("r-0", page(finished(2, 15)), at=t(30), limit=LIMIT)
    assert book.gaps(t(0), t(30)) == ()  # the cursor picked up where it was: nothing lost


def test_a_pod_never_read_and_no_pod_at_all_are_gaps() -> None:
    book = ledger()
    assert book.gaps(t(0), t(10)) == ("no router pod is being read",)
    book.record_failure("r-0", "refused", at=t(5))
    assert book.gaps(t(0), t(10)) == (
        "router r-0: not read yet; its last read failed at 2026-11-29T12:00:05+00:00: refused",
    )


def test_a_router_pod_that_went_away_keeps_its_samples_and_leaves_a_gap() -> None:
    book = ledger()
    book.record("r-0", page(finished(1, 5)), at=t(10), limit=LIMIT)
    book.record("r-1", page(finished(1, 6)), at=t(10), limit=LIMIT)
    book.forget("r-0", at=t(15))
    book.forget("r-9", at=t(15))  # never known: nothing to say
    assert len(book.samples(t(0), t(10))) == 2
    assert book.gaps(t(0), t(10)) == (
        "router r-0 went away: samples that finished between 2026-11-29T12:00:10+00:00 and "
        "2026-11-29T12:00:15+00:00 were never read",
    )


def test_samples_and_gaps_older_than_the_horizon_are_let_go() -> None:
    book = ledger(horizon=60)
    book.record("r-0", page(finished(1, 5), dropped=3), at=t(10), limit=LIMIT)
    book.record("r-0", page(finished(2, 50)), at=t(60), limit=LIMIT)
    assert len(book.samples(t(0), t(60))) == 2
    book.record("r-0", page(finished(3, 100)), at=t(110), limit=LIMIT)
    assert [s.seq for s in book.samples(t(0), t(110))] == [2, 3]
    assert book.gaps(t(0), t(40)) == (
        "the window starts before 2026-11-29T12:00:50+00:00, the oldest time samples are kept for",
    )
    assert book.gaps(t(50), t(110)) == ()


def test_arrivals_count_what_started_in_the_window_finished_or_still_in_flight_at_the_newest_read() -> None:
    """Both arms are sent the same four requests in [0, 10); the control arm has finished them all by the
    read at 12 s, the slow speculative arm one, with the other three in flight: both arrived 4."""
    book = ledger()

    def started(seq: int, at: float, e2e: float, arm: Arm) -> RequestSample:
        return replace(SAMPLE, seq=seq, at=t(at).timestamp(), e2e=e2e, arm=arm)

    control = [started(i + 1, 2.0 * i, 1.0, Arm.CONTROL) for i in range(4)]
    slow = started(5, 0.0, 9.0, Arm.SPECULATIVE)
    still = tuple(OpenRequest(at=t(2.0 * i).timestamp(), scope="code", arm=Arm.SPECULATIVE) for i in (1, 2, 3))
    before = (OpenRequest(at=t(-1).timestamp(), scope="code", arm=Arm.SPECULATIVE),)  # started before the window
    book.record("r-0", page(*control[:2], open=(*before, *still)), at=t(5), limit=LIMIT)
    book.record("r-0", page(*control[2:], slow, open=(*before, *still)), at=t(12), limit=LIMIT)
    view = book.view()
    assert view.arrivals(t(0), t(10)) == {Arm.CONTROL: 4, Arm.SPECULATIVE: 4}
    # counted as they finish, the slow arm would read a quarter of the control arm's load
    finished_in = [s.arm for s in view.samples(t(0), t(10))]
    assert (finished_in.count(Arm.CONTROL), finished_in.count(Arm.SPECULATIVE)) == (4, 1)
    # the newest read's list replaces the last: a request that finished since is counted once, as a sample
    book.record("r-0", page(started(6, 2.0, 11.0, Arm.SPECULATIVE), cursor=5, open=still[1:]), at=t(14), limit=LIMIT)
    assert book.view().arrivals(t(0), t(10)) == {Arm.CONTROL: 4, Arm.SPECULATIVE: 4}
    # a router gone takes its requests in flight with it (its window is a gap)
    book.forget("r-0", at=t(15))
    assert book.view().arrivals(t(0), t(10)) == {Arm.CONTROL: 4, Arm.SPECULATIVE: 2}
