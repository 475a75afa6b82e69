"""`vllm serve` flags, parsed and validated the way vLLM 0.33 does, into a frozen config.

The mock must start from exactly the command line a real arm gets, so it accepts vLLM's flags
(hyphens or underscores, `--flag=value`), rejects unknown ones and malformed
`--speculative-config` JSON at start-up with a clear message, and resolves the defaults vLLM
derives from the device (max_num_seqs, max_num_batched_tokens, max_model_len). Three flags are
the mock's own: `--profile`, `--time-scale` and `--admin-port`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from specpilot.mockvllm.cmdline import ConfigError, build_parser, normalise
from specpilot.mockvllm.costmodel import GIB, num_gpu_blocks
from specpilot.mockvllm.profile import Profile
from specpilot.mockvllm.speculative import SpeculativeConfig, parse_speculative
from specpilot.wire.batchschedule import ScheduleError, lookup

VLLM_VERSION = "0.33.0"

BUCKET_FAMILIES = frozenset(
    {
        "request_latency",
        "time_to_first_token",
        "inter_token_latency",
        "iteration_tokens",
        "request_params_n",
        "request_num_preemptions",
        "kv_cache_residency",
        "request_tokens",
    }
)
# Real vLLM flags whose features the mock does not model: refused rather than silently ignored.
UNSUPPORTED_FLAGS = frozenset(
    {
        "--enable-lora",
        "--kv-transfer-config",
        "--ec-transfer-config",
        "--watermark-config",
    }
)


@dataclass(frozen=True)
class ServeConfig:
    """The `vllm serve` command line the mock was started with (None: vLLM resolves it later)."""

    model: str
    served_model_names: tuple[str, ...]
    host: str | None
    port: int
    max_model_len: int | None
    tensor_parallel_size: int
    gpu_memory_utilization: float
    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    block_size: int | None
    enable_chunked_prefill: bool
    enable_prefix_caching: bool
    performance_mode: str
    speculative: SpeculativeConfig | None
    seed: int
    disable_log_stats: bool
    custom_histogram_buckets: Mapping[str, tuple[float, ...]]
    kv_cache_metrics: bool
    kv_cache_metrics_sample: float
    enable_mfu_metrics: bool
    max_num_queued_reqs: int | None
    max_num_queued_tokens: int | None
    enable_force_include_usage: bool
    api_key: str | None
    profile: str | None
    time_scale: float
    admin_port: int | None
    model_load_seconds: float = 0.0  # model seconds before the server listens, as loading weights takes
    tool_call_parser: str | None = None  # any name: the mock reads back the tool calls it writes itself
    enable_auto_tool_choice: bool = False

    @property
    def served_names(self) -> tuple[str, ...]:
        """The names requests may use: the served model names, else the model argument."""
        return self.served_model_names or (self.model,)

    @property
    def model_name(self) -> str:
        """The first served name: what responses report and the `model_name` label."""
        return self.served_names[0]


def _buckets(raw: Mapping[str, Any] | None) -> dict[str, tuple[float, ...]]:
    out: dict[str, tuple[float, ...]] = {}
    for family, bounds in (raw or {}).items():
        if family not in BUCKET_FAMILIES:
            raise ConfigError(
                f"--custom-histogram-buckets: unknown family {family!r}; known: {', '.join(sorted(BUCKET_FAMILIES))}"
            )
        ok = (
            isinstance(bounds, list)
            and bounds
            and all(isinstance(b, int | float) and not isinstance(b, bool) and 0 < b < math.inf for b in bounds)
        )
        if not ok or any(a >= b for a, b in itertools.pairwise(bounds)):
            raise ConfigError(
                f"--custom-histogram-buckets: {family!r} bounds must be positive, finite and strictly increasing"
            )
        out[family] = tuple(float(b) for b in bounds)
    return out


def parse_args(argv: Sequence[str]) -> ServeConfig:
    """Parse a `vllm serve` command line; raise ConfigError where vLLM would refuse to start."""
    argv = normalise(argv)
    for arg in argv:
        if arg.partition("=")[0] in UNSUPPORTED_FLAGS:
            raise ConfigError(f"{arg.partition('=')[0]} is a vLLM flag the mock does not support")
    args = build_parser().parse_args(argv)
    if not 0 < args.gpu_memory_utilization <= 1:
        raise ConfigError(f"--gpu-memory-utilization must be in (0, 1], got {args.gpu_memory_utilization}")
    if args.data_parallel_size > 1 or (args.api_server_count or 1) > 1:
        raise ConfigError(
            "the mock runs one engine and one API server: data parallelism and --api-server-count > 1 are not supported"
        )
    if args.enable_auto_tool_choice and not args.tool_call_parser:
        raise ConfigError("--enable-auto-tool-choice requires --tool-call-parser")
    if not 0 <= args.kv_cache_metrics_sample <= 1:
        raise ConfigError(f"--kv-cache-metrics-sample must be in [0, 1], got {args.kv_cache_metrics_sample}")
    return ServeConfig(
        model=args.model_tag or args.model,
        served_model_names=tuple(args.served_model_name or ()),
        host=args.host,
        port=args.port,
        max_model_len=args.max_model_len,
        tensor_parallel_size=args.tensor_parallel_size,
        gpu_memory_utilization=args.gpu_memory_utilization,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        block_size=args.block_size,
        enable_chunked_prefill=args.enable_chunked_prefill,
        enable_prefix_caching=args.enable_prefix_caching,
        performance_mode=args.performance_mode,
        speculative=parse_speculative(args),
        seed=args.seed,
        disable_log_stats=args.disable_log_stats,
        custom_histogram_buckets=_buckets(args.custom_histogram_buckets),
        kv_cache_metrics=args.kv_cache_metrics,
        kv_cache_metrics_sample=args.kv_cache_metrics_sample,
        enable_mfu_metrics=args.enable_mfu_metrics,
        max_num_queued_reqs=args.max_num_queued_reqs,
        max_num_queued_tokens=args.max_num_queued_tokens,
        enable_force_include_usage=args.enable_force_include_usage,
        api_key=args.api_key,
        profile=args.profile,
        time_scale=args.time_scale,
        admin_port=args.admin_port,
        model_load_seconds=args.model_load_seconds,
        tool_call_parser=args.tool_call_parser,
        enable_auto_tool_choice=args.enable_auto_tool_choice,
    )


@dataclass(frozen=True)
class EngineLimits:
    """What the engine resolves at start-up from the flags and the (pretend) device."""

    num_gpu_blocks: int
    block_size: int
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    num_speculative_tokens: int
    # The draft tokens a step proposes by its batch (index: sequences scheduled), from a batch-size
    # schedule; None: every step proposes num_speculative_tokens.
    draft_tokens_by_batch: tuple[int, ...] | None = None


def resolve_limits(config: ServeConfig, profile: Profile) -> EngineLimits:
    """Resolve vLLM's device-derived defaults and check that one full-length request fits."""
    memory = replace(profile.memory, block_size=config.block_size or profile.memory.block_size)
    spec = config.speculative
    block_size = memory.block_size
    blocks = num_gpu_blocks(
        memory,
        tensor_parallel_size=config.tensor_parallel_size,
        utilization=config.gpu_memory_utilization,
        draft_model=spec is not None and spec.has_draft_model,
    )
    if blocks <= 1:
        raise ConfigError(
            "No available memory for the cache blocks. Try increasing "
            "`gpu_memory_utilization` when initializing the engine."
        )
    capacity = (blocks - 1) * block_size
    native = profile.model.max_model_len
    max_model_len = config.max_model_len or native
    if max_model_len == -1:
        max_model_len = min(native, capacity)
    if max_model_len > native:
        raise ConfigError(
            f"User-specified max_model_len ({max_model_len}) is greater than the derived "
            f"max_model_len (max_position_embeddings={native} in model's config.json)."
        )
    if max_model_len > capacity:
        per_token = memory.kv_bytes_per_token + (
            memory.draft_kv_bytes_per_token if spec is not None and spec.has_draft_model else 0
        )
        raise ConfigError(
            f"To serve at least one request with the models's max seq len ({max_model_len}), "
            f"({max_model_len * per_token / GIB:.2f} GiB KV cache is needed, which is larger than the "
            f"available KV cache memory ({capacity * per_token / GIB:.2f} GiB). Based on the available "
            f"memory, the estimated maximum model length is {capacity}. Try increasing "
            "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
        )
    big = memory.gpu_memory_gib >= 70
    boost = 2 if config.performance_mode == "throughput" else 1
    max_num_seqs = config.max_num_seqs or (1024 if big else 256) * boost
    batched = (
        config.max_num_batched_tokens or (16384 if memory.gpu_memory_gib >= 160 else 8192 if big else 2048) * boost
    )
    if not config.enable_chunked_prefill:
        batched = max(batched, max_model_len)
    by_batch = None
    if spec is not None and spec.schedule is not None:
        try:
            by_batch = lookup(spec.schedule, max_num_seqs, spec.num_speculative_tokens)
        except ScheduleError as exc:
            raise ConfigError(str(exc)) from None
    return EngineLimits(
        num_gpu_blocks=blocks,
        block_size=block_size,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=min(batched, max_num_seqs * max_model_len),
        num_speculative_tokens=spec.num_speculative_tokens if spec is not None else 0,
        draft_tokens_by_batch=by_batch,
    )
