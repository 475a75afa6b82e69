"""vLLM 0.33's engine Prometheus families, with the exact names, types, labels, buckets and help text.

`EngineMetrics` is what vLLM's PrometheusStatLogger registers (spec-decode counters only with a
speculative config, the KV-residency histograms only with `--kv-cache-metrics`); the API server's
own families are in `apimetrics`. Everything lives on a private registry so several mock servers
can share one process in tests. Durations are model seconds (see `engine.ModelClock`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
)

from specpilot.wire.buckets import INTER_TOKEN_LATENCY, REQUEST_LATENCY, TIME_TO_FIRST_TOKEN

ENGINE_INDEX = "0"
BUCKETS: dict[str, tuple[float, ...]] = {
    "request_latency": REQUEST_LATENCY,
    "time_to_first_token": TIME_TO_FIRST_TOKEN,
    "inter_token_latency": INTER_TOKEN_LATENCY,
    "iteration_tokens": (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384),
    "request_params_n": (1, 2, 5, 10, 20),
    "request_num_preemptions": (1, 2, 3, 4, 5, 10, 20),
    "kv_cache_residency": (
        0.001,
        0.002,
        0.005,
        0.01,
        0.02,
        0.05,
        0.1,
        0.2,
        0.5,
        1,
        2,
        5,
        10,
        20,
        30,
        60,
        120,
        300,
        600,
        1200,
        1800,
    ),
}
FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")


def request_tokens_buckets(max_model_len: int) -> tuple[float, ...]:
    """The 1-2-5 series up to and including max_model_len."""
    out: list[float] = []
    scale = 1
    while True:
        for mantissa in (1, 2, 5):
            if mantissa * scale > max_model_len:
                return tuple(out)
            out.append(mantissa * scale)
        scale *= 10


class _Families:
    """Registers one engine's families on a registry, labelled with its model name and engine index."""

    def __init__(self, registry: CollectorRegistry, labels: dict[str, str], buckets: Mapping[str, Sequence[float]]):
        self.registry = registry
        self.labels = labels
        self._buckets = buckets

    def gauge_family(self, name: str, help_: str, *extra: str) -> Gauge:
        return Gauge(name, help_, [*self.labels, *extra], registry=self.registry, multiprocess_mode="mostrecent")

    def counter_family(self, name: str, help_: str, *extra: str) -> Counter:
        return Counter(name, help_, [*self.labels, *extra], registry=self.registry)

    def gauge(self, name: str, help_: str) -> Gauge:
        return self.gauge_family(name, help_).labels(**self.labels)

    def counter(self, name: str, help_: str) -> Counter:
        return self.counter_family(name, help_).labels(**self.labels)

    def histogram(self, name: str, help_: str, family: str) -> Histogram:
        labels = list(self.labels)
        return Histogram(name, help_, labels, registry=self.registry, buckets=self._buckets[family]).labels(
            **self.labels
        )


class SchedulerGauges:
    """How full the engine is: requests running and waiting (by reason), its sleep state, KV-cache usage."""

    def __init__(self, families: _Families) -> None:
        labels = families.labels
        self.running = families.gauge("vllm:num_requests_running", "Number of requests in model execution batches.")
        self.waiting = families.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.")
        by_reason = families.gauge_family(
            "vllm:num_requests_waiting_by_reason",
            "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling "
            "capacity; 'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked "
            "status). Sum of all reasons equals vllm:num_requests_waiting.",
            "reason",
        )
        self.waiting_capacity = by_reason.labels(**labels, reason="capacity")
        by_reason.labels(**labels, reason="deferred")
        sleep = families.gauge_family(
            "vllm:engine_sleep_state",
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; "
            "weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
            "sleep_state",
        )
        for state in ("awake", "weights_offloaded", "discard_all"):
            sleep.labels(**labels, sleep_state=state).set(1 if state == "awake" else 0)
        self.kv_usage = families.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")

    def show(self, *, running: int, waiting: int, kv_usage: float) -> None:
        """Set the gauges to the engine's state; every waiting request waits for capacity."""
        self.running.set(running)
        self.waiting.set(waiting)
        self.waiting_capacity.set(waiting)
        self.kv_usage.set(kv_usage)


class CacheCounters:
    """Prefix- and multi-modal-cache lookups, requests preempted for KV-cache blocks, and (with vLLM's
    NaN checks on) corrupted requests."""

    def __init__(self, families: _Families, *, corrupted_requests: bool) -> None:
        counter = families.counter
        if corrupted_requests:
            counter(
                "vllm:corrupted_requests",
                "Corrupted requests, in terms of total number of requests with NaNs in logits.",
            )
        self.prefix_queries = counter(
            "vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens."
        )
        counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.")
        counter(
            "vllm:external_prefix_cache_queries",
            "External prefix cache queries from KV connector cross-instance cache sharing, in terms of "
            "number of queried tokens.",
        )
        counter(
            "vllm:external_prefix_cache_hits",
            "External prefix cache hits from KV connector cross-instance cache sharing, in terms of "
            "number of cached tokens.",
        )
        counter("vllm:mm_cache_queries", "Multi-modal cache queries, in terms of number of queried items.")
        counter("vllm:mm_cache_hits", "Multi-modal cache hits, in terms of number of cached items.")
        self.preemptions = counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.")


class TokenCounters:
    """Prompt tokens processed (by source, and those cached) and generation tokens."""

    def __init__(self, families: _Families) -> None:
        labels = families.labels
        self.prompt_tokens = families.counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        by_source = families.counter_family(
            "vllm:prompt_tokens_by_source", "Number of prompt tokens by source.", "source"
        )
        self.prompt_tokens_computed = by_source.labels(**labels, source="local_compute")
        for source in ("local_cache_hit", "external_kv_transfer"):
            by_source.labels(**labels, source=source)
        families.counter("vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external).")
        cached_by_source = families.counter_family(
            "vllm:prompt_tokens_cached_by_source",
            "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), host "
            "(offloaded to DRAM), disk, p2p (transferred from another vLLM instance) or external_unspecified. "
            "Counted at admission; sums to vllm:prefix_cache_hits + vllm:external_prefix_cache_hits.",
            "source",
        )
        for source in ("device", "host", "p2p", "disk", "external_unspecified"):
            cached_by_source.labels(**labels, source=source)
        self.generation_tokens = families.counter("vllm:generation_tokens", "Number of generation tokens processed.")

    def prefilled(self, prompt_tokens: int) -> None:
        """A prompt computed in full (no cache hits)."""
        self.prompt_tokens.inc(prompt_tokens)
        self.prompt_tokens_computed.inc(prompt_tokens)


class RequestOutcomes:
    """Requests finished, by reason, and refused by a queue limit, by limit."""

    def __init__(self, families: _Families) -> None:
        success = families.counter_family(
            "vllm:request_success", "Count of successfully processed requests.", "finished_reason"
        )
        self.success = {
            reason: success.labels(**families.labels, finished_reason=reason) for reason in FINISHED_REASONS
        }
        rejections = Counter(
            "vllm:admission_rejections",
            "Number of admission attempts rejected by a queue limit, by reason.",
            ["model_name", "reason"],
            registry=families.registry,
        )
        self.rejections = {
            reason: rejections.labels(model_name=families.labels["model_name"], reason=reason)
            for reason in ("max_num_queued_reqs", "max_num_queued_tokens")
        }


class RequestSizes:
    """Token counts: of each finished request (prompt, output, parameters) and of each engine step."""

    def __init__(self, families: _Families) -> None:
        histogram = families.histogram
        self.request_prompt_tokens = histogram(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.", "request_tokens"
        )
        self.request_generation_tokens = histogram(
            "vllm:request_generation_tokens", "Number of generation tokens processed.", "request_tokens"
        )
        self.iteration_tokens = histogram(
            "vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", "iteration_tokens"
        )
        self.max_generation_tokens = histogram(
            "vllm:request_max_num_generation_tokens",
            "Histogram of maximum number of requested generation tokens.",
            "request_tokens",
        )
        self.params_n = histogram("vllm:request_params_n", "Histogram of the n request parameter.", "request_params_n")
        self.params_max_tokens = histogram(
            "vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", "request_tokens"
        )
        self.prefill_kv_computed = histogram(
            "vllm:request_prefill_kv_computed_tokens",
            "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
            "request_tokens",
        )


class Latencies:
    """How long requests took, between tokens and in each phase, and how often each was preempted."""

    def __init__(self, families: _Families) -> None:
        histogram = families.histogram
        self.ttft = histogram(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", "time_to_first_token"
        )
        self.itl = histogram(
            "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", "inter_token_latency"
        )
        self.tpot = histogram(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            "inter_token_latency",
        )
        self.e2e = histogram(
            "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", "request_latency"
        )
        self.queue_time = histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            "request_latency",
        )
        self.inference_time = histogram(
            "vllm:request_inference_time_seconds",
            "Histogram of time spent in RUNNING phase for request.",
            "request_latency",
        )
        self.prefill_time = histogram(
            "vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.",
            "request_latency",
        )
        self.decode_time = histogram(
            "vllm:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.",
            "request_latency",
        )
        self.request_preemptions = histogram(
            "vllm:request_num_preemptions",
            "Histogram of the number of times a request was preempted.",
            "request_num_preemptions",
        )


class KvResidency:
    """KV-cache block lifetimes, sampled (`--kv-cache-metrics`); the idle and reuse-gap families stay empty."""

    def __init__(self, families: _Families) -> None:
        sampled = "Sampled metrics (controlled by --kv-cache-metrics-sample)."
        self.block_lifetime = families.histogram(
            "vllm:kv_block_lifetime_seconds",
            f"Histogram of KV cache block lifetime from allocation to eviction. {sampled}",
            "kv_cache_residency",
        )
        families.histogram(
            "vllm:kv_block_idle_before_evict_seconds",
            f"Histogram of idle time before KV cache block eviction. {sampled}",
            "kv_cache_residency",
        )
        families.histogram(
            "vllm:kv_block_reuse_gap_seconds",
            "Histogram of time gaps between consecutive KV cache block accesses. Only the most recent "
            f"accesses are recorded (ring buffer). {sampled}",
            "kv_cache_residency",
        )


class WorkCounters:
    """The work estimated for Model FLOPs Utilization, per GPU: operations, bytes read and written."""

    def __init__(self, families: _Families) -> None:
        mfu = "per GPU (for Model Flops Utilization calculations)."
        self.flops = families.counter(
            "vllm:estimated_flops_per_gpu_total", f"Estimated number of floating point operations {mfu}"
        )
        self.read_bytes = families.counter(
            "vllm:estimated_read_bytes_per_gpu_total", f"Estimated number of bytes read from memory {mfu}"
        )
        self.write_bytes = families.counter(
            "vllm:estimated_write_bytes_per_gpu_total", f"Estimated number of bytes written to memory {mfu}"
        )

    def add(self, work: tuple[float, float, float]) -> None:
        """Count a step's operations, bytes read and bytes written."""
        flops, read_bytes, write_bytes = work
        self.flops.inc(flops)
        self.read_bytes.inc(read_bytes)
        self.write_bytes.inc(write_bytes)


class SpecDecodeCounters:
    """Speculative rounds (drafts), draft tokens proposed, and those accepted, in all and per draft position."""

    def __init__(self, families: _Families, num_speculative_tokens: int) -> None:
        self.drafts = families.counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.")
        self.draft_tokens = families.counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.")
        self.accepted = families.counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.")
        per_pos = families.counter_family(
            "vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft position.", "position"
        )
        self.accepted_per_pos = [
            per_pos.labels(**families.labels, position=str(i)) for i in range(num_speculative_tokens)
        ]

    def record(self, rounds_by_accepted: Sequence[int]) -> None:
        """Count a step's rounds, given how many accepted 0 .. k drafts (k: the step's draft tokens, up to
        num_speculative_tokens); a round that accepted a drafts counts once at positions 0 .. a-1."""
        drafts = sum(rounds_by_accepted)
        if not drafts:
            return
        k = len(rounds_by_accepted) - 1
        self.drafts.inc(drafts)
        self.draft_tokens.inc(drafts * k)
        self.accepted.inc(sum(accepted * rounds for accepted, rounds in enumerate(rounds_by_accepted)))
        reached = 0
        for position in range(k, 0, -1):
            reached += rounds_by_accepted[position]
            if reached:
                self.accepted_per_pos[position - 1].inc(reached)


class EngineMetrics:
    """The engine families of one engine, grouped by what they measure, registered in vLLM's order; the
    engine loop records into them as it steps."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        model_name: str,
        max_model_len: int,
        num_speculative_tokens: int,
        cache_info: Mapping[str, str],
        custom_buckets: Mapping[str, Sequence[float]],
        kv_cache_metrics: bool,
        corrupted_requests: bool,
    ) -> None:
        buckets = {**BUCKETS, "request_tokens": request_tokens_buckets(max_model_len), **custom_buckets}
        families = _Families(registry, {"model_name": model_name, "engine": ENGINE_INDEX}, buckets)
        self.scheduler = SchedulerGauges(families)
        self.cache = CacheCounters(families, corrupted_requests=corrupted_requests)
        self.tokens = TokenCounters(families)
        self.outcomes = RequestOutcomes(families)
        self.sizes = RequestSizes(families)
        self.latencies = Latencies(families)
        self.residency = KvResidency(families) if kv_cache_metrics else None
        info = Gauge(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            [*cache_info, "engine"],
            registry=registry,
            multiprocess_mode="mostrecent",
        )
        info.labels(**cache_info, engine=ENGINE_INDEX).set(1)
        self.work = WorkCounters(families)
        self.spec = SpecDecodeCounters(families, num_speculative_tokens) if num_speculative_tokens else None
