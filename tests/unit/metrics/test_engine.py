"""An arm's engine window from its pods' scrapes: the figures as DESIGN.md defines them, and every
way the data can fail to cover the window (missing, NaN, truncated, a pod coming, going or
restarting) made inconclusive with a reason."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import pytest

from specpilot.analysis.window import ArmEngine
from specpilot.metrics.engine_window import ENGINE_FAMILIES, EngineScrape, Scrape, ScrapeFailure, engine_window
from specpilot.metrics.exposition import parse_exposition
from specpilot.metrics.quantile import bucket_quantile

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
END = T0 + timedelta(seconds=60)
STARTED = T0.timestamp() - 3600  # the pods' processes started an hour before the window
ITL_BOUNDS = ("0.05", "0.1", "+Inf")


@dataclass(frozen=True)
class Pod:
    """The counters and gauges of one pod at one scrape (one engine, as vLLM exposes it)."""

    generated: float = 0
    decode_sum: float = 0
    finished: float = 0
    preemptions: float = 0
    itl: tuple[float, float, float] = (0, 0, 0)  # cumulative counts of the ITL_BOUNDS buckets
    kv: float = 0
    running: float = 0
    waiting: float = 0
    drafts: float | None = None  # None: an ordinary arm without spec-decode families
    draft_tokens: float = 0
    accepted: tuple[float, ...] = ()  # per position; their sum is the accepted total
    started: float | None = STARTED
    tail: str = ""  # appended to the exposition text (garbage, a truncated line)

    def text(self) -> str:
        labels = 'engine="0",model_name="m"'
        lines = [
            f"vllm:generation_tokens_total{{{labels}}} {self.generated}",
            f"vllm:request_decode_time_seconds_count{{{labels}}} {self.finished}",
            f"vllm:request_decode_time_seconds_sum{{{labels}}} {self.decode_sum}",
            f"vllm:num_preemptions_total{{{labels}}} {self.preemptions}",
            *(
                f'vllm:inter_token_latency_seconds_bucket{{engine="0",le="{le}",model_name="m"}} {count}'
                for le, count in zip(ITL_BOUNDS, self.itl, strict=True)
            ),
            f"vllm:inter_token_latency_seconds_count{{{labels}}} {self.itl[-1]}",
            f"vllm:inter_token_latency_seconds_sum{{{labels}}} 0",
            f"vllm:kv_cache_usage_perc{{{labels}}} {self.kv}",
            f"vllm:num_requests_running{{{labels}}} {self.running}",
            f"vllm:num_requests_waiting{{{labels}}} {self.waiting}",
        ]
        if self.started is not None:
            lines.append(f"process_start_time_seconds {self.started}")
        if self.drafts is not None:
            per_pos = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
            lines += [
                f"vllm:spec_decode_num_drafts_total{{{labels}}} {self.drafts}",
                f"vllm:spec_decode_num_draft_tokens_total{{{labels}}} {self.draft_tokens}",
                f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}} {sum(self.accepted)}",
                *(f'{per_pos}{{engine="0",model_name="m",position="{i}"}} {n}' for i, n in enumerate(self.accepted)),
            ]
        return "\n".join(lines) + "\n" + self.tail


IDLE = Pod()
# Busy over the window: 2000 tokens generated, 20 requests finished with 19.8 s of decoding between them.
BUSY = Pod(generated=2000, decode_sum=19.8, finished=20, itl=(600, 900, 1000), kv=0.5, running=4, waiting=1)
SPEC_IDLE = replace(IDLE, drafts=0, accepted=(0, 0, 0))
SPEC_BUSY = replace(BUSY, drafts=500, draft_tokens=1500, accepted=(400, 300, 200))


def at(seconds: float, state: Pod, pod: str = "a") -> EngineScrape:
    return EngineScrape(
        at=T0 + timedelta(seconds=seconds), pod=pod, exposition=parse_exposition(state.text(), ENGINE_FAMILIES)
    )


def failed(seconds: float, pod: str = "a", reason: str = "GET http://a/metrics: HTTP 503") -> ScrapeFailure:
    return ScrapeFailure(at=T0 + timedelta(seconds=seconds), pod=pod, reason=reason)


def window(*scrapes: Scrape, speculative: bool = False, quantile: float = 0.5) -> ArmEngine:
    return engine_window(
        scrapes, start=T0, end=END, tolerance=timedelta(seconds=15), quantile=quantile, speculative=speculative
    )


def halfway(a: Pod, b: Pod) -> Pod:
    return replace(a, generated=(a.generated + b.generated) / 2, finished=(a.finished + b.finished) / 2)


def test_a_busy_ordinary_arm_over_the_window() -> None:
    got = window(at(0, IDLE), at(30, halfway(IDLE, BUSY)), at(60, BUSY))
    assert got.inconclusive is None
    assert got.time_per_committed_token == pytest.approx(19.8 / (2000 - 20))
    assert got.acceptance_rate is got.acceptance_length is None
    assert got.per_position_acceptance == ()
    assert got.inter_token_latency == bucket_quantile(0.5, [(0.05, 600), (0.1, 900), (float("inf"), 1000)])
    assert got.kv_usage == ((T0, 0.0), (T0 + timedelta(seconds=30), 0.0), (END, 0.5))
    assert got.running == pytest.approx(4 / 3) and got.waiting == pytest.approx(1 / 3)
    assert got.preemptions == 0


def test_the_batch_a_token_saw_weights_each_pod_and_scrape_by_its_own_batch() -> None:
    # batches 0, 2, 6 over three scrapes: the mean is 8/3, the tokens saw (4 + 36) / 8 = 5
    got = window(at(0, replace(IDLE, running=0)), at(30, replace(IDLE, running=2)), at(60, replace(BUSY, running=6)))
    assert got.running == pytest.approx(8 / 3) and got.batch_seen == pytest.approx(5.0)
    # two pods, each at 4, are two batches of 4, not one of 8
    pods = window(at(0, IDLE, "a"), at(0, IDLE, "b"), at(60, BUSY, "a"), at(60, BUSY, "b"))
    assert pods.batch_seen == pytest.approx(4.0)
    assert window(at(0, IDLE), at(60, replace(BUSY, running=0))).batch_seen is None


def test_speculative_figures_are_ratios_of_summed_deltas() -> None:
    got = window(at(0, SPEC_IDLE), at(60, SPEC_BUSY), speculative=True)
    assert got.inconclusive is None
    assert got.acceptance_rate == pytest.approx(900 / 1500)
    assert got.acceptance_length == pytest.approx(1 + 900 / 500)
    assert got.per_position_acceptance == pytest.approx((400 / 500, 300 / 500, 200 / 500))


def test_pods_are_summed_before_dividing_never_averaged() -> None:
    a = replace(SPEC_BUSY, generated=1010, finished=10, decode_sum=10.0, drafts=100, accepted=(90, 0, 0))
    b = replace(SPEC_BUSY, generated=110, finished=10, decode_sum=30.0, drafts=300, accepted=(30, 0, 0))
    got = window(at(0, SPEC_IDLE, "a"), at(0, SPEC_IDLE, "b"), at(60, a, "a"), at(60, b, "b"), speculative=True)
    assert got.inconclusive is None
    assert got.time_per_committed_token == pytest.approx(40.0 / (1120 - 20))
    assert got.acceptance_length == pytest.approx(1 + 120 / 400)
    assert got.kv_usage[-1] == (END, 0.5) and got.running == pytest.approx(4.0)  # (0 + 4 + 4) / 2 cycles


def test_the_kv_series_is_the_highest_pod_per_cycle_and_skips_cycles_with_a_silent_pod() -> None:
    got = window(
        at(0, replace(IDLE, kv=0.2), "a"),
        at(0, replace(IDLE, kv=0.7), "b"),
        at(30, replace(IDLE, kv=0.9), "a"),
        failed(30, "b"),
        at(60, replace(IDLE, kv=0.1), "a"),
        at(60, replace(IDLE, kv=0.3), "b"),
    )
    assert got.inconclusive is None  # a failed scrape between the edges loses no count
    assert got.kv_usage == ((T0, 0.7), (END, 0.3))


def test_no_traffic_is_no_figure_and_not_inconclusive() -> None:
    got = window(at(0, SPEC_IDLE), at(60, SPEC_IDLE), speculative=True)
    assert got == ArmEngine(kv_usage=((T0, 0.0), (END, 0.0)), running=0.0, waiting=0.0)


def test_the_edges_may_lie_within_the_tolerance() -> None:
    got = window(at(-10, IDLE), at(12, BUSY), at(70, replace(BUSY, generated=4000, finished=40, decode_sum=39.6)))
    assert got.inconclusive is None
    assert got.time_per_committed_token == pytest.approx(39.6 / (4000 - 40))


def test_a_pod_that_started_inside_the_window_counts_from_zero() -> None:
    newcomer = replace(BUSY, started=(T0 + timedelta(seconds=20)).timestamp())
    early = halfway(replace(IDLE, started=newcomer.started), newcomer)
    got = window(at(0, IDLE, "a"), at(60, IDLE, "a"), at(30, early, "b"), at(60, newcomer, "b"))
    assert got.inconclusive is None
    assert got.time_per_committed_token == pytest.approx(19.8 / (2000 - 20))


def test_a_counter_reset_is_counted_as_promql_does_and_makes_the_window_inconclusive() -> None:
    restarted = replace(BUSY, generated=300, finished=3, decode_sum=2.97, started=T0.timestamp() + 40)
    got = window(at(0, IDLE), at(30, halfway(IDLE, BUSY)), at(60, restarted))
    assert (
        got.inconclusive
        == "a: restarted between 2026-11-29T12:00:30+00:00 and 2026-11-29T12:01:00+00:00 (counters reset)"
    )
    assert got.time_per_committed_token == pytest.approx(2.97 / (1000 + 300 - 10 - 3))


@pytest.mark.parametrize(
    ("scrapes", "speculative", "reason"),
    [
        ((), False, "no engine scrape within the window"),
        ((at(-60, IDLE), at(120, BUSY)), False, "no engine scrape within the window"),
        (
            (failed(0), failed(60)),
            False,
            "a: no successful scrape within the window (last: GET http://a/metrics: HTTP 503)",
        ),
        (
            (at(0, IDLE), at(30, BUSY), failed(60)),
            False,
            "a: no scrape within 15s of the window end (last good scrape at 2026-11-29T12:00:30+00:00; "
            "then: GET http://a/metrics: HTTP 503)",
        ),
        (
            (at(0, IDLE), at(30, BUSY)),
            False,
            "a: no scrape within 15s of the window end (last good scrape at 2026-11-29T12:00:30+00:00)",
        ),
        (
            (at(30, IDLE), at(60, BUSY)),
            False,
            "a: no scrape within 15s of the window start, and it started before the window",
        ),
        (
            (at(30, replace(IDLE, started=None)), at(60, replace(BUSY, started=None))),
            False,
            "a: no scrape within 15s of the window start, and its start time is unknown",
        ),
        (
            (at(0, IDLE), at(30, BUSY), at(60, replace(BUSY, generated=5, started=None))),
            False,
            "a: counters went down between 2026-11-29T12:00:00+00:00 and 2026-11-29T12:01:00+00:00 "
            "(reset by a restart)",
        ),
        (
            (at(0, IDLE), at(60, BUSY)),
            True,
            "a at 2026-11-29T12:00:00+00:00: no vllm:spec_decode_num_drafts_total, "
            "vllm:spec_decode_num_draft_tokens_total, vllm:spec_decode_num_accepted_tokens_total, "
            "vllm:spec_decode_num_accepted_tokens_per_pos_total",
        ),
        (
            (at(0, IDLE), at(60, replace(BUSY, kv=float("nan")))),
            False,
            "a at 2026-11-29T12:01:00+00:00: NaN in vllm:kv_cache_usage_perc",
        ),
        (
            (at(0, IDLE), at(60, replace(BUSY, tail="vllm:num_requests_running 3"))),
            False,
            "a at 2026-11-29T12:01:00+00:00: truncated: the last line has no newline",
        ),
        (
            (at(0, IDLE), at(60, replace(BUSY, tail='vllm:generation_tokens_total{engine="1" 5\n'))),
            False,
            "a at 2026-11-29T12:01:00+00:00: line 14: unparsable sample",
        ),
    ],
    ids=[
        "nothing",
        "nothing-inside",
        "only-failures",
        "end-failed",
        "gone-at-end",
        "appeared-started-before",
        "appeared-start-unknown",
        "went-down",
        "spec-families-missing",
        "nan",
        "truncated",
        "garbage-line",
    ],
)
def test_what_does_not_cover_the_window_is_inconclusive(
    scrapes: tuple[Scrape, ...], speculative: bool, reason: str
) -> None:
    got = window(*scrapes, speculative=speculative)
    assert got.inconclusive is not None
    assert got.inconclusive.startswith(reason), got.inconclusive


def test_a_pod_left_out_leaves_the_others_figures_and_says_why() -> None:
    got = window(at(0, IDLE, "a"), at(60, BUSY, "a"), at(0, IDLE, "b"), failed(60, "b"))
    assert got.inconclusive is not None and got.inconclusive.startswith("b: no scrape within 15s of the window end")
    assert got.time_per_committed_token == pytest.approx(19.8 / (2000 - 20))


def test_many_reasons_are_summarised() -> None:
    scrapes = [failed(0, f"pod-{i}") for i in range(8)]
    got = window(*scrapes)
    assert got.inconclusive is not None and got.inconclusive.endswith("; and 3 more")
    assert got.inconclusive.count("no successful scrape") == 5


def test_preemptions_are_the_delta() -> None:
    got = window(at(0, replace(IDLE, preemptions=5)), at(60, replace(BUSY, preemptions=12)))
    assert got.preemptions == 7


def test_one_scrape_cannot_stand_for_both_edges() -> None:
    got = engine_window(
        [at(10, BUSY)],
        start=T0,
        end=T0 + timedelta(seconds=20),
        tolerance=timedelta(seconds=15),
        quantile=0.5,
        speculative=False,
    )
    assert got.inconclusive == "a: one scrape stands for both the window's start and its end"
