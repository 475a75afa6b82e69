"""`vllm serve` flag parsing: accepted forms, start-up errors, and device-derived defaults."""

from __future__ import annotations

import json

import pytest

from specpilot.mockvllm.cmdline import DEFAULT_MODEL, ConfigError, parse_model_len
from specpilot.mockvllm.config import parse_args, resolve_limits
from specpilot.mockvllm.costmodel import MemoryParams
from specpilot.mockvllm.profile import ModelParams, Profile


def test_defaults_follow_vllm() -> None:
    config = parse_args([])
    assert config.model == DEFAULT_MODEL
    assert config.port == 8000
    assert config.host is None
    assert config.gpu_memory_utilization == 0.92
    assert config.seed == 0
    assert config.speculative is None
    assert config.time_scale == 1.0
    assert config.admin_port is None


def test_the_positional_model_and_served_names_set_the_model_name_label() -> None:
    assert parse_args(["org/target-8b"]).model_name == "org/target-8b"
    config = parse_args(["org/target-8b", "--served-model-name", "target", "alias"])
    assert config.served_model_names == ("target", "alias")
    assert config.model_name == "target"


def test_underscores_and_equals_are_accepted_like_vllm() -> None:
    config = parse_args(["m", "--max_model_len=2k", "--max-num-seqs", "64", "-tp", "2"])
    assert config.max_model_len == 2000
    assert config.max_num_seqs == 64
    assert config.tensor_parallel_size == 2


@pytest.mark.parametrize(
    ("text", "value"), [("4096", 4096), ("1k", 1000), ("1K", 1024), ("25.6k", 25600), ("auto", -1), ("-1", -1)]
)
def test_model_length_forms(text: str, value: int) -> None:
    assert parse_model_len(text) == value


@pytest.mark.parametrize("argv", [["--max-model-len", "lots"], ["--max-model-len", "0.5"], ["--max-num-seqs", "0"]])
def test_bad_numbers_are_start_up_errors(argv: list[str]) -> None:
    with pytest.raises(ConfigError):
        parse_args(argv)


def test_an_unknown_flag_is_a_start_up_error() -> None:
    with pytest.raises(ConfigError, match="unrecognized arguments: --no-such-flag"):
        parse_args(["m", "--no-such-flag"])


def test_abbreviated_flags_are_not_guessed() -> None:
    with pytest.raises(ConfigError, match="unrecognized arguments: --max-model"):
        parse_args(["m", "--max-model", "2048"])


def test_real_vllm_features_the_mock_does_not_model_are_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="--enable-lora is a vLLM flag the mock does not support"):
        parse_args(["m", "--enable-lora"])


def test_tool_calling_flags_need_a_parser_for_auto_tool_choice() -> None:
    config = parse_args(["m", "--enable-auto-tool-choice", "--tool-call-parser", "hermes"])
    assert (config.tool_call_parser, config.enable_auto_tool_choice) == ("hermes", True)
    assert parse_args(["m"]).tool_call_parser is None
    with pytest.raises(ConfigError, match="--enable-auto-tool-choice requires --tool-call-parser"):
        parse_args(["m", "--enable-auto-tool-choice"])


def test_a_speculative_config_turns_speculation_on() -> None:
    spec_json = json.dumps({"method": "draft_model", "model": "org/draft-1b", "num_speculative_tokens": 4})
    spec = parse_args(["m", "--speculative-config", spec_json]).speculative
    assert spec is not None
    assert (spec.method, spec.model, spec.num_speculative_tokens) == ("draft_model", "org/draft-1b", 4)
    assert spec.has_draft_model


def test_hyphenated_speculative_keys_are_accepted() -> None:
    spec = parse_args(["m", "-sc", '{"model": "d", "num-speculative-tokens": 3, "draft-tensor-parallel-size": 1}'])
    assert spec.speculative is not None and spec.speculative.num_speculative_tokens == 3


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('{"model": "d", "num_speculative_tokens": 4', "not valid JSON"),
        ('["d", 4]', "expected a JSON object"),
        ('{"model": "d", "num_speculative_tokens": 4, "speculate_harder": true}', "unknown key.*speculate_harder"),
        ('{"model": "d"}', "num_speculative_tokens is required"),
        ('{"model": "d", "num_speculative_tokens": 0}', "must be an integer > 0"),
        ('{"method": "telepathy", "num_speculative_tokens": 2}', "method 'telepathy' is not one of"),
        ('{"num_speculative_tokens": 2}', "needs `model` or `method`"),
        ('{"method": "draft_model", "num_speculative_tokens": 2}', "model is required"),
        ('{"model": "d", "num_speculative_tokens": 2, "draft_tensor_parallel_size": 3}', "cannot be other value"),
    ],
    ids=[
        "truncated",
        "not-object",
        "unknown-key",
        "no-k",
        "zero-k",
        "bad-method",
        "no-model",
        "draft-no-model",
        "draft-tp",
    ],
)
def test_malformed_speculative_configs_are_start_up_errors(value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_args(["m", "--speculative-config", value])


@pytest.mark.parametrize(
    ("model", "method"), [("org/eagle3-head", "eagle3"), ("org/EAGLE-llama", "eagle"), ("org/small", "draft_model")]
)
def test_the_method_is_detected_from_the_draft_model(model: str, method: str) -> None:
    spec = parse_args(["m", "-sc", json.dumps({"model": model, "num_speculative_tokens": 2})]).speculative
    assert spec is not None and spec.method == method


def test_ngram_needs_no_draft_model() -> None:
    spec = parse_args(["m", "-sc", '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}'])
    assert spec.speculative is not None and not spec.speculative.has_draft_model


def test_spec_shorthands_fill_the_config_and_conflict_with_it() -> None:
    spec = parse_args(["m", "--spec-model", "d", "--spec-tokens", "5"]).speculative
    assert spec is not None and spec.num_speculative_tokens == 5
    with pytest.raises(ConfigError, match="mutually exclusive"):
        parse_args(["m", "--spec-tokens", "5", "-sc", '{"model": "d", "num_speculative_tokens": 4}'])


def test_custom_histogram_buckets_are_validated() -> None:
    config = parse_args(["m", "--custom-histogram-buckets", '{"time_to_first_token": [0.1, 1, 10]}'])
    assert config.custom_histogram_buckets == {"time_to_first_token": (0.1, 1.0, 10.0)}
    with pytest.raises(ConfigError, match="unknown family"):
        parse_args(["m", "--custom-histogram-buckets", '{"ttft": [1]}'])
    with pytest.raises(ConfigError, match="strictly increasing"):
        parse_args(["m", "--custom-histogram-buckets", '{"request_latency": [1, 1]}'])


def test_limits_resolve_from_the_device_like_vllm() -> None:
    limits = resolve_limits(parse_args(["m"]), Profile())  # an 80 GiB device
    assert (limits.max_num_seqs, limits.max_num_batched_tokens, limits.max_model_len) == (1024, 8192, 4096)
    small = Profile(memory=MemoryParams(gpu_memory_gib=24, weights_gib=8))
    assert resolve_limits(parse_args(["m"]), small).max_num_seqs == 256
    throughput = resolve_limits(parse_args(["m", "--performance-mode", "throughput"]), small)
    assert (throughput.max_num_seqs, throughput.max_num_batched_tokens) == (512, 4096)
    assert resolve_limits(parse_args(["m", "--max-num-seqs", "8"]), Profile()).max_num_seqs == 8


def test_speculation_leaves_fewer_kv_blocks() -> None:
    ordinary = resolve_limits(parse_args(["m"]), Profile())
    speculative = resolve_limits(parse_args(["m", "--spec-model", "d", "--spec-tokens", "4"]), Profile())
    assert speculative.num_gpu_blocks < ordinary.num_gpu_blocks
    assert speculative.num_speculative_tokens == 4 and ordinary.num_speculative_tokens == 0


def test_a_context_that_does_not_fit_in_the_kv_cache_is_refused() -> None:
    tight = Profile(memory=MemoryParams(num_gpu_blocks=100, block_size=16))
    with pytest.raises(ConfigError, match=r"max seq len \(4096\).*estimated maximum model length is 1584"):
        resolve_limits(parse_args(["m"]), tight)
    assert resolve_limits(parse_args(["m", "--max-model-len", "auto"]), tight).max_model_len == 1584


def test_a_context_longer_than_the_model_is_refused() -> None:
    with pytest.raises(ConfigError, match="greater than the derived max_model_len"):
        resolve_limits(parse_args(["m", "--max-model-len", "8k"]), Profile(model=ModelParams(max_model_len=4096)))
