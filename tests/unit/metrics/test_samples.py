"""A scope's requests to one arm over a window: every outcome counted, speed only from what yields it."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from specpilot.analysis.window import ArmRequests
from specpilot.metrics.arm_requests import arm_requests, kv_load
from specpilot.wire.buckets import FineCounts
from specpilot.wire.names import Arm
from specpilot.wire.samples import RequestOutcome, RequestSample
from tests.unit.metrics.builders import ok_sample

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
END = T0 + timedelta(seconds=60)
OK = ok_sample(at=T0.timestamp() + 10, e2e=2.0, ttft=0.25, output_tokens=33, decode=1.6)
SENT = (OK.at,)  # when OK was sent: `answerable_starts` of a window holding it alone


def requests(*samples: RequestSample, arm: Arm = Arm.SPECULATIVE) -> ArmRequests:
    return arm_requests(samples, scope="code", arm=arm, start=T0, end=END)


def finishing(seconds: float) -> RequestSample:
    """The ok sample, finishing `seconds` after the window's start."""
    return replace(OK, at=T0.timestamp() + seconds - OK.e2e)


@pytest.mark.parametrize(
    ("samples", "expected"),
    [
        (
            (OK,),
            ArmRequests(
                outcomes={RequestOutcome.OK: 1},
                answerable_starts=SENT,
                decode_seconds=(1.6,),
                committed_tokens=(32,),
                ttft_seconds=(0.25,),
                e2e_seconds=(2.0,),
            ),
        ),
        (
            (replace(OK, stream=False, ttft=None, decode=None),),
            ArmRequests(outcomes={RequestOutcome.OK: 1}, answerable_starts=SENT, e2e_seconds=(2.0,)),
        ),
        (
            (replace(OK, output_tokens=1, decode=0.0),),
            ArmRequests(
                outcomes={RequestOutcome.OK: 1}, answerable_starts=SENT, ttft_seconds=(0.25,), e2e_seconds=(2.0,)
            ),
        ),
        (
            (replace(OK, output_tokens=None),),
            ArmRequests(
                outcomes={RequestOutcome.OK: 1}, answerable_starts=SENT, ttft_seconds=(0.25,), e2e_seconds=(2.0,)
            ),
        ),
        (
            (replace(OK, deadline_met=False),),
            ArmRequests(
                outcomes={RequestOutcome.OK: 1},
                late=1,
                answerable_starts=SENT,
                timeout_starts=SENT,
                decode_seconds=(1.6,),
                committed_tokens=(32,),
                ttft_seconds=(0.25,),
                e2e_seconds=(2.0,),
            ),
        ),
        (
            (
                replace(OK, outcome=RequestOutcome.TIMEOUT, status=504, deadline_met=False),
                replace(OK, outcome=RequestOutcome.REJECTED, status=429, ttft=None, decode=None),
                replace(OK, outcome=RequestOutcome.UPSTREAM_ERROR, status=200),
                replace(OK, outcome=RequestOutcome.CLIENT_CANCEL, status=0, deadline_met=None),
                replace(OK, outcome=RequestOutcome.CLIENT_ERROR, status=400),
                replace(OK, outcome=RequestOutcome.NO_ENDPOINT, status=503),
            ),
            ArmRequests(
                outcomes={outcome: 1 for outcome in RequestOutcome if outcome is not RequestOutcome.OK},
                answerable_starts=SENT * 4,  # timeout, rejected, upstream error, no endpoint
                timeout_starts=SENT,
            ),
        ),
    ],
    ids=["ok-stream", "ok-not-streamed", "one-token", "tokens-unknown", "late", "failures-count-and-yield-nothing"],
)
def test_outcomes_are_all_counted_and_speed_comes_from_what_yields_it(
    samples: tuple[RequestSample, ...], expected: ArmRequests
) -> None:
    assert requests(*samples) == expected


def test_kv_load_counts_every_request_that_reached_an_engine_for_its_hold_within_the_span() -> None:
    samples = (
        replace(OK, prompt_tokens=100),  # (100 + 33 / 2) tokens while decoding, 1.6 s
        replace(OK, prompt_tokens=None, outcome=RequestOutcome.TIMEOUT, decode=None, e2e=4.0, at=OK.at - 2),  # 4 s
        replace(OK, prompt_tokens=500, outcome=RequestOutcome.NO_ENDPOINT, endpoint=""),  # held no cache
        replace(OK, prompt_tokens=100, at=T0.timestamp() - 1.0),  # decoded 0.6 s before the span, 1.0 s in it
        replace(OK, prompt_tokens=100, scope="chat"),
    )
    got = kv_load(samples, scope="code", arm=Arm.SPECULATIVE, start=T0, end=END)
    assert got == pytest.approx(116.5 * 1.6 + 16.5 * 4.0 + 116.5 * 1.0)


def test_a_request_belongs_to_the_window_it_finished_in() -> None:
    got = requests(
        finishing(0), finishing(59.999), finishing(60), finishing(-0.001), replace(OK, at=T0.timestamp() - 1)
    )
    assert got.routed == 3  # finished at the start, just before the end, and started before but finished within


def test_other_scopes_and_arms_are_left_out() -> None:
    samples = (OK, replace(OK, scope="chat"), replace(OK, arm=Arm.BASELINE), replace(OK, arm=Arm.BASELINE))
    assert requests(*samples).routed == 1
    assert requests(*samples, arm=Arm.BASELINE).routed == 2
    assert requests(*samples, arm=Arm.ALTERNATIVE) == ArmRequests()


def test_start_times_are_kept_sorted_for_the_rates_and_the_timeouts() -> None:
    samples = (
        replace(OK, at=OK.at + 3, outcome=RequestOutcome.TIMEOUT, status=504),
        replace(OK, at=OK.at + 2),
        replace(OK, at=OK.at + 1, deadline_met=False),
        replace(OK, at=OK.at + 4, outcome=RequestOutcome.CLIENT_CANCEL, status=0),
        replace(OK, at=OK.at - 1, outcome=RequestOutcome.REJECTED, status=429),
    )
    got = requests(*samples)
    assert got.answerable_starts == (OK.at - 1, OK.at + 1, OK.at + 2, OK.at + 3)  # a cancel is in no rate
    assert got.timeout_starts == (OK.at + 1, OK.at + 3)  # the late one and the timed-out one


def test_the_chunk_gaps_of_ok_streams_are_pooled_at_the_widest_width() -> None:
    fine, wide = FineCounts({103: 9, 104: 31}), FineCounts({96: 5}, width=8)
    pooled = requests(
        replace(OK, chunk_gaps=fine),
        replace(OK, chunk_gaps=wide),
        replace(OK),  # a stream without gaps (one chunk, or an older router)
        replace(OK, outcome=RequestOutcome.TIMEOUT, status=504, deadline_met=False, chunk_gaps=fine),
    )
    assert pooled.gap_streams == 2
    assert pooled.chunk_gaps == FineCounts({96: 14, 104: 31}, width=8)
    assert requests(OK).chunk_gaps == FineCounts() and requests(OK).gap_streams == 0
