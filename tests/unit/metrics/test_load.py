"""Window loads from the router's samples (Little's law) and the engines, and KV blocks from cache_config_info."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from specpilot.analysis.window import ArmEngine
from specpilot.metrics.engine_window import ENGINE_FAMILIES, EngineScrape, ScrapeFailure
from specpilot.metrics.exposition import parse_exposition
from specpilot.metrics.load import cache_config, kv_blocks, window_load
from specpilot.wire.names import Arm
from specpilot.wire.samples import RequestOutcome
from tests.unit.metrics.builders import ok_sample

START = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
END = START + timedelta(seconds=10)


def test_offered_load_counts_what_arrived_and_in_flight_the_time_held_over_the_window() -> None:
    t0 = START.timestamp()
    samples = [
        # speculative: 4 requests of 5 s each finish inside: 20 s held over 10 s on 2 replicas = 1 per replica
        *(ok_sample(at=t0 + i, e2e=5.0, prompt_tokens=100 + i) for i in range(4)),
        # a timeout holds its slot as long as a success
        ok_sample(at=t0, e2e=4.0, arm=Arm.BASELINE, outcome=RequestOutcome.TIMEOUT, scope="chat"),
        ok_sample(at=t0 + 1, e2e=6.0, arm=Arm.BASELINE),
        ok_sample(at=t0 - 30, e2e=1.0),  # finished before the window
        ok_sample(at=t0 + 8, e2e=5.0),  # finishes after it
    ]
    engines = {Arm.SPECULATIVE: ArmEngine(running=3.0, waiting=1.0, batch_seen=2.5)}
    finished = [sample for sample in samples if START.timestamp() <= sample.at + sample.e2e < END.timestamp()]
    arrived = {Arm.SPECULATIVE: 6, Arm.BASELINE: 2}  # the ledger's count of requests that started in the window
    load = window_load(
        finished,
        arrived=arrived,
        scope="code",
        start=START,
        end=END,
        replicas={Arm.SPECULATIVE: 2, Arm.BASELINE: 1},
        engines=engines,
    )
    spec, base = load.arms[Arm.SPECULATIVE], load.arms[Arm.BASELINE]
    assert spec.in_flight_per_replica == pytest.approx(1.0)
    assert base.in_flight_per_replica == pytest.approx(1.0)
    assert spec.running_per_replica == pytest.approx(1.5) and spec.waiting_per_replica == pytest.approx(0.5)
    assert base.running_per_replica is None
    assert spec.batch_seen == 2.5 and base.batch_seen is None  # the engines' batch, where reported
    # offered load: every request that arrived in the window, per second and replica (6 on 2, 2 on 1, in 10 s)
    assert spec.offered_per_replica == pytest.approx(0.3) and base.offered_per_replica == pytest.approx(0.2)
    assert load.arrival_rate == pytest.approx(0.5)  # five code requests finished in 10 s
    assert load.prompt_tokens == (100, 101, 102, 103)
    assert load.output_tokens == (11,) * 5


def test_kv_blocks_from_the_newest_scrape_that_reports_them() -> None:
    text = (
        "# TYPE vllm:cache_config_info gauge\n"
        'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="3862"} 1.0\n'
    )
    scrape = EngineScrape(at=START, pod="p", exposition=parse_exposition(text, ENGINE_FAMILIES))
    assert kv_blocks([scrape, ScrapeFailure(at=END, pod="p", reason="refused")]) == 3862
    assert cache_config([scrape], "block_size") == 16
    empty = EngineScrape(at=START, pod="p", exposition=parse_exposition("", ENGINE_FAMILIES))
    assert kv_blocks([empty]) is None and cache_config([empty], "block_size") is None
