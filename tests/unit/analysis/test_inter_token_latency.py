"""The inter-token-latency check: the router's chunk gaps of the scope where both arms streamed enough,
else the engines' histogram quantiles, each compared as the interval its buckets allow, so that bucket
edges never read as a ratio."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from specpilot.analysis.evidence import ArmLoad, Evidence, WindowLoad, record_window, with_arms
from specpilot.analysis.ratios import inter_token_latency_check
from specpilot.analysis.stats import BucketQuantile
from specpilot.analysis.window import ArmEngine, ArmRequests, ScopeWindow
from specpilot.api.spec import QuantileRatio
from specpilot.api.status import Verdict
from specpilot.metrics.quantile import bucket_quantile
from specpilot.wire.buckets import INTER_TOKEN_LATENCY, FineCounts, fine_bucket
from specpilot.wire.names import Arm
from specpilot.wire.samples import RequestOutcome

LIMIT = QuantileRatio(quantile=0.99, max_ratio=2.0)
SENT = ArmRequests(outcomes={RequestOutcome.OK: 50})  # streams without chunk gaps (an older router)


def steps(counts: Mapping[float, int]) -> ArmEngine:
    """An arm whose engines counted `counts[bound]` steps in the bucket up to each of vLLM's bounds."""
    bounds = (*INTER_TOKEN_LATENCY, math.inf)
    cumulative = itertools.accumulate(counts.get(edge, 0) for edge in bounds)
    return ArmEngine(inter_token_latency=bucket_quantile(LIMIT.quantile, zip(bounds, cumulative, strict=True)))


# p99 24.85 ms, in (10, 25]; p99 49.75 ms, in (25, 50]: a point ratio of 2.002 whatever the gaps were.
BELOW_25 = steps({0.025: 1000})
BELOW_50 = steps({0.05: 1000})


@pytest.mark.parametrize(
    ("speculative", "compared", "verdict", "words"),
    [
        pytest.param(
            BELOW_50,
            BELOW_25,
            Verdict.INCONCLUSIVE,
            "ratio 2.002 against 2: the buckets cannot resolve it: control p99 in (10, 25] ms, "
            "speculative in (25, 50] ms, ratio between 1 and 5",
            id="bucket-edges-are-no-ratio",
        ),
        pytest.param(
            steps({0.075: 980, 0.1: 20}),  # p99 87.5 ms, in (75, 100]
            BELOW_25,
            Verdict.FAIL,
            "ratio 3.521 is above 2 (between 3 and 10)",
            id="regression-wholly-above",
        ),
        pytest.param(
            steps({80.0: 5, math.inf: 995}), BELOW_25, Verdict.FAIL, "between 3200 and +Inf", id="beyond-the-buckets"
        ),
        pytest.param(BELOW_25, BELOW_50, Verdict.PASS, "ratio 0.499 is within 2 (between 0.2 and 1)", id="clear-pass"),
        pytest.param(BELOW_50, steps({0.05: 800, 0.075: 200}), Verdict.PASS, "(between 0.333 and 1)", id="faster"),
        pytest.param(BELOW_50, BELOW_50, Verdict.PASS, "within 2 (between 0.5 and 2)", id="same-bucket"),
        pytest.param(
            steps({0.01: 1000}), steps({0.01: 1000}), Verdict.INCONCLUSIVE, "between 0 and +Inf", id="lowest-bucket"
        ),
    ],
)
def test_inter_token_latency_is_judged_on_the_interval_the_buckets_allow(
    speculative: ArmEngine, compared: ArmEngine, verdict: Verdict, words: str
) -> None:
    check = inter_token_latency_check(
        SENT, SENT, engines=(speculative, compared), compared_arm=Arm.CONTROL, limit=LIMIT, min_samples=10
    )
    assert check.verdict is verdict
    assert words in check.reason
    assert not check.hard
    spec, base = speculative.inter_token_latency, compared.inter_token_latency
    assert spec is not None and base is not None
    assert check.observed == pytest.approx(spec.value / base.value)  # the point ratio, whatever the verdict
    assert "as the buckets allow" in check.evidence and "the engines' histograms, arm-wide" in check.evidence


def itl(value: float) -> ArmEngine:
    return ArmEngine(inter_token_latency=BucketQuantile(value=value, low=0.025, high=0.05))


@pytest.mark.parametrize(
    ("speculative", "compared", "words"),
    [
        (ArmEngine(), itl(0.03), "no speculative engine steps"),
        (itl(0.05), replace(itl(0.03), inconclusive="p: counters reset"), "control engines: p: counters reset"),
        (itl(0.05), ArmEngine(inter_token_latency=BucketQuantile(value=0.0, low=-math.inf, high=0.0)), "zero"),
    ],
    ids=["no-steps", "engine-inconclusive", "zero-control"],
)
def test_inter_token_latency_without_figures_to_compare(
    speculative: ArmEngine, compared: ArmEngine, words: str
) -> None:
    check = inter_token_latency_check(
        SENT, SENT, engines=(speculative, compared), compared_arm=Arm.CONTROL, limit=LIMIT, min_samples=10
    )
    assert check.verdict is Verdict.INCONCLUSIVE
    assert words in check.reason


def test_a_scope_with_too_few_requests_on_the_arm_is_not_judged_on_other_scopes_gaps() -> None:
    slow = steps({0.075: 980, 0.1: 20})
    few = ArmRequests(outcomes={RequestOutcome.OK: 3})
    check = inter_token_latency_check(
        few, SENT, engines=(slow, BELOW_25), compared_arm=Arm.CONTROL, limit=LIMIT, min_samples=10
    )
    assert check.verdict is Verdict.INCONCLUSIVE and "3 requests of the scope" in check.reason


def streamed(gaps_ms: Mapping[float, int], streams: int = 40) -> ArmRequests:
    """`streams` ok streams, each with `gaps_ms[gap]` chunk gaps of each length, as the router counts them."""
    each = FineCounts({fine_bucket(gap / 1000): count for gap, count in gaps_ms.items()})
    return ArmRequests(
        outcomes={RequestOutcome.OK: streams}, chunk_gaps=FineCounts.pooled([each] * streams), gap_streams=streams
    )


# The chunk gaps the clients measured in the pilot: p99 23.9 ms on the control arm, 32.5 ms on the
# speculative one (longer steps, several tokens each); the engines' histograms read a ratio of 2.002.
CONTROL_GAPS = streamed({15.0: 98, 23.9: 2})
SPECULATIVE_GAPS = streamed({22.0: 98, 32.5: 2})


@pytest.mark.parametrize(
    ("speculative", "verdict", "ratio", "words"),
    [
        pytest.param(
            SPECULATIVE_GAPS, Verdict.PASS, 1.36, "within 2 (between 1.33 and 1.41)", id="the-issue's-pilot-passes"
        ),
        pytest.param(streamed({22.0: 98, 71.7: 2}), Verdict.FAIL, 3.0, "is above 2 (between 2.9", id="3x-fails"),
        pytest.param(streamed({22.0: 98, 47.8: 2}), Verdict.INCONCLUSIVE, 2.0, "cannot resolve", id="at-the-limit"),
    ],
)
def test_the_routers_chunk_gaps_judge_the_scope_exact_to_a_fine_bucket(
    speculative: ArmRequests, verdict: Verdict, ratio: float, words: str
) -> None:
    check = inter_token_latency_check(
        speculative,
        CONTROL_GAPS,
        engines=(BELOW_50, BELOW_25),  # what the engines' buckets would leave unresolved
        compared_arm=Arm.CONTROL,
        limit=LIMIT,
        min_samples=10,
    )
    assert check.verdict is verdict and not check.hard
    assert words in check.reason
    assert check.observed == pytest.approx(ratio, rel=0.03)
    assert "the router's chunk gaps of the scope: 4000/4000 gaps over 40/40 streams" in check.evidence


def test_too_few_streams_with_gaps_fall_back_to_the_engines_histograms() -> None:
    check = inter_token_latency_check(
        SPECULATIVE_GAPS,
        streamed({15.0: 98, 23.9: 2}, streams=9),
        engines=(BELOW_50, BELOW_25),
        compared_arm=Arm.CONTROL,
        limit=LIMIT,
        min_samples=10,
    )
    assert check.verdict is Verdict.INCONCLUSIVE and "the buckets cannot resolve it" in check.reason
    assert "chunk gaps on 40/9 streams of the scope, fewer than minSamples 10" in check.evidence


def test_gaps_below_the_lowest_fine_bucket_leave_the_ratio_open_above() -> None:
    """Events read together are a gap of zero: a compared p99 in the lowest bucket leaves the ratio
    unbounded above, so 1.5 ms against it is not shown within 2."""
    check = inter_token_latency_check(
        streamed({1.5: 100}),
        streamed({0.0: 100}),
        engines=(ArmEngine(), ArmEngine()),
        compared_arm=Arm.CONTROL,
        limit=LIMIT,
        min_samples=10,
    )
    assert (
        check.verdict is Verdict.INCONCLUSIVE
        and "control p99 in (0, 1.03] ms" in check.reason
        and "ratio between 1.46 and +Inf" in check.reason
    )


def test_the_evidence_records_the_cadence_the_check_judged_not_the_histograms_edges() -> None:
    """Gaps of 30 and 25 ms that the router counted on 50 streams each: the evidence (and so the report)
    holds a ratio of 1.2 read from them, as the check does, not the 2.0 the engines' buckets read."""
    speculative, compared = (
        ArmRequests(
            outcomes={RequestOutcome.OK: 50},
            chunk_gaps=FineCounts({fine_bucket(gap): 1000}),
            gap_streams=50,
            decode_seconds=(1.0,) * 50,
            committed_tokens=(40,) * 50,
        )
        for gap in (0.030, 0.025)
    )
    end = datetime(2026, 1, 1, tzinfo=UTC)
    window = ScopeWindow(
        scope="chat",
        start=end - timedelta(seconds=15),
        end=end,
        compared=compared,
        speculative=speculative,
        compared_engine=BELOW_25,
        speculative_engine=BELOW_50,
    )
    arms = {arm: ArmLoad(offered_per_replica=1.0) for arm in (Arm.SPECULATIVE, Arm.CONTROL)}
    load = WindowLoad(arms=arms, arrival_rate=2.0)
    evidence = record_window(
        with_arms(Evidence(compared=Arm.CONTROL), overlap=3.0, kv_blocks={}, gpus={}),
        window,
        load,
        verdict=Verdict.PASS,
        quality_failed=False,
        min_samples=20,
    )
    gaps = evidence.scopes["chat"].chunk_gaps
    judged = inter_token_latency_check(
        speculative, compared, engines=(BELOW_50, BELOW_25), compared_arm=Arm.CONTROL, limit=LIMIT, min_samples=20
    )
    assert judged.verdict is Verdict.PASS, judged
    spec_gap, control_gap = gaps[Arm.SPECULATIVE].mean, gaps[Arm.CONTROL].mean
    assert spec_gap is not None and control_gap is not None
    assert spec_gap / control_gap == pytest.approx(1.2, rel=0.03)
