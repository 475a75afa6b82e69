"""`vllm serve` flags, parsed and validated the way vLLM 0.33 does, into a frozen config.

The mock must start from exactly the command line a real arm gets, so it accepts vLLM's flags
(hyphens or underscores, `--flag=value`), rejects unknown ones and malformed
`--speculative-config` JSON at start-up with a clear message, and resolves the defaults vLLM
derives from the device (max_num_seqs, max_num_batched_tokens, max_model_len). Three flags are
the mock's own: `--profile`, `--time-scale` and `--admin-port`.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, NoReturn

from specpilot.mockvllm.costmodel import GIB, num_gpu_blocks
from specpilot.mockvllm.profile import Profile
from specpilot.wire.batchschedule import BatchRange, ScheduleError, VllmRelease, lookup, validate

VLLM_VERSION = "0.33.0"
DEFAULT_MODEL = "Qwen/Qwen3-0.6B"
PROG = "specpilot mock-vllm"

SPEC_METHODS = frozenset(
    {
        "ngram",
        "draft_model",
        "suffix",
        "custom_class",
        "eagle",
        "eagle3",
        "extract_hidden_states",
        "mtp",
        "dflash",
        "ngram_gpu",
        "dspark",
    }
)  # plus any "<model type>_mtp"
# Keys of vLLM's SpeculativeConfig that a user may set.
SPEC_KEYS = frozenset(
    {
        "enforce_eager",
        "num_speculative_tokens",
        "model",
        "method",
        "draft_tensor_parallel_size",
        "tensor_parallel_size",
        "quantization",
        "moe_backend",
        "attention_backend",
        "kv_cache_dtype",
        "max_model_len",
        "revision",
        "code_revision",
        "index_share_for_mtp_iteration",
        "disable_padded_drafter_batch",
        "disable_eagle_block_drop",
        "use_local_argmax_reduction",
        "use_heterogeneous_vocab",
        "prompt_lookup_max",
        "prompt_lookup_min",
        "parallel_drafting",
        "num_speculative_tokens_per_batch_size",
        "suffix_decoding_max_tree_depth",
        "suffix_decoding_max_cached_requests",
        "suffix_decoding_max_spec_factor",
        "suffix_decoding_min_token_prob",
        "draft_load_config",
        "rejection_sample_method",
        "synthetic_acceptance_rates",
        "synthetic_acceptance_length",
        "enable_adaptive_verification",
        "draft_sample_method",
        "dspark_draft_topk",
    }
)
# Methods that draft without a separate model (no draft weights or KV cache).
MODEL_FREE_METHODS = frozenset({"ngram", "ngram_gpu", "suffix"})
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


class ConfigError(ValueError):
    """A command line vLLM would refuse at start-up."""


@dataclass(frozen=True)
class SpeculativeConfig:
    """The validated `--speculative-config`."""

    method: str
    num_speculative_tokens: int
    model: str | None
    draft_tensor_parallel_size: int | None
    revision: str | None
    settings: Mapping[str, Any]
    schedule: tuple[BatchRange, ...] | None = None  # num_speculative_tokens_per_batch_size, as vLLM reads it

    @property
    def has_draft_model(self) -> bool:
        return self.method not in MODEL_FREE_METHODS


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


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ConfigError(message)


def parse_model_len(text: str) -> int:
    """`--max-model-len`: an integer, `1k` (1000), `1K` (1024), `25.6k`; -1 or `auto` give -1."""
    text = text.strip()
    if text.lower() == "auto" or text == "-1":
        return -1
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgKMG]?)", text)
    if not match:
        raise argparse.ArgumentTypeError(f"invalid model length {text!r}")
    number, suffix = match.groups()
    power = "kmg".index(suffix.lower()) + 1 if suffix else 0
    value = float(number) * (1024 if suffix.isupper() else 1000) ** power
    if value < 1 or value != int(value):
        raise argparse.ArgumentTypeError(f"invalid model length {text!r}")
    return int(value)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _float(text: str, *, zero: bool) -> float:
    """A finite number above 0 (or 0 and above, with `zero`), for argparse."""
    what = "a number of 0 or more" if zero else "a positive number"
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if math.isinf(value) or not (value >= 0 if zero else value > 0):
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return value


_positive_float = functools.partial(_float, zero=False)
_non_negative_float = functools.partial(_float, zero=True)


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc.msg} at position {exc.pos}): {text}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text}")
    return value


def _build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=PROG, description="CPU mock of `vllm serve` (vLLM 0.33 OpenAI-compatible server).", allow_abbrev=False
    )
    add = p.add_argument
    add("model_tag", nargs="?", help="model to serve (overrides --model)")
    add("--model", default=DEFAULT_MODEL)
    add("--host", default=None)
    add("--port", type=int, default=8000)
    add("--served-model-name", nargs="+", default=None)
    add("--max-model-len", type=parse_model_len, default=None)
    add("--tensor-parallel-size", "-tp", type=_positive_int, default=1)
    add("--pipeline-parallel-size", "-pp", type=_positive_int, default=1)
    add("--data-parallel-size", "-dp", type=_positive_int, default=1)
    add("--gpu-memory-utilization", "--device-memory-utilization", type=float, default=0.92)
    add("--max-num-seqs", type=_positive_int, default=None)
    add("--max-num-batched-tokens", type=_positive_int, default=None)
    add("--block-size", type=_positive_int, default=None)
    add("--enable-chunked-prefill", action=argparse.BooleanOptionalAction, default=True)
    add("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True)
    add("--performance-mode", choices=["balanced", "latency", "throughput"], default="balanced")
    add("--speculative-config", "-sc", type=_json_object, default=None)
    add("--spec-method", default=None)
    add("--spec-model", default=None)
    add("--spec-tokens", type=_positive_int, default=None)
    add("--seed", type=int, default=0)
    add("--disable-log-stats", action="store_true")
    add("--custom-histogram-buckets", type=_json_object, default=None)
    add("--kv-cache-metrics", action="store_true")
    add("--kv-cache-metrics-sample", type=float, default=0.01)
    add("--enable-mfu-metrics", action="store_true")
    add("--api-server-count", "-asc", type=_positive_int, default=None)
    add("--max-num-queued-reqs", type=_positive_int, default=None)
    add("--max-num-queued-tokens", type=_positive_int, default=None)
    add("--enable-force-include-usage", action="store_true")
    add("--api-key", default=None)
    add("--tool-call-parser", default=None)
    add("--enable-auto-tool-choice", action="store_true")
    # Accepted because deployments pass them; they change nothing the mock models.
    for flag in (
        "--revision",
        "--tokenizer",
        "--tokenizer-revision",
        "--tokenizer-mode",
        "--code-revision",
        "--dtype",
        "--quantization",
        "--kv-cache-dtype",
        "--download-dir",
        "--load-format",
        "--max-logprobs",
        "--uvicorn-log-level",
        "--generation-config",
        "--chat-template",
        "--show-hidden-metrics-for-version",
        "--distributed-executor-backend",
        "--sse-keep-alive-interval",
        "--root-path",
        "--hf-overrides",
    ):
        add(flag, default=None)
    for flag in (
        "--trust-remote-code",
        "--enforce-eager",
        "--disable-uvicorn-access-log",
        "--enable-log-requests",
        "--disable-log-requests",
        "--enable-request-id-headers",
    ):
        add(flag, action="store_true")
    mock = p.add_argument_group("mock only")
    mock.add_argument(
        "--profile",
        default=None,
        help="profile YAML, or a calibrated profile's name (else env SPECPILOT_MOCK_PROFILE)",
    )
    mock.add_argument(
        "--time-scale",
        type=_positive_float,
        default=1.0,
        help="wall seconds per model second: 0.1 runs ten times faster (default 1)",
    )
    mock.add_argument("--admin-port", type=int, default=None, help="fault-injection endpoint port (off by default)")
    mock.add_argument(
        "--model-load-seconds",
        type=_non_negative_float,
        default=0.0,
        help="model seconds spent loading weights before the server listens, as a restart costs (default 0)",
    )
    return p


def _normalise(argv: Sequence[str]) -> list[str]:
    """Accept `--max_model_len` for `--max-model-len`, as vLLM's parser does."""
    out = []
    for arg in argv:
        name, eq, value = arg.partition("=")
        out.append(name.replace("_", "-") + eq + value if arg.startswith("--") else arg)
    return out


def _speculative(args: argparse.Namespace) -> SpeculativeConfig | None:
    raw = {key.replace("-", "_"): value for key, value in (args.speculative_config or {}).items()}
    unknown = set(raw) - SPEC_KEYS
    if unknown:
        raise ConfigError(f"argument --speculative-config/-sc: unknown key(s) {', '.join(sorted(unknown))}")
    for flag, key in (("spec_method", "method"), ("spec_model", "model"), ("spec_tokens", "num_speculative_tokens")):
        value = getattr(args, flag)
        if value is not None:
            if key in raw:
                raise ConfigError(f"--{flag.replace('_', '-')} and speculative_config.{key} are mutually exclusive")
            raw[key] = value
    if not raw:
        return None
    model, method = raw.get("model"), raw.get("method")
    if model is not None and not isinstance(model, str):
        raise ConfigError(f"speculative_config.model must be a string, got {model!r}")
    if method is None:
        if model is None:
            raise ConfigError("speculative_config needs `model` or `method`")
        lowered = model.lower()
        method = "eagle3" if "eagle3" in lowered else "eagle" if "eagle" in lowered else "draft_model"
    if not isinstance(method, str) or not (method in SPEC_METHODS or method.endswith("_mtp")):
        raise ConfigError(f"speculative_config.method {method!r} is not one of {', '.join(sorted(SPEC_METHODS))}")
    if method == "draft_model" and model is None:
        raise ConfigError("speculative_config.model is required for method 'draft_model'")
    tokens = raw.get("num_speculative_tokens")
    if tokens is None:
        raise ConfigError("speculative_config.num_speculative_tokens is required")
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise ConfigError(f"speculative_config.num_speculative_tokens must be an integer > 0, got {tokens!r}")
    draft_tp = raw.get("draft_tensor_parallel_size")
    if draft_tp is not None and draft_tp not in (1, args.tensor_parallel_size):
        raise ConfigError(
            f"speculative_config.draft_tensor_parallel_size={draft_tp} cannot be other value than 1 "
            f"or target model tensor_parallel_size={args.tensor_parallel_size}"
        )
    revision = raw.get("revision")
    return SpeculativeConfig(
        method=method,
        num_speculative_tokens=tokens,
        model=model,
        draft_tensor_parallel_size=draft_tp,
        revision=None if revision is None else str(revision),
        settings={**raw, "method": method},
        schedule=_schedule(raw),
    )


def _schedule(raw: Mapping[str, Any]) -> tuple[BatchRange, ...] | None:
    """`num_speculative_tokens_per_batch_size` as vLLM 0.33 validates it (None: every step drafts k)."""
    key = VllmRelease.V0_33.schedule_key
    if raw.get(key) is None:
        return None
    try:
        return validate(raw[key], VllmRelease.V0_33)
    except ScheduleError as exc:
        raise ConfigError(str(exc)) from None


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
    argv = _normalise(argv)
    for arg in argv:
        if arg.partition("=")[0] in UNSUPPORTED_FLAGS:
            raise ConfigError(f"{arg.partition('=')[0]} is a vLLM flag the mock does not support")
    args = _build_parser().parse_args(argv)
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
        speculative=_speculative(args),
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
