"""Prometheus metrics of the router, per scope and arm, on its own registry.

Time per output token can be computed token-weighted, like the engine's, as
``Δ specpilot_router_decode_seconds_sum / Δ specpilot_router_decode_tokens_total``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from specpilot.router.decide import Endpoint, Fallback, Routes
from specpilot.wire.names import Arm
from specpilot.wire.samples import RequestOutcome, RequestSample

PREFIX = "specpilot_router"
# vLLM's TTFT set; vLLM's ITL set with finer low buckets (speculation goes well below 10 ms);
# vLLM's request-latency set with sub-0.3 s buckets for short requests.
TTFT_BUCKETS = (
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
TPOT_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.0075,
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
LATENCY_BUCKETS = (
    0.01,
    0.05,
    0.1,
    0.2,
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

_SCOPE_ARM = ("scope", "arm")


class RouterMetrics:
    """The router's metric families and the few ways they change."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._children: dict[tuple[object, ...], Any] = {}
        r = self.registry
        self.requests = Counter(
            f"{PREFIX}_requests", "Finished requests by outcome.", [*_SCOPE_ARM, "outcome"], registry=r
        )
        self.ttft = Histogram(
            f"{PREFIX}_ttft_seconds",
            "Time to the first content chunk of ok streams.",
            _SCOPE_ARM,
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.e2e = Histogram(
            f"{PREFIX}_e2e_seconds",
            "End-to-end time of every request, whatever its outcome.",
            [*_SCOPE_ARM, "outcome"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.tpot = Histogram(
            f"{PREFIX}_time_per_output_token_seconds",
            "Per ok stream: decode time / (output tokens - 1).",
            _SCOPE_ARM,
            buckets=TPOT_BUCKETS,
            registry=r,
        )
        self.decode = Histogram(
            f"{PREFIX}_decode_seconds",
            "Decode time (first to last content chunk) of ok streams.",
            _SCOPE_ARM,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.decode_tokens = Counter(
            f"{PREFIX}_decode_tokens", "Output tokens after the first, of ok streams.", _SCOPE_ARM, registry=r
        )
        self.output_tokens = Counter(
            f"{PREFIX}_output_tokens",
            "Output tokens of every request (usage, else counted).",
            _SCOPE_ARM,
            registry=r,
        )
        self.deadline = Counter(
            f"{PREFIX}_deadline",
            "Requests of scopes with a deadline, by whether it was met.",
            [*_SCOPE_ARM, "met"],
            registry=r,
        )
        self.in_flight = Gauge(f"{PREFIX}_in_flight", "Requests being proxied.", _SCOPE_ARM, registry=r)
        self.fallback_requests = Counter(
            f"{PREFIX}_fallback_requests",
            "Requests sent to baseline because of a fallback.",
            ["scope", "reason"],
            registry=r,
        )
        self.retries = Counter(
            f"{PREFIX}_retries", "Requests moved to another endpoint after a failed connect.", ["arm"], registry=r
        )
        self.refused = Counter(
            f"{PREFIX}_refused", "Requests the router refused before routing.", ["reason"], registry=r
        )
        self.other_requests = Counter(
            f"{PREFIX}_other_requests",
            "Unmeasured /v1 requests (not completions), sent to baseline.",
            ["status"],
            registry=r,
        )
        self.weight = Gauge(f"{PREFIX}_route_weight", "Effective percentage of new requests.", _SCOPE_ARM, registry=r)
        self.fallback = Gauge(
            f"{PREFIX}_fallback",
            "1 while a scope runs ordinary decoding for this reason.",
            ["scope", "reason"],
            registry=r,
        )
        self.table_generation = Gauge(
            f"{PREFIX}_table_generation", "Generation of the routing table in use (-1: none).", registry=r
        )
        self.table_updated = Gauge(
            f"{PREFIX}_table_updated_timestamp_seconds", "updatedAt of the routing table in use.", registry=r
        )
        self.table_fallback = Gauge(
            f"{PREFIX}_table_fallback",
            "1 while the whole table is unusable for this reason.",
            ["reason"],
            registry=r,
        )
        self.ready_endpoints = Gauge(f"{PREFIX}_ready_endpoints", "Ready endpoints per arm.", ["arm"], registry=r)
        self.watch_restarts = Counter(
            f"{PREFIX}_watch_restarts",
            "Kubernetes watches restarted, by resource and reason.",
            ["resource", "reason"],
            registry=r,
        )

    def observe(self, sample: RequestSample) -> None:
        scope, arm, outcome = sample.scope, sample.arm.value, sample.outcome.value
        child = self._child
        child(self.requests, scope, arm, outcome).inc()
        child(self.e2e, scope, arm, outcome).observe(sample.e2e)
        if sample.output_tokens:
            child(self.output_tokens, scope, arm).inc(sample.output_tokens)
        if sample.deadline_met is not None:
            child(self.deadline, scope, arm, "true" if sample.deadline_met else "false").inc()
        if sample.outcome is not RequestOutcome.OK:
            return
        if sample.ttft is not None:
            child(self.ttft, scope, arm).observe(sample.ttft)
        tpot = sample.tpot
        if tpot is not None and sample.decode is not None and sample.output_tokens is not None:
            child(self.tpot, scope, arm).observe(tpot)
            child(self.decode, scope, arm).observe(sample.decode)
            child(self.decode_tokens, scope, arm).inc(sample.output_tokens - 1)

    def _child(self, family: Any, *labels: str) -> Any:
        """`family.labels(*labels)`, looked up once: these families are never cleared."""
        key = (id(family), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = family.labels(*labels)
        return child

    def show_routes(self, routes: Routes, endpoints: Mapping[Arm, tuple[Endpoint, ...]]) -> None:
        """Bring the routing gauges in line with the effective routes."""
        self.weight.clear()
        self.fallback.clear()
        self.table_fallback.clear()
        for name, route in routes.scopes.items():
            for arm in Arm:
                self.weight.labels(name, arm.value).set(route.weights.of(arm))
            for reason in route.fallbacks:
                self.fallback.labels(name, reason.value).set(1)
        if routes.table_fallback is not None:
            self.table_fallback.labels(routes.table_fallback.value).set(1)
        table = routes.table
        self.table_generation.set(-1 if table is None else table.generation)
        self.table_updated.set(0 if table is None else table.updated_at.timestamp())
        for arm in Arm:
            self.ready_endpoints.labels(arm.value).set(len(endpoints.get(arm, ())))

    def count_fallback(self, scope: str, reason: Fallback) -> None:
        self.fallback_requests.labels(scope, reason.value).inc()
