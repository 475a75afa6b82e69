"""A scope's window assembled from the ledger (both arms' requests, the gaps) and the arms' engines."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from specpilot.analysis.window import ArmEngine
from specpilot.metrics.ledger import SampleLedger
from specpilot.metrics.scope_window import scope_window
from specpilot.wire.names import Arm
from specpilot.wire.samples import RequestOutcome, RequestSample, SamplesPage

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def sample(
    seq: int, *, scope: str = "code", arm: Arm = Arm.SPECULATIVE, outcome: RequestOutcome = RequestOutcome.OK
) -> RequestSample:
    return RequestSample(
        seq=seq,
        at=T0.timestamp() + seq,
        scope=scope,
        arm=arm,
        endpoint="10.0.0.7:8000",
        model="m",
        stream=False,
        status=200,
        outcome=outcome,
        e2e=1.0,
        ttft=None,
        output_tokens=None,
        tokens_from_usage=False,
        decode=None,
        deadline_met=None,
        fallback=None,
    )


def test_a_scope_window_takes_both_arms_from_the_ledger_and_its_gaps() -> None:
    ledger = SampleLedger(horizon=timedelta(hours=1))
    samples = (
        sample(1),
        sample(2, arm=Arm.BASELINE),
        sample(3, arm=Arm.BASELINE, outcome=RequestOutcome.TIMEOUT),
        sample(4, scope="chat"),
    )
    ledger.record("r-0", SamplesPage("e1", samples, next_cursor=4, dropped=2), at=T0 + timedelta(seconds=10), limit=100)
    engine = ArmEngine(acceptance_length=2.5)
    got = scope_window(
        ledger,
        scope="code",
        start=T0,
        end=T0 + timedelta(seconds=10),
        compared=Arm.BASELINE,
        compared_engine=ArmEngine(),
        speculative_engine=engine,
    )
    assert (got.scope, got.start, got.end) == ("code", T0, T0 + timedelta(seconds=10))
    assert got.speculative.outcomes == {RequestOutcome.OK: 1} and got.speculative_engine is engine
    assert got.compared_arm is Arm.BASELINE
    assert got.compared.outcomes == {RequestOutcome.OK: 1, RequestOutcome.TIMEOUT: 1}
    assert got.gaps == (
        "router r-0: 2 samples that finished before 2026-11-29T12:00:02+00:00 were pushed out of its buffer unread",
    )
