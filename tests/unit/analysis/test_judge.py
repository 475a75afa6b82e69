"""The judge: windows in, verdicts with their checks out, as a table of cases."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import timedelta

import pytest

from specpilot.analysis.checks import Check
from specpilot.analysis.judge import WindowVerdict, judge_window, summarize
from specpilot.analysis.probes import CaseTally
from specpilot.analysis.proportions import Sequential
from specpilot.analysis.quality import behaviour_check, probe_checks, webhook_check
from specpilot.analysis.stats import BucketQuantile
from specpilot.analysis.window import ArmEngine, ScopeWindow
from specpilot.api.reasons import FallbackReason, MetricName
from specpilot.api.spec import Analysis, ProbeKind, Probes, Quality, Thresholds, Webhook
from specpilot.api.status import Verdict
from specpilot.wire.names import Arm
from specpilot.wire.samples import RequestOutcome
from tests.unit.analysis.windows import END, arm, engine, window

ANALYSIS = Analysis()
QUALITY = Quality()
M = MetricName
Out = RequestOutcome


def judge(
    w: ScopeWindow, *, analysis: Analysis = ANALYSIS, quality: Quality = QUALITY, **kwargs: object
) -> WindowVerdict:
    state = kwargs.pop("state", {})
    extra = kwargs.pop("extra", ())
    assert not kwargs
    return judge_window(w, analysis=analysis, quality=quality, draft_tokens=4, state=state, extra=extra)  # type: ignore[arg-type]


def check(verdict: WindowVerdict, metric: MetricName) -> Check:
    return next(c for c in verdict.checks if c.metric is metric)


@dataclass(frozen=True)
class Case:
    window: ScopeWindow
    verdict: Verdict
    metric: MetricName | None = None  # the check that decides it
    fallback: FallbackReason | None = None
    reason: str = ""  # a fragment of the window's reason
    analysis: Analysis = ANALYSIS


ACCEPTANCE = Analysis(thresholds=Thresholds(min_acceptance_length=2.0))

CASES = {
    "identical-arms-pass": Case(window(), Verdict.PASS, reason="not shown above 1"),
    "faster-speculation-shown-within": Case(
        window(speculative=arm(seed=3, per_token=0.006)), Verdict.PASS, reason="shown within 1"
    ),
    "slower-speculation-fails": Case(
        window(speculative=arm(seed=3, per_token=0.013)),
        Verdict.FAIL,
        M.TIME_PER_COMMITTED_TOKEN_RATIO,
        reason="shown above 1",
    ),
    "ttft-tail-fault-fails": Case(
        window(speculative=arm(seed=3, ttft_factor=2.0)), Verdict.FAIL, M.TTFT_RATIO, reason="TTFT p99"
    ),
    "too-few-speculative-requests": Case(
        window(speculative=arm(30, seed=3)), Verdict.INCONCLUSIVE, reason="fewer than minSamples 50"
    ),
    "too-few-control-requests": Case(
        window(compared=arm(10, seed=2)), Verdict.INCONCLUSIVE, reason="the control arm has 10 usable requests"
    ),
    "no-traffic": Case(window(speculative=arm(0), compared=arm(0)), Verdict.INCONCLUSIVE, reason="sent no request"),
    # A crashed engine's cut requests are failures whatever its metrics say: they still flip.
    "a-restart-does-not-excuse-the-requests-it-cut": Case(
        window(
            speculative=arm(seed=3, failures={Out.UPSTREAM_ERROR: 30}),
            speculative_engine=replace(engine(), inconclusive="pod-a: restarted between 12:00:30 and 12:01:00"),
        ),
        Verdict.FAIL,
        M.ERROR_RATE,
        FallbackReason.HARD_LIMIT,
    ),
    "a-restart-alone-holds-the-window": Case(
        window(speculative_engine=replace(engine(), inconclusive="pod-a: restarted between 12:00:30 and 12:01:00")),
        Verdict.INCONCLUSIVE,
        reason="pod-a: restarted between",
    ),
    "gaps": Case(
        window(speculative=arm(seed=3, per_token=0.05), gaps=("12 samples dropped",)),
        Verdict.INCONCLUSIVE,
        reason="gaps (12 samples dropped)",
    ),
    "nan-decode-time": Case(
        window(speculative=replace(arm(seed=3), decode_seconds=(math.nan, *arm(seed=3).decode_seconds[1:]))),
        Verdict.INCONCLUSIVE,
        reason="non-finite",
    ),
    "unpaired-decode-and-tokens": Case(
        window(speculative=replace(arm(seed=3), committed_tokens=arm(seed=3).committed_tokens[:-1])),
        Verdict.INCONCLUSIVE,
        reason="not paired",
    ),
    "engine-inconclusive": Case(
        window(speculative_engine=ArmEngine(inconclusive="exposition truncated")),
        Verdict.INCONCLUSIVE,
        reason="exposition truncated",
    ),
    "timeouts-while-faster": Case(
        window(speculative=arm(seed=3, per_token=0.006, failures={Out.TIMEOUT: 20})),
        Verdict.FAIL,
        M.TIMEOUT_RATE,
        FallbackReason.HARD_LIMIT,
    ),
    "late-ok-requests-are-timeouts": Case(
        window(speculative=arm(seed=3, late=15)), Verdict.FAIL, M.TIMEOUT_RATE, FallbackReason.HARD_LIMIT
    ),
    "errors-and-no-endpoint": Case(
        window(speculative=arm(seed=3, failures={Out.UPSTREAM_ERROR: 6, Out.NO_ENDPOINT: 6})),
        Verdict.FAIL,
        M.ERROR_RATE,
        FallbackReason.HARD_LIMIT,
    ),
    "rejections": Case(
        window(speculative=arm(seed=3, failures={Out.REJECTED: 12})),
        Verdict.FAIL,
        M.REJECTION_RATE,
        FallbackReason.HARD_LIMIT,
    ),
    "a-few-errors-are-not-shown-above-the-limit": Case(
        window(speculative=arm(seed=3, failures={Out.UPSTREAM_ERROR: 3})), Verdict.PASS
    ),
    "client-errors-and-cancels-count-nowhere": Case(
        window(speculative=arm(seed=3, failures={Out.CLIENT_ERROR: 100, Out.CLIENT_CANCEL: 100})), Verdict.PASS
    ),
    "sustained-kv-pressure": Case(
        window(speculative_engine=engine(0.97)), Verdict.FAIL, M.KV_CACHE_USAGE, FallbackReason.KV_CACHE_PRESSURE
    ),
    "kv-pressure-names-the-cause-before-its-timeouts": Case(
        window(speculative=arm(seed=3, failures={Out.TIMEOUT: 40}), speculative_engine=engine(0.97)),
        Verdict.FAIL,
        M.KV_CACHE_USAGE,
        FallbackReason.KV_CACHE_PRESSURE,
    ),
    "kv-pressure-not-sustained": Case(
        window(
            speculative_engine=ArmEngine(
                kv_usage=tuple((END - timedelta(seconds=10 * i), 0.5 if i == 3 else 0.97) for i in range(30)),
                inter_token_latency=BucketQuantile(value=0.03, low=0.025, high=0.05),
            )
        ),
        Verdict.PASS,
    ),
    "kv-pressure-without-enough-scrapes": Case(
        window(speculative_engine=ArmEngine(kv_usage=((END - timedelta(seconds=30), 0.97), (END, 0.98)))),
        Verdict.INCONCLUSIVE,
        reason="scrapes cover 30s of 120s",
    ),
    "no-kv-scrapes": Case(window(speculative_engine=ArmEngine()), Verdict.INCONCLUSIVE, reason="no usable scrape"),
    "acceptance-below-minimum": Case(
        window(speculative_engine=engine(acceptance=1.6)),
        Verdict.FAIL,
        M.ACCEPTANCE_LENGTH,
        FallbackReason.HARD_LIMIT,
        analysis=ACCEPTANCE,
    ),
    "acceptance-beyond-what-the-draft-can-commit": Case(
        window(speculative_engine=engine(acceptance=5.5)),
        Verdict.INCONCLUSIVE,
        reason="outside [1, 5]",
        analysis=ACCEPTANCE,
    ),
    "acceptance-missing-when-judged": Case(
        window(speculative_engine=engine(acceptance=None)), Verdict.INCONCLUSIVE, analysis=ACCEPTANCE
    ),
    "acceptance-not-judged-when-unset": Case(window(speculative_engine=engine(acceptance=1.1)), Verdict.PASS),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_window_verdicts(case: Case) -> None:
    verdict = judge(case.window, analysis=case.analysis)
    assert verdict.verdict is case.verdict, verdict.reason
    assert verdict.fallback is case.fallback
    assert case.reason in verdict.reason
    if case.metric is not None:
        assert verdict.failing is not None
        assert verdict.failing.metric is case.metric
        assert verdict.failing.observed is not None and verdict.failing.threshold is not None
        assert verdict.failing.evidence


def test_missing_data_never_passes_even_when_everything_else_does() -> None:
    verdict = judge(window(speculative=arm(49, seed=3)))
    assert verdict.verdict is Verdict.INCONCLUSIVE
    assert check(verdict, M.TIME_PER_COMMITTED_TOKEN_RATIO).verdict is Verdict.INCONCLUSIVE


def test_rates_count_over_every_routed_request_the_arm_answers_for() -> None:
    spec = arm(188, seed=3, failures={Out.TIMEOUT: 12, Out.CLIENT_CANCEL: 50})
    timeouts = check(judge(window(speculative=spec)), M.TIMEOUT_RATE)
    assert timeouts.observed == pytest.approx(12 / 200)  # cancels are neither timeouts nor answered
    assert timeouts.hard and timeouts.verdict is Verdict.FAIL


# --- the sequence of windows ----------------------------------------------------------------------


def test_state_counts_the_looks_each_ratio_check_spent() -> None:
    first = judge(window(speculative=arm(seed=3, per_token=0.013)))
    assert first.state == {"timePerCommittedTokenRatio.looks": 1.0, "ttftRatio.looks": 1.0, "endToEndRatio.looks": 1.0}
    second = judge(window(), state=first.state)
    assert second.state == {"timePerCommittedTokenRatio.looks": 2.0, "ttftRatio.looks": 2.0, "endToEndRatio.looks": 2.0}
    assert all(math.isfinite(v) for v in second.state.values()) and len(second.state) <= 32


def test_an_inconclusive_window_spends_nothing() -> None:
    state = {"timePerCommittedTokenRatio.looks": 4.0, "ttftRatio.looks": 4.0, "endToEndRatio.looks": 4.0}
    assert judge(window(gaps=("router restarted",)), state=state).state == state
    assert judge(window(speculative=arm(20, seed=3)), state=state).state == state


def test_a_check_short_of_data_spends_nothing_while_the_others_do() -> None:
    no_ttft = replace(arm(seed=3), ttft_seconds=())
    state = judge(window(speculative=no_ttft)).state
    assert state == {"timePerCommittedTokenRatio.looks": 1.0, "endToEndRatio.looks": 1.0}


@pytest.mark.parametrize(
    "state",
    [{"timePerCommittedTokenRatio.looks": math.nan}, {"timePerCommittedTokenRatio.looks": -3.0}, {"other": 1.0}],
    ids=["nan", "negative", "unknown-key"],
)
def test_garbled_state_counts_as_nothing_spent(state: dict[str, float]) -> None:
    assert judge(window(), state=state).state["timePerCommittedTokenRatio.looks"] == 1.0


def test_the_threshold_grows_with_the_looks_spent() -> None:
    # About 8% slower: shown at the first looks of a pilot, not at its 200th.
    marginal = window(speculative=arm(seed=3, per_token=0.011))
    early = check(judge(marginal), M.TIME_PER_COMMITTED_TOKEN_RATIO)
    late = check(judge(marginal, state={"timePerCommittedTokenRatio.looks": 199.0}), M.TIME_PER_COMMITTED_TOKEN_RATIO)
    assert (early.verdict, late.verdict) == (Verdict.FAIL, Verdict.PASS)
    assert "look 1)" in early.evidence and "look 200)" in late.evidence


# --- quality gates ---------------------------------------------------------------------------------

PROBES = Quality(probes=Probes(prompts=["p"]), min_agreement=0.9)


def stop_probes(share: float) -> Check:
    """A stop probe's check after 20 answers the baseline passed, `share` of them on the speculative arm."""
    regressions = round((1 - share) * 20)
    tally = CaseTally(ProbeKind.STOP, baseline_passed=20, baseline_trials=20, paired=20, regressions=regressions)
    return behaviour_check(tally, Sequential(), min_agreement=PROBES.min_agreement, alpha=0.01)


NO_ROUND = probe_checks(None, PROBES.probes.all_cases if PROBES.probes else (), quality=PROBES, confidence=0.95)


@pytest.mark.parametrize(
    ("extra", "quality", "verdict", "fallback"),
    [
        ((stop_probes(0.95),), PROBES, Verdict.PASS, None),
        ((stop_probes(0.5),), PROBES, Verdict.FAIL, FallbackReason.QUALITY_REGRESSION),
        (NO_ROUND, PROBES, Verdict.INCONCLUSIVE, None),
        ((), PROBES, Verdict.INCONCLUSIVE, None),
        (
            (webhook_check("biz", False, critical=True, detail="HTTP 500"),),
            QUALITY,
            Verdict.FAIL,
            FallbackReason.CRITICAL_WEBHOOK_FAILED,
        ),
        ((webhook_check("biz", False, critical=False, detail="timeout"),), QUALITY, Verdict.FAIL, None),
        ((webhook_check("biz", True, critical=True),), QUALITY, Verdict.PASS, None),
        ((), Quality(webhooks=[Webhook(name="biz", url="http://biz/check")]), Verdict.INCONCLUSIVE, None),
    ],
    ids=[
        "probes-agree",
        "probes-diverge",
        "no-probe-round-yet",
        "probes-configured-but-not-given",
        "critical-webhook-fails",
        "ordinary-webhook-fails",
        "critical-webhook-passes",
        "webhook-configured-but-not-given",
    ],
)
def test_quality_gates(
    extra: tuple[Check, ...], quality: Quality, verdict: Verdict, fallback: FallbackReason | None
) -> None:
    judged = judge(window(), quality=quality, extra=extra)
    assert (judged.verdict, judged.fallback) == (verdict, fallback), judged.reason


def test_a_quality_gate_fires_even_in_a_window_with_gaps() -> None:
    judged = judge(window(gaps=("scrape failed",)), quality=PROBES, extra=(stop_probes(0.2),))
    assert judged.fallback is FallbackReason.QUALITY_REGRESSION


# --- shapes --------------------------------------------------------------------------------------


def test_a_failing_verdict_names_its_failing_check() -> None:
    with pytest.raises(ValueError, match="failing check"):
        WindowVerdict(verdict=Verdict.FAIL, checks=())


def test_a_check_refuses_non_finite_figures() -> None:
    with pytest.raises(ValueError, match="finite"):
        Check(metric=M.TTFT_RATIO, verdict=Verdict.PASS, observed=math.inf)


def test_reason_fits_status() -> None:
    gaps = tuple(f"gap {i} " + "x" * 100 for i in range(20))
    assert len(judge(window(gaps=gaps)).reason) <= 1024


def test_reasons_name_the_arm_the_window_compares_with() -> None:
    """Without a control arm the speculative arm is judged against production's baseline, by name."""
    w = replace(window(compared=arm(10, seed=2)), compared_arm=Arm.BASELINE)
    assert "the baseline arm has 10 usable requests" in judge(w).reason
    assert "x control TTFT p99" in check(judge(window()), M.TTFT_RATIO).evidence


def test_summary_shows_the_speculative_arm_against_the_compared_arm() -> None:
    w = window(speculative=arm(seed=3, per_token=0.006))
    verdict = judge(w)
    summary = summarize(w, verdict)
    assert summary.end == w.end and summary.verdict is Verdict.PASS and summary.samples == 200
    assert summary.ratio == pytest.approx(check(verdict, M.TIME_PER_COMMITTED_TOKEN_RATIO).observed)
    assert summary.ms_per_committed_token == pytest.approx(w.speculative.time_per_committed_token * 1000)  # type: ignore[operator]
    assert summary.ttft_p99 is not None and summary.e2e_p95 is not None
    assert summary.acceptance_length == 2.5 and summary.reason == verdict.reason


def test_summary_of_an_empty_window_has_no_figures() -> None:
    w = window(speculative=arm(0), compared=arm(0))
    summary = summarize(w, judge(w))
    assert (summary.ratio, summary.ms_per_committed_token, summary.ttft_p99, summary.samples) == (None, None, None, 0)
