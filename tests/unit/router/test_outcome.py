"""A request's outcome and the status its client got, as a table of what happened to it."""

from __future__ import annotations

import pytest

from specpilot.router.core.outcome import Facts, Failure, StreamEnd, other_status_label, request_outcome
from specpilot.wire.samples import RequestOutcome as O

UP = Failure.UPSTREAM
NONE = Failure.NO_ENDPOINT
DONE, ERR, CUT = StreamEnd.DONE, StreamEnd.ERROR_EVENT, StreamEnd.UNFINISHED

# status, responded, delivered, failure, timed out, cancelled, stream -> outcome, status the client got
TABLE = [
    # whole answers are judged by their status
    ((200, True, True, None, False, False, None), (O.OK, 200)),
    ((200, True, True, None, False, False, DONE), (O.OK, 200)),
    ((429, True, True, None, False, False, None), (O.REJECTED, 429)),
    ((503, True, True, None, False, False, None), (O.REJECTED, 503)),
    ((500, True, True, None, False, False, None), (O.UPSTREAM_ERROR, 500)),
    ((400, True, True, None, False, False, None), (O.CLIENT_ERROR, 400)),
    ((404, True, True, None, False, False, None), (O.CLIENT_ERROR, 404)),
    # a stream whose [DONE] is out stays judged by how it ended, whatever came after
    ((200, True, True, None, False, True, DONE), (O.OK, 200)),
    ((200, True, True, None, True, False, DONE), (O.OK, 200)),
    ((200, True, True, UP, False, False, DONE), (O.OK, 200)),
    ((200, True, True, None, False, False, ERR), (O.UPSTREAM_ERROR, 200)),
    # a stream that ended without [DONE], or with an error event before it
    ((200, True, False, None, False, False, CUT), (O.UPSTREAM_ERROR, 200)),
    ((200, True, False, None, False, False, ERR), (O.UPSTREAM_ERROR, 200)),
    # the client leaving first
    ((0, False, False, None, False, True, None), (O.CLIENT_CANCEL, 0)),
    ((200, False, False, None, False, True, None), (O.CLIENT_CANCEL, 0)),
    ((200, True, False, None, False, True, CUT), (O.CLIENT_CANCEL, 200)),
    ((200, True, False, UP, False, True, CUT), (O.CLIENT_CANCEL, 200)),
    # the timeout first
    ((0, False, False, None, True, False, None), (O.TIMEOUT, 504)),
    ((200, True, False, None, True, False, CUT), (O.TIMEOUT, 200)),
    ((200, True, False, None, True, False, None), (O.TIMEOUT, 200)),
    # upstream failing
    ((0, False, False, UP, False, False, None), (O.UPSTREAM_ERROR, 502)),
    ((200, True, False, UP, False, False, CUT), (O.UPSTREAM_ERROR, 200)),
    ((200, True, False, UP, False, False, None), (O.UPSTREAM_ERROR, 200)),
    # nowhere to send it
    ((0, False, False, NONE, False, False, None), (O.NO_ENDPOINT, 503)),
]


@pytest.mark.parametrize(("facts", "expected"), TABLE)
def test_request_outcome(facts: tuple[int, bool, bool, Failure | None, bool, bool, StreamEnd | None],
                         expected: tuple[O, int]) -> None:  # fmt: skip
    status, responded, delivered, failure, timed_out, cancelled, stream = facts
    got = request_outcome(
        Facts(
            status=status,
            responded=responded,
            delivered=delivered,
            failure=failure,
            timed_out=timed_out,
            cancelled=cancelled,
            stream=stream,
        )
    )
    assert got == expected


@pytest.mark.parametrize(
    ("facts", "label"),
    [
        (Facts(status=200, responded=True, delivered=True), "200"),
        (Facts(status=404, responded=True, delivered=True), "404"),
        (Facts(status=200, responded=True, failure=UP), "error"),
        (Facts(failure=UP), "error"),
        (Facts(timed_out=True), "timeout"),
        (Facts(status=200, responded=True, cancelled=True), "client_cancel"),
    ],
)
def test_other_requests_are_labelled_by_status_or_by_how_they_failed(facts: Facts, label: str) -> None:
    assert other_status_label(facts) == label
