"""A band's time per committed token over its windows' tokens together: a burst's window, which holds
most of the band's tokens at its slowest, weighs as much as its tokens do, as in a long run; the
windows' plain mean would weigh it as much as a quiet window."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest

from specpilot.analysis.bands import bands
from specpilot.analysis.evidence import ArmLoad, BinArm, Evidence, Moments, WindowLoad, record_window
from specpilot.analysis.window import ArmRequests
from specpilot.api.status import Verdict
from specpilot.wire.names import Arm
from specpilot.wire.samples import RequestOutcome
from tests.unit.analysis.windows import END, arm, window


def recorded(windows: list[tuple[ArmRequests, ArmRequests]]) -> Evidence:
    """Each (speculative, control) pair as one window, every one at the same load."""
    evidence = Evidence(compared=Arm.CONTROL, overlap=1.0)
    load = WindowLoad(
        arms={a: ArmLoad(offered_per_replica=1.0) for a in (Arm.SPECULATIVE, Arm.CONTROL)}, arrival_rate=2.0
    )
    for step, (speculative, control) in enumerate(windows):
        scope_window = window(speculative, control, end=END + timedelta(seconds=15 * step))
        evidence = record_window(evidence, scope_window, load, verdict=Verdict.PASS, quality_failed=False)
    return evidence


def test_a_band_weighs_each_window_by_its_tokens() -> None:
    # two quiet windows of 10 requests at 20 ms a token, one burst of 90 at 40 ms
    windows = [(arm(10, seed=1, per_token=0.02), arm(10, seed=1, per_token=0.025)) for _ in range(2)]
    windows.append((arm(90, seed=2, per_token=0.04), arm(90, seed=2, per_token=0.04)))
    evidence = recorded(windows)
    [cell] = evidence.scopes["code"].bins[Arm.SPECULATIVE].values()
    decode = sum(sum(spec.decode_seconds) for spec, _ in windows)
    tokens = sum(sum(spec.committed_tokens) for spec, _ in windows)
    assert cell.time_per_token == pytest.approx(decode / tokens)
    assert cell.tpct.mean is not None and cell.tpct.mean < 0.8 * decode / tokens  # the plain mean reads it fast
    [band] = bands(evidence.scopes["code"].bins[Arm.SPECULATIVE])
    assert band.tpct == pytest.approx(decode / tokens) and band.windows == 3


def test_a_window_without_a_time_per_token_adds_no_tokens() -> None:
    empty = ArmRequests(outcomes={RequestOutcome.TIMEOUT: 3})  # routed, none finished with tokens after the first
    evidence = recorded([(arm(10, per_token=0.02), arm(10, per_token=0.02)), (empty, arm(10, per_token=0.02))])
    [cell] = evidence.scopes["code"].bins[Arm.SPECULATIVE].values()
    assert cell.tpct.n == cell.tokens.n == cell.decode.n == 1


def test_a_store_written_before_tokens_were_kept_reads_its_windows_mean() -> None:
    old = BinArm(tpct=Moments(n=2, sum=0.05, sum_sq=0.00125))
    assert old.time_per_token == pytest.approx(0.025)
    # merged with a window that kept its tokens, the band reads the mean of all three: no token count covers them
    new = BinArm(tpct=Moments().add(0.04), decode=Moments().add(4.0), tokens=Moments().add(100))
    merged = old.merge(new)
    assert merged.time_per_token is not None and math.isclose(merged.time_per_token, 0.09 / 3)
