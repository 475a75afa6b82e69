"""Prometheus metrics of the router, per scope and arm, on its own registry.

The per-request families are tallied in plain counts (`RequestTally`) and rendered when scraped:
a prometheus_client child takes a lock and walks its buckets on every change, which costs more
than the rest of a request's bookkeeping.

Time per output token can be computed token-weighted, like the engine's, as
``Δ specpilot_router_decode_seconds_sum / Δ specpilot_router_decode_tokens_total``.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Mapping, Sequence
from itertools import accumulate
from typing import TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from specpilot.router.core.choice import Endpoint, Routes
from specpilot.wire.buckets import INTER_TOKEN_LATENCY, REQUEST_LATENCY, TIME_TO_FIRST_TOKEN
from specpilot.wire.names import Arm
from specpilot.wire.samples import Fallback, RequestOutcome, RequestSample

_K = TypeVar("_K", bound=tuple[str, ...])

PREFIX = "specpilot_router"
# vLLM's TTFT set as it is; its ITL set with finer low buckets (speculation goes well below 10 ms); its
# request-latency set with sub-0.3 s buckets for short requests.
TPOT_BUCKETS = (0.001, 0.0025, 0.005, 0.0075, *INTER_TOKEN_LATENCY)
LATENCY_BUCKETS = (0.01, 0.05, 0.1, 0.2, *REQUEST_LATENCY)

_SCOPE_ARM = ("scope", "arm")


class _Histogram:
    """Bucket counts (``le`` is each bound, the last one +Inf) and the sum of what was observed."""

    __slots__ = ("counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0


class RequestTally:
    """The families every finished request changes, as plain counts; a collector of the registry."""

    def __init__(self) -> None:
        self.in_flight: dict[tuple[str, str], int] = {}
        self._requests: dict[tuple[str, str, str], int] = {}
        self._e2e: dict[tuple[str, str, str], _Histogram] = {}
        self._ttft: dict[tuple[str, str], _Histogram] = {}
        self._tpot: dict[tuple[str, str], _Histogram] = {}
        self._decode: dict[tuple[str, str], _Histogram] = {}
        self._decode_tokens: dict[tuple[str, str], int] = {}
        self._output_tokens: dict[tuple[str, str], int] = {}
        self._deadline: dict[tuple[str, str, str], int] = {}

    def enter(self, key: tuple[str, str]) -> None:
        """A request of (scope, arm) is being proxied."""
        self.in_flight[key] = self.in_flight.get(key, 0) + 1

    def leave(self, key: tuple[str, str]) -> None:
        self.in_flight[key] -= 1

    def observe(self, sample: RequestSample) -> None:
        """Count a finished request."""
        scope, arm, outcome = sample.scope, sample.arm.value, sample.outcome.value
        key = (scope, arm)
        with_outcome = (scope, arm, outcome)
        self._requests[with_outcome] = self._requests.get(with_outcome, 0) + 1
        _observe(self._e2e, with_outcome, LATENCY_BUCKETS, sample.e2e)
        if sample.output_tokens:
            self._output_tokens[key] = self._output_tokens.get(key, 0) + sample.output_tokens
        if sample.deadline_met is not None:
            met = (scope, arm, "true" if sample.deadline_met else "false")
            self._deadline[met] = self._deadline.get(met, 0) + 1
        if sample.outcome is not RequestOutcome.OK:
            return
        if sample.ttft is not None:
            _observe(self._ttft, key, TIME_TO_FIRST_TOKEN, sample.ttft)
        tpot = sample.tpot
        if tpot is not None and sample.decode is not None and sample.output_tokens is not None:
            _observe(self._tpot, key, TPOT_BUCKETS, tpot)
            _observe(self._decode, key, LATENCY_BUCKETS, sample.decode)
            self._decode_tokens[key] = self._decode_tokens.get(key, 0) + sample.output_tokens - 1

    def collect(self) -> Iterator[Metric]:
        with_outcome = [*_SCOPE_ARM, "outcome"]
        yield _counters("requests", "Finished requests by outcome.", with_outcome, self._requests)
        yield _histograms(
            "ttft_seconds",
            "Time to the first content chunk of ok streams.",
            _SCOPE_ARM,
            TIME_TO_FIRST_TOKEN,
            self._ttft,
        )
        yield _histograms(
            "e2e_seconds",
            "End-to-end time of every request, whatever its outcome.",
            with_outcome,
            LATENCY_BUCKETS,
            self._e2e,
        )
        yield _histograms(
            "time_per_output_token_seconds",
            "Per ok stream: decode time / (output tokens - 1).",
            _SCOPE_ARM,
            TPOT_BUCKETS,
            self._tpot,
        )
        yield _histograms(
            "decode_seconds",
            "Decode time (first to last content chunk) of ok streams.",
            _SCOPE_ARM,
            LATENCY_BUCKETS,
            self._decode,
        )
        yield _counters(
            "decode_tokens", "Output tokens after the first, of ok streams.", _SCOPE_ARM, self._decode_tokens
        )
        yield _counters(
            "output_tokens", "Output tokens of every request (usage, else counted).", _SCOPE_ARM, self._output_tokens
        )
        yield _counters(
            "deadline",
            "Requests of scopes with a deadline, by whether it was met.",
            [*_SCOPE_ARM, "met"],
            self._deadline,
        )
        in_flight = GaugeMetricFamily(f"{PREFIX}_in_flight", "Requests being proxied.", labels=_SCOPE_ARM)
        for labels, value in self.in_flight.items():
            in_flight.add_metric(labels, value)
        yield in_flight


def _observe(family: dict[_K, _Histogram], key: _K, bounds: tuple[float, ...], value: float) -> None:
    histogram = family.get(key)
    if histogram is None:
        histogram = family[key] = _Histogram(bounds)
    histogram.counts[bisect_left(bounds, value)] += 1  # the first bound >= value: Prometheus' le
    histogram.sum += value


def _counters(name: str, documentation: str, labels: Sequence[str], values: Mapping[_K, int]) -> Metric:
    family = CounterMetricFamily(f"{PREFIX}_{name}", documentation, labels=labels)
    for key, value in values.items():
        family.add_metric(key, value)
    return family


def _histograms(
    name: str,
    documentation: str,
    labels: Sequence[str],
    bounds: tuple[float, ...],
    values: Mapping[_K, _Histogram],
) -> Metric:
    family = HistogramMetricFamily(f"{PREFIX}_{name}", documentation, labels=labels)
    edges = [*(floatToGoString(bound) for bound in bounds), "+Inf"]  # type: ignore[no-untyped-call]
    for key, histogram in values.items():
        cumulative = list(accumulate(histogram.counts))
        family.add_metric(key, list(zip(edges, cumulative, strict=True)), histogram.sum)
    return family


class RouterMetrics:
    """The router's metric families and the few ways they change."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.tally = RequestTally()
        r.register(self.tally)
        self.fallback_requests = Counter(
            f"{PREFIX}_fallback_requests",
            "Requests sent to baseline because of a fallback.",
            ["scope", "reason"],
            registry=r,
        )
        self.mirrored_requests = Counter(
            f"{PREFIX}_mirrored_requests",
            "Copies of speculative requests for the mirror arm: sent, or not (no endpoint, over the bound).",
            ["scope", "result"],
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
