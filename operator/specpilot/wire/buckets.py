"""Histogram buckets that the mock vLLM serves and the router's histograms share or extend.

vLLM 0.33's bounds (vllm/v1/metrics/buckets.py) for time to first token, inter-token latency and
end-to-end request latency: the mock serves them as vLLM does, and the router's per-scope histograms
use the same bounds (or a superset) so that the router's figures and an engine's compare bucket for
bucket.
"""

from __future__ import annotations

TIME_TO_FIRST_TOKEN = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
INTER_TOKEN_LATENCY = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
REQUEST_LATENCY = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
