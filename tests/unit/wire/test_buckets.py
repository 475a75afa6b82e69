"""The shared buckets are vLLM 0.33's, as the reference lists them; the fine buckets count latencies
exact to 2.9%, in few keys."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest

from specpilot.wire.buckets import (
    FINE_BUCKETS,
    FINE_PER_OCTAVE,
    INTER_TOKEN_LATENCY,
    REQUEST_LATENCY,
    TIME_TO_FIRST_TOKEN,
    FineCounts,
    fine_bucket,
    fine_bucket_bounds,
)

REFERENCE = json.loads((Path(__file__).parents[2] / "data" / "vllm-0.33-metrics.json").read_text())


@pytest.mark.parametrize(
    ("family", "buckets"),
    [
        ("time_to_first_token", TIME_TO_FIRST_TOKEN),
        ("inter_token_latency", INTER_TOKEN_LATENCY),
        ("request_latency", REQUEST_LATENCY),
    ],
)
def test_the_shared_buckets_are_vllms(family: str, buckets: tuple[float, ...]) -> None:
    assert list(buckets) == REFERENCE["bucket_families"][family]


def test_a_fine_bucket_is_a_24th_of_an_octave_from_a_millisecond() -> None:
    assert fine_bucket(0.1) == math.floor(FINE_PER_OCTAVE * math.log2(100))
    low, high = fine_bucket_bounds(fine_bucket(0.1))
    assert low <= 0.1 < high and high / low == pytest.approx(2 ** (1 / FINE_PER_OCTAVE))
    assert fine_bucket(0.0) == fine_bucket(0.0005) == 0
    assert fine_bucket(1e9) == fine_bucket(1e6) == FINE_BUCKETS - 1


def counted(seconds: list[float]) -> FineCounts:
    return FineCounts(Counter(fine_bucket(value) for value in seconds))


def test_counts_are_widened_until_few_keys_are_left_and_keep_every_value() -> None:
    # 2,000 gaps spread evenly in log from 5 ms to 500 ms: every fine bucket between them taken
    gaps = [0.005 * 100 ** (i / 1999) for i in range(2000)]
    fine = counted(gaps)
    bounded = fine.bounded(32)
    assert len(fine.counts) > 150 and bounded.width == 8 and len(bounded.counts) <= 32
    assert bounded.total == 2000 and all(key % 8 == 0 for key in bounded.counts)
    assert bounded.bounds(min(bounded.counts))[0] <= 0.005 and bounded.bounds(max(bounded.counts))[1] > 0.5
    assert counted([0.02] * 500).bounded(32) == FineCounts({fine_bucket(0.02): 500})  # one key: as it was


def test_a_quantile_lies_in_its_keys_bounds() -> None:
    gaps = counted([0.010] * 980 + [0.0325] * 20)
    low, high = gaps.quantile(0.99) or (0, 0)
    assert low <= 0.0325 < high and high / low == pytest.approx(2 ** (1 / FINE_PER_OCTAVE))
    low, high = gaps.bounded(1).quantile(0.5) or (0, 0)
    assert low <= 0.010 < high
    assert FineCounts().quantile(0.99) is None


def test_a_placed_quantile_reads_within_its_key_by_rank_so_wider_keys_read_nearly_what_fine_ones_do() -> None:
    one = counted([0.0325])
    low, high = one.quantile(0.99) or (0, 0)
    assert one.placed(0.99) == pytest.approx(math.sqrt(low * high)), "a key of one count: its geometric middle"
    gaps = counted([0.005 * 100 ** (i / 1999) for i in range(2000)])  # evenly in log from 5 ms to 500 ms
    for q in (0.5, 0.9, 0.99):
        truth = 0.005 * 100**q
        for width in (1, 8):
            found = gaps.widened(width).placed(q)
            assert found is not None and abs(math.log2(found / truth)) < 1 / FINE_PER_OCTAVE, (q, width, found)
    assert FineCounts().placed(0.5) is None


def test_counts_pool_at_the_widest_width() -> None:
    fine, wide = counted([0.02, 0.021]), counted([0.04]).widened(4)
    pooled = FineCounts.pooled([fine, wide, FineCounts()])
    assert pooled.width == 4 and pooled.total == 3
    assert pooled == FineCounts.pooled([fine.widened(4), wide])
    assert FineCounts.pooled([]) == FineCounts()
