"""The shared buckets are vLLM 0.33's, as the reference lists them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specpilot.wire.buckets import INTER_TOKEN_LATENCY, REQUEST_LATENCY, TIME_TO_FIRST_TOKEN

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
