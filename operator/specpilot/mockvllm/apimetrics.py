"""vLLM 0.33's API-server Prometheus families, beside the engine's (`metrics`): `HttpMetrics` is what
prometheus-fastapi-instrumentator adds, `ToolParserMetrics` the tool parser's counter, and `new_registry`
adds the process and Python collectors a single API server exposes.
"""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    Summary,
)

HTTP_HIGHR_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.25,
    0.5,
    0.75,
    1,
    1.5,
    2,
    2.5,
    3,
    3.5,
    4,
    4.5,
    5,
    7.5,
    10,
    30,
    60,
)


def new_registry() -> CollectorRegistry:
    """A registry with the process, platform and GC collectors of a single API server."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


class ToolParserMetrics:
    """`vllm:tool_call_parser_invocations_total`, registered with `--tool-call-parser` (log stats or not).

    vLLM counts the tool parser's runs on "auto" answers: once per choice unstreamed, once per
    delta streamed, by whether that run found a tool call.
    """

    def __init__(self, registry: CollectorRegistry, *, model_name: str) -> None:
        family = Counter(
            "vllm:tool_call_parser_invocations_total",
            "Total number of ToolParser invocations. Non-streaming increments once per choice; "
            "streaming increments once per delta.",
            ["model_name", "mode", "outcome", "request_type"],
            registry=registry,
        )
        series = {
            (mode, outcome, request_type): family.labels(
                model_name=model_name, mode=mode, outcome=outcome, request_type=request_type
            )
            for mode in ("streaming", "non_streaming")
            for outcome in ("tool_call", "no_tool_call")
            for request_type in ("chat_completions", "responses", "other")
        }
        self._chat = {key[:2]: child for key, child in series.items() if key[2] == "chat_completions"}

    def record(self, *, streaming: bool, tool_call: bool) -> None:
        """One parser run on a chat completion."""
        mode = "streaming" if streaming else "non_streaming"
        self._chat[mode, "tool_call" if tool_call else "no_tool_call"].inc()


class HttpMetrics:
    """The prometheus-fastapi-instrumentator families vLLM's API server exposes."""

    # Handlers the instrumentator leaves out (regular-expression search on the route).
    EXCLUDED = ("/metrics", "/health", "/load", "/ping", "/version", "/server_info")

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "http_requests_total",
            "Total number of requests by method, status and handler.",
            ["method", "status", "handler"],
            registry=registry,
        )
        self.request_size = Summary(
            "http_request_size_bytes",
            "Content length of incoming requests by handler. Only value of header is respected. Otherwise "
            "ignored. No percentile calculated. ",
            ["handler"],
            registry=registry,
        )
        self.response_size = Summary(
            "http_response_size_bytes",
            "Content length of outgoing responses by handler. Only value of header is respected. Otherwise "
            "ignored. No percentile calculated. ",
            ["handler"],
            registry=registry,
        )
        self.duration_highr = Histogram(
            "http_request_duration_highr_seconds",
            "Latency with many buckets but no API specific labels. Made for more accurate percentile calculations. ",
            buckets=HTTP_HIGHR_BUCKETS,
            registry=registry,
        )
        self.duration = Histogram(
            "http_request_duration_seconds",
            "Latency with only few buckets by handler. Made to be only used if aggregation by handler is important. ",
            ["method", "handler"],
            buckets=(0.1, 0.5, 1),
            registry=registry,
        )

    def observe(
        self, *, method: str, handler: str, status: int, request_bytes: int, response_bytes: int, seconds: float
    ) -> None:
        """Record one finished HTTP request, unless its handler is excluded."""
        if any(excluded in handler for excluded in self.EXCLUDED):
            return
        self.requests.labels(method=method, status=f"{status // 100}xx", handler=handler).inc()
        self.request_size.labels(handler=handler).observe(request_bytes)
        self.response_size.labels(handler=handler).observe(response_bytes)
        self.duration_highr.observe(seconds)
        self.duration.labels(method=method, handler=handler).observe(seconds)
