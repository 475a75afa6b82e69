"""How a request ended, decided once from what happened to it.

The proxy notes facts as a request goes (the upstream status, whether the response head reached
the client, whether the client has the whole answer, a failure, the timeout, the client leaving,
how a stream ended); `request_outcome` turns them into the one `RequestOutcome` and the status
the client got. Every error, timeout and rejection rate the analysis judges comes from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from specpilot.wire.samples import RequestOutcome, outcome_for_status


class Failure(StrEnum):
    """What went wrong on the router's side of the exchange."""

    NO_ENDPOINT = "no_endpoint"  # no ready endpoint in the arm nor in baseline
    UPSTREAM = "upstream"  # refused, reset, cut or malformed before the answer was whole


class StreamEnd(StrEnum):
    """How a measured event stream ended."""

    DONE = "done"  # ``[DONE]`` with no error event before it
    ERROR_EVENT = "error_event"  # the engine sent an error event
    UNFINISHED = "unfinished"  # the stream ended (or was cut) without ``[DONE]``


@dataclass(frozen=True, slots=True, kw_only=True)
class Facts:
    """What happened to one request; all False/None/0 is a request that never reached upstream."""

    status: int = 0  # upstream's HTTP status; 0 when no response head came
    responded: bool = False  # the response head went to the client: its status is fixed
    delivered: bool = False  # the client has the whole answer (for a stream: ``[DONE]`` is out)
    failure: Failure | None = None
    timed_out: bool = False  # the request timeout ran out first
    cancelled: bool = False  # the client went away first
    stream: StreamEnd | None = None  # None: not a measured event stream


def request_outcome(facts: Facts) -> tuple[RequestOutcome, int]:
    """The request's outcome and the HTTP status the client got (0: it left before one).

    A whole answer is judged by its status (and a stream also by its end), whatever happened
    afterwards. Otherwise the first thing that ended the request decides: the client leaving,
    the timeout (504 when no head was sent), an upstream failure (502), no endpoint (503).
    """
    if not facts.delivered:
        if facts.cancelled:
            return RequestOutcome.CLIENT_CANCEL, facts.status if facts.responded else 0
        if facts.timed_out:
            return RequestOutcome.TIMEOUT, facts.status if facts.responded else 504
        if facts.failure is Failure.UPSTREAM:
            return RequestOutcome.UPSTREAM_ERROR, facts.status if facts.responded else 502
        if facts.failure is Failure.NO_ENDPOINT:
            return RequestOutcome.NO_ENDPOINT, 503
    outcome = outcome_for_status(facts.status)
    if outcome is RequestOutcome.OK and facts.stream not in (None, StreamEnd.DONE):
        outcome = RequestOutcome.UPSTREAM_ERROR  # an error event, or a stream that ended without [DONE]
    return outcome, facts.status


def other_status_label(facts: Facts) -> str:
    """The ``status`` label of an unmeasured request: the upstream status, or how it failed."""
    outcome, status = request_outcome(facts)
    if outcome is RequestOutcome.CLIENT_CANCEL:
        return "client_cancel"
    if outcome is RequestOutcome.TIMEOUT:
        return "timeout"
    if facts.failure is not None and not facts.delivered:
        return "error"
    return str(status)
