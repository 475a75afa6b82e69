"""`--speculative-config` (and the `--spec-*` shorthands), validated the way vLLM 0.33 does."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specpilot.mockvllm.cmdline import ConfigError
from specpilot.wire.batchschedule import BatchRange, ScheduleError, VllmRelease, validate

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


def parse_speculative(args: argparse.Namespace) -> SpeculativeConfig | None:
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
