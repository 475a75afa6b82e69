"""An arm's engine window as PromQL: the selectors and queries built, the API's answers read, the
figures as direct scraping defines them, and every answer that cannot be trusted made inconclusive."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from specpilot.api.spec import PrometheusArms, PrometheusSource
from specpilot.metrics.promql import (
    Answer,
    Figure,
    Matcher,
    QueryFailure,
    Series,
    arm_engine,
    arm_matchers,
    engine_queries,
    parse_answer,
    selector,
)
from specpilot.wire.names import Arm

END = datetime(2026, 11, 29, 12, 0, tzinfo=UTC).timestamp()
SOURCE = PrometheusSource(url="http://prometheus.monitoring:9090")
A, B = "demo-speculative-7d9f-abcde", "demo-speculative-7d9f-fghij"  # the arm's two pods


def one(value: float, **labels: str) -> tuple[Series, ...]:
    return (Series(labels=labels, points=((END, value),)),)


def pods(*values: tuple[str, float]) -> tuple[Series, ...]:
    return tuple(Series(labels={"pod": pod}, points=((END, value),)) for pod, value in values)


def buckets(*counts: tuple[str, float]) -> tuple[Series, ...]:
    """``sum by (le)`` of bucket increases: one series per upper bound."""
    return tuple(Series(labels={"le": le}, points=((END, count),)) for le, count in counts)


def healthy(**changes: Answer) -> dict[Figure, Answer]:
    """A speculative arm of two pods over a window: 1,000 tokens of 100 requests in 9 s of decoding,
    and 1,000 engine steps, 50 of them 25 to 50 ms apart (the p99 in that bucket)."""
    answers: dict[Figure, Answer] = {
        Figure.GENERATED: one(1000),
        Figure.DECODE: one(9.0),
        Figure.FINISHED: one(100),
        Figure.PREEMPTIONS: one(2.0000001),
        Figure.INTER_TOKEN_LATENCY: buckets(("0.01", 0), ("0.025", 950), ("0.05", 1000), ("+Inf", 1000)),
        Figure.DRAFTS: one(300),
        Figure.DRAFT_TOKENS: one(900),
        Figure.ACCEPTED: one(600),
        Figure.ACCEPTED_PER_POSITION: (
            Series(labels={"position": "1"}, points=((END, 180),)),
            Series(labels={"position": "0"}, points=((END, 270),)),
            Series(labels={"position": "2"}, points=((END, 150),)),
        ),
        Figure.KV_USAGE: (Series(labels={}, points=((END - 4, 0.5), (END - 2, math.nan), (END, 0.7))),),
        Figure.RUNNING: one(3.5),
        Figure.WAITING: one(0.25),
        Figure.SCRAPED: pods((A, 1), (B, 1)),
        Figure.UP: pods((A, 1), (B, 1)),
        Figure.UP_AT_START: pods((A, 1), (B, 1)),
        Figure.STARTED: pods((A, END - 3600), (B, END - 3600)),
        Figure.RESETS: (),  # only pods with a reset answer
        Figure.RESTARTS: pods((A, 0), (B, 0)),
    }
    return {**answers, **{Figure(k): v for k, v in changes.items()}}


def engine(answers: dict[Figure, Answer], *, speculative: bool = True) -> Any:
    start = datetime.fromtimestamp(END - 60, UTC)
    return arm_engine(answers, start=start, quantile=0.99, speculative=speculative, pod_label="pod", arm="speculative")


# --- selectors and queries ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "arm", "expected"),
    [
        pytest.param(
            SOURCE,
            Arm.BASELINE,
            '{namespace="team-a",pod=~"demo-baseline-[a-z0-9]+-[a-z0-9]+"}',
            id="default-namespace-and-pod-names",
        ),
        pytest.param(
            PrometheusSource(
                url="http://p:9090",
                labels={"job": "vllm", "cluster": "prod"},
                namespace_label="kubernetes_namespace",
                pod_label="kubernetes_pod_name",
            ),
            Arm.SPECULATIVE,
            '{cluster="prod",job="vllm",kubernetes_namespace="team-a",'
            'kubernetes_pod_name=~"demo-speculative-[a-z0-9]+-[a-z0-9]+"}',
            id="common-labels-and-other-label-names",
        ),
        pytest.param(
            PrometheusSource(
                url="http://p:9090",
                labels={"cluster": "prod"},
                arms=PrometheusArms(
                    baseline={"specpilot_io_arm": "baseline", "namespace": "team-a"},
                    speculative={"specpilot_io_arm": "speculative", "namespace": "team-a"},
                ),
            ),
            Arm.SPECULATIVE,
            '{cluster="prod",namespace="team-a",specpilot_io_arm="speculative"}',
            id="arm-labels-replace-the-pod-names",
        ),
        pytest.param(
            PrometheusSource(url="http://p:9090", labels={"note": 'a "quoted" \\ value\n'}),
            Arm.BASELINE,
            '{note="a \\"quoted\\" \\\\ value\\n",namespace="team-a",pod=~"demo-baseline-[a-z0-9]+-[a-z0-9]+"}',
            id="values-escaped-as-promql-strings",
        ),
    ],
)
def test_arm_selector(source: PrometheusSource, arm: Arm, expected: str) -> None:
    assert selector(arm_matchers(source, namespace="team-a", pilot="demo", arm=arm)) == expected


MATCH = (Matcher("namespace", "team-a"), Matcher("pod", "demo-baseline-.+", regex=True))
SEL = '{namespace="team-a",pod=~"demo-baseline-.+"}'


@pytest.mark.parametrize(
    ("figure", "expected"),
    [
        (Figure.GENERATED, f"sum(increase(vllm:generation_tokens_total{SEL}[300s]))"),
        (Figure.DECODE, f"sum(increase(vllm:request_decode_time_seconds_sum{SEL}[300s]))"),
        (Figure.FINISHED, f"sum(increase(vllm:request_decode_time_seconds_count{SEL}[300s]))"),
        (Figure.DRAFTS, f"sum(increase(vllm:spec_decode_num_drafts_total{SEL}[300s]))"),
        (
            Figure.INTER_TOKEN_LATENCY,
            f"sum by (le) (increase(vllm:inter_token_latency_seconds_bucket{SEL}[300s]))",
        ),
        (
            Figure.ACCEPTED_PER_POSITION,
            f"sum by (position) (increase(vllm:spec_decode_num_accepted_tokens_per_pos_total{SEL}[300s]))",
        ),
        (Figure.KV_USAGE, f"max(vllm:kv_cache_usage_perc{SEL})[300s:2500ms]"),
        (Figure.RUNNING, f"sum(avg_over_time(vllm:num_requests_running{SEL}[300s]))"),
        (Figure.SCRAPED, f"max by (pod) (max_over_time(up{SEL}[300s]))"),
        (Figure.UP, f"min by (pod) (up{SEL})"),
        (Figure.UP_AT_START, f"min by (pod) (up{SEL} offset 300s)"),
        (Figure.STARTED, f"max by (pod) (process_start_time_seconds{SEL})"),
        (Figure.RESTARTS, f"max by (pod) (changes(process_start_time_seconds{SEL}[300s]))"),
    ],
    ids=lambda value: value.value if isinstance(value, Figure) else "",
)
def test_query(figure: Figure, expected: str) -> None:
    queries = engine_queries(MATCH, window=timedelta(minutes=5), step=timedelta(seconds=2.5), pod_label="pod")
    assert queries[figure] == expected


def test_every_counter_read_is_checked_for_resets() -> None:
    query = engine_queries(MATCH, window=timedelta(seconds=15), step=timedelta(seconds=2), pod_label="pod")
    resets = query[Figure.RESETS].split(" or ")
    assert resets[0] == f"(sum by (pod) (resets(vllm:generation_tokens_total{SEL}[15s])) > 0)"
    assert len(resets) == 9
    for name in (
        "request_decode_time_seconds_sum",
        "request_decode_time_seconds_count",
        "inter_token_latency_seconds_bucket",
        "spec_decode_num_accepted_tokens_per_pos_total",
    ):
        assert f"(sum by (pod) (resets(vllm:{name}{SEL}[15s])) > 0)" in resets
    assert set(query) == set(Figure)


# --- answers ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param(
            {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [END, "3.5"]}]}},
            (Series(labels={}, points=((END, 3.5),)),),
            id="vector",
        ),
        pytest.param(
            {"status": "success", "data": {"resultType": "vector", "result": []}},
            (),
            id="empty-vector",
        ),
        pytest.param(
            {
                "status": "success",
                "data": {
                    "resultType": "matrix",
                    "result": [{"metric": {"pod": "p"}, "values": [[END - 2, "0.5"], [END, "+Inf"]]}],
                },
            },
            (Series(labels={"pod": "p"}, points=((END - 2, 0.5), (END, math.inf))),),
            id="matrix",
        ),
        pytest.param(
            {"status": "error", "errorType": "bad_data", "error": 'parse error: unexpected "}"'},
            QueryFailure('bad_data: parse error: unexpected "}"'),
            id="error",
        ),
        pytest.param(
            {"status": "success", "data": {"resultType": "scalar", "result": [END, "1"]}},
            QueryFailure("a scalar result where a vector or matrix was expected"),
            id="scalar",
        ),
        pytest.param(
            {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [END]}]}},
            QueryFailure("a malformed vector (ValueError: not enough values to unpack (expected 2, got 1))"),
            id="point-without-value",
        ),
        pytest.param(
            {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [END, "x"]}]}},
            QueryFailure("a malformed vector (ValueError: could not convert string to float: 'x')"),
            id="value-not-a-number",
        ),
        pytest.param({"status": "success"}, QueryFailure("a response without data.result"), id="no-data"),
        pytest.param([], QueryFailure("not a Prometheus API response"), id="not-an-object"),
    ],
)
def test_parse_answer(body: Any, expected: Answer) -> None:
    assert parse_answer(body) == expected


def test_nan_values_are_read_as_nan() -> None:
    body = {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [END, "NaN"]}]}}
    answer = parse_answer(body)
    assert isinstance(answer, tuple) and math.isnan(answer[0].value)


# --- figures ------------------------------------------------------------------------------------


def test_figures_as_direct_scraping_defines_them() -> None:
    got = engine(healthy())
    assert got.inconclusive is None
    assert got.time_per_committed_token == pytest.approx(9.0 / (1000 - 100))
    assert got.acceptance_rate == pytest.approx(600 / 900)
    assert got.acceptance_length == pytest.approx(1 + 600 / 300)
    assert got.per_position_acceptance == pytest.approx((0.9, 0.6, 0.5))  # by position, over drafts
    # the quantile from the buckets, as histogram_quantile reads them, with the bucket it lies in
    itl = got.inter_token_latency
    assert itl is not None and (itl.value, itl.low, itl.high) == pytest.approx((0.045, 0.025, 0.05))
    assert got.preemptions == 2
    assert (got.running, got.waiting) == (3.5, 0.25)
    # a step with NaN has no point, as a scrape cycle with NaN has none
    assert got.kv_usage == (
        (datetime.fromtimestamp(END - 4, UTC), 0.5),
        (datetime.fromtimestamp(END, UTC), 0.7),
    )


def test_bucket_series_without_a_numeric_le_are_left_out_as_promql_leaves_them() -> None:
    odd = (*buckets(("0.025", 950), ("0.05", 1000), ("+Inf", 1000)), *one(5000), *buckets(("x", 5000)))
    itl = engine(healthy(interTokenLatency=odd)).inter_token_latency
    assert itl is not None and itl.value == pytest.approx(0.045)


def test_no_traffic_is_no_figure_and_not_inconclusive() -> None:
    zero = {f: one(0) for f in (Figure.GENERATED, Figure.DECODE, Figure.FINISHED, Figure.DRAFTS, Figure.ACCEPTED)}
    got = engine(healthy(**zero, draftTokens=one(0), interTokenLatency=buckets(("0.01", 0), ("+Inf", 0))))
    assert got.inconclusive is None
    assert (got.time_per_committed_token, got.acceptance_rate, got.acceptance_length) == (None, None, None)
    assert (got.per_position_acceptance, got.inter_token_latency) == ((), None)


def test_an_ordinary_arm_needs_no_spec_decode_series() -> None:
    none: dict[str, Answer] = {f.value: () for f in (Figure.DRAFTS, Figure.DRAFT_TOKENS, Figure.ACCEPTED)}
    got = engine(healthy(**none, acceptedPerPosition=()), speculative=False)
    assert got.inconclusive is None
    assert (got.acceptance_length, got.per_position_acceptance) == (None, ())


INCONCLUSIVE = [
    pytest.param(
        {"decode": QueryFailure("POST http://p:9090/api/v1/query: no answer within 11s")},
        "Prometheus query for speculative decode failed: POST http://p:9090/api/v1/query: no answer within 11s",
        id="query-failed",
    ),
    pytest.param(
        {"scraped": (), "up": ()},
        "Prometheus holds no up series of the speculative arm within the window",
        id="no-targets",
    ),
    pytest.param(
        {"up": pods((A, 1), (B, 0))},
        f"{B}: no successful scrape at the window's end (its last scrape failed, or it is gone)",
        id="failed-scrape-at-the-end",
    ),
    pytest.param(
        {"up": pods((A, 1))},
        f"{B}: no successful scrape at the window's end (its last scrape failed, or it is gone)",
        id="pod-gone",
    ),
    pytest.param(
        {"upAtStart": pods((A, 0), (B, 1))},
        f"{A}: its scrape at the window's start failed",
        id="failed-scrape-at-the-start",
    ),
    pytest.param(
        {"upAtStart": pods((B, 1))},
        f"{A}: not scraped at the window's start, and it started before the window",
        id="first-scraped-late",
    ),
    pytest.param(
        {"upAtStart": pods((B, 1)), "started": pods((B, END - 3600))},
        f"{A}: not scraped at the window's start, and its start time is unknown",
        id="first-scraped-late-start-unknown",
    ),
    pytest.param(
        {"restarts": pods((A, 1)), "resets": pods((A, 4))},
        "demo-speculative-7d9f-abcde: restarted within the window (process start time changed)",
        id="restart",
    ),
    pytest.param(
        {"resets": pods((B, 1))},
        "demo-speculative-7d9f-fghij: counters went down within the window (reset by a restart)",
        id="counter-reset",
    ),
    pytest.param(
        {"generated": ()},
        "Prometheus holds no vllm:generation_tokens_total of the speculative arm",
        id="family-missing",
    ),
    pytest.param(
        {"drafts": (), "kvUsage": ()},
        "Prometheus holds no vllm:spec_decode_num_drafts_total, vllm:kv_cache_usage_perc of the speculative arm",
        id="spec-decode-and-gauge-missing",
    ),
    pytest.param(
        {"decode": one(math.nan), "waiting": one(math.nan)},
        "NaN in vllm:request_decode_time_seconds_sum, vllm:num_requests_waiting of the speculative arm",
        id="nan",
    ),
    pytest.param(
        {"interTokenLatency": buckets(("0.025", math.nan), ("+Inf", 10))},
        "NaN in vllm:inter_token_latency_seconds_bucket of the speculative arm",
        id="nan-bucket",
    ),
]


@pytest.mark.parametrize(("changes", "reason"), INCONCLUSIVE)
def test_inconclusive(changes: dict[str, Answer], reason: str) -> None:
    got = engine(healthy(**changes))
    assert got.inconclusive is not None and reason in got.inconclusive


def test_a_failed_scrape_between_the_edges_costs_nothing() -> None:
    """Prometheus keeps no part of a scrape it could not take, and the increase spans the gap."""
    assert engine(healthy(scraped=pods((A, 1), (B, 1)))).inconclusive is None  # max_over_time: some scrape worked


def test_a_pod_started_within_the_window_counts_from_its_first_scrape() -> None:
    started = pods((A, END - 3600), (B, END - 30))  # B's process started 30 s into the 60 s window
    assert engine(healthy(upAtStart=pods((A, 1)), started=started)).inconclusive is None


def test_a_restart_is_said_once() -> None:
    got = engine(healthy(restarts=pods((A, 1)), resets=pods((A, 3))))
    assert got.inconclusive == "demo-speculative-7d9f-abcde: restarted within the window (process start time changed)"


def test_many_reasons_are_bounded() -> None:
    names = [(f"demo-speculative-7d9f-{i:05d}", 0.0) for i in range(8)]
    got = engine(healthy(scraped=pods(*names), up=pods(*names), upAtStart=pods(*names)))
    assert got.inconclusive is not None and got.inconclusive.endswith("; and 3 more")
