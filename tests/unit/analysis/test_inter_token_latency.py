"""The inter-token-latency check: the engines' histogram quantiles compared directly."""

from __future__ import annotations

import pytest

from specpilot.analysis.ratios import inter_token_latency_check
from specpilot.analysis.window import ArmEngine
from specpilot.api.spec import QuantileRatio
from specpilot.api.status import Verdict
from specpilot.wire.names import Arm

LIMIT = QuantileRatio(quantile=0.99, max_ratio=2.0)


@pytest.mark.parametrize(
    ("speculative", "compared", "verdict", "words"),
    [
        (ArmEngine(inter_token_latency=0.05), ArmEngine(inter_token_latency=0.03), Verdict.PASS, "within 2"),
        (
            ArmEngine(inter_token_latency=0.09),
            ArmEngine(inter_token_latency=0.03),
            Verdict.FAIL,
            "ratio 3.000 is above 2",
        ),
        (ArmEngine(), ArmEngine(inter_token_latency=0.03), Verdict.INCONCLUSIVE, "no speculative engine steps"),
        (
            ArmEngine(inter_token_latency=0.05),
            ArmEngine(inter_token_latency=0.03, inconclusive="p: counters reset"),
            Verdict.INCONCLUSIVE,
            "control engines: p: counters reset",
        ),
        (ArmEngine(inter_token_latency=0.05), ArmEngine(inter_token_latency=0.0), Verdict.INCONCLUSIVE, "zero"),
    ],
    ids=["within", "above", "no-steps", "engine-inconclusive", "zero-control"],
)
def test_inter_token_latency(speculative: ArmEngine, compared: ArmEngine, verdict: Verdict, words: str) -> None:
    check = inter_token_latency_check(
        speculative, compared, compared_arm=Arm.CONTROL, limit=LIMIT, routed=50, min_samples=10
    )
    assert check.verdict is verdict
    assert words in check.reason
    assert not check.hard


def test_a_scope_with_too_few_requests_on_the_arm_is_not_judged_on_other_scopes_gaps() -> None:
    slow = ArmEngine(inter_token_latency=0.09)
    check = inter_token_latency_check(
        slow, ArmEngine(inter_token_latency=0.03), compared_arm=Arm.CONTROL, limit=LIMIT, routed=3, min_samples=10
    )
    assert check.verdict is Verdict.INCONCLUSIVE and "3 requests of the scope" in check.reason
