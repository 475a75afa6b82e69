"""The `/metrics` exposition against the vLLM 0.33 reference (tests/data/vllm-0.33-metrics.json).

Every family the mock exposes must exist in vLLM 0.33 with the same type, help text, labels
and buckets; every family vLLM registers unconditionally must be there; conditional families
appear exactly when their condition holds.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from specpilot.mockvllm.config import parse_args
from specpilot.mockvllm.metrics import request_tokens_buckets
from specpilot.mockvllm.profile import Profile
from specpilot.mockvllm.server import MockServer

REFERENCE = json.loads((Path(__file__).parents[2] / "data" / "vllm-0.33-metrics.json").read_text())
FAMILIES: dict[str, dict[str, Any]] = {f["name"]: f for f in REFERENCE["families"]}
SPEC_DECODE = {n for n in FAMILIES if n.startswith("vllm:spec_decode_")}
KV_RESIDENCY = {n for n in FAMILIES if n.startswith("vllm:kv_block_")}
TOOL_PARSER = {"vllm:tool_call_parser_invocations_total"}
# Registered only under conditions the mock never meets (KV transfer, watermarking, LoRA,
# NaN checks, diffusion models, dev-mode routes, realtime speech).
NEVER = {
    "vllm:num_requests_kv_fetch_by_stage",
    "vllm:watermark_requests",
    "vllm:lora_requests_info",
    "vllm:corrupted_requests",
    "vllm:diffusion_num_denoising_steps",
    "vllm:diffusion_num_canvas_positions",
    "vllm:diffusion_num_committed_tokens",
    "vllm:sleep_mode_operation_duration_seconds",
    "vllm:sleep_mode_operations_in_flight",
    "vllm:rl_weight_update_operation_duration_seconds",
    "vllm:rl_weight_update_operations_in_flight",
    "vllm:websocket_connections_active",
    "vllm:websocket_connections_total",
    "vllm:websocket_connection_duration_seconds",
}


def reference_name(family: str, kind: str) -> str:
    """The reference lists counters by their registered name, which may end in _total."""
    return family + "_total" if kind == "counter" and family + "_total" in FAMILIES else family


def exposition(*flags: str) -> dict[str, Any]:
    """Families by reference name; the `_created` gauges that shadow counters and histograms are left out."""
    server = MockServer(parse_args(["org/target", *flags]), Profile(), env={})
    parsed = {f.name: f for f in text_string_to_metric_families(generate_latest(server.registry).decode())}
    return {
        reference_name(name, family.type): family
        for name, family in parsed.items()
        if not (name.endswith("_created") and name.removesuffix("_created") in parsed)
    }


def expected_bounds(reference: dict[str, Any], max_model_len: int = 4096) -> list[float]:
    buckets = reference["buckets"]
    if buckets is None:
        buckets = list(request_tokens_buckets(max_model_len))
    return [float(b) for b in buckets] + [math.inf]


SPEC = '{"method": "draft_model", "model": "org/draft", "num_speculative_tokens": 3}'


@pytest.mark.parametrize(
    "flags",
    [(), ("-sc", SPEC), ("--kv-cache-metrics",), ("--tool-call-parser", "hermes")],
    ids=["ordinary", "spec", "kv", "tool-parser"],
)
def test_every_exposed_family_is_vllms_own(flags: tuple[str, ...]) -> None:
    for name, family in exposition(*flags).items():
        reference = FAMILIES.get(name)
        assert reference is not None, f"{name} is not a vLLM 0.33 family"
        assert family.type == reference["type"], name
        assert family.documentation == reference["help"].strip(), name  # the parser strips; see below
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            labels = set(sample.labels) - {"le", "quantile"}
            assert labels == set(reference["labels"]), f"{sample.name}: {labels}"
        if reference["type"] == "histogram":
            series = {tuple(sorted((k, v) for k, v in s.labels.items() if k != "le")) for s in family.samples}
            for key in series:
                bounds = [
                    s.labels["le"]
                    for s in family.samples
                    if s.name.endswith("_bucket")
                    and tuple(sorted((k, v) for k, v in s.labels.items() if k != "le")) == key
                ]
                assert [float(b) for b in bounds] == expected_bounds(reference), name


def test_help_lines_match_byte_for_byte() -> None:
    server = MockServer(parse_args(["org/target", "-sc", SPEC]), Profile(), env={})
    for line in generate_latest(server.registry).decode().splitlines():
        if not line.startswith("# HELP "):
            continue
        name, text = line.removeprefix("# HELP ").split(" ", 1)
        if name.endswith("_created"):
            continue
        reference = FAMILIES.get(name) or FAMILIES[name.removesuffix("_total")]
        assert text == reference["help"], name


def test_unconditional_families_are_all_there_and_conditional_ones_absent() -> None:
    exposed = set(exposition())
    conditional = SPEC_DECODE | KV_RESIDENCY | TOOL_PARSER | NEVER
    assert exposed == set(FAMILIES) - conditional


def test_speculation_adds_exactly_the_spec_decode_counters_with_one_position_per_draft_token() -> None:
    exposed = exposition("-sc", SPEC)
    assert set(exposed) - set(exposition()) == SPEC_DECODE
    positions = {
        s.labels["position"]
        for s in exposed["vllm:spec_decode_num_accepted_tokens_per_pos"].samples
        if s.name.endswith("_total")
    }
    assert positions == {"0", "1", "2"}


def test_kv_cache_metrics_add_the_residency_histograms() -> None:
    assert set(exposition("--kv-cache-metrics")) - set(exposition()) == KV_RESIDENCY


def test_a_tool_call_parser_adds_its_counter_with_every_series_precreated_even_without_log_stats() -> None:
    exposed = exposition("--tool-call-parser", "hermes", "--disable-log-stats")
    assert {name for name in exposed if name.startswith("vllm:")} == TOOL_PARSER
    series = {
        (s.labels["mode"], s.labels["outcome"], s.labels["request_type"])
        for s in exposed["vllm:tool_call_parser_invocations_total"].samples
        if s.name.endswith("_total")
    }
    assert len(series) == 12 and ("streaming", "tool_call", "chat_completions") in series


def test_disable_log_stats_leaves_only_http_and_process_families() -> None:
    assert not [name for name in exposition("--disable-log-stats") if name.startswith("vllm:")]


def test_series_exist_before_traffic_with_vllms_labels() -> None:
    exposed = exposition("--served-model-name", "target")
    running = exposed["vllm:num_requests_running"].samples[0]
    assert running.labels == {"model_name": "target", "engine": "0"} and running.value == 0
    reasons = {
        s.labels["finished_reason"] for s in exposed["vllm:request_success"].samples if s.name.endswith("_total")
    }
    assert reasons == {"stop", "length", "abort", "error", "repetition"}
    awake = {s.labels["sleep_state"]: s.value for s in exposed["vllm:engine_sleep_state"].samples}
    assert awake == {"awake": 1.0, "weights_offloaded": 0.0, "discard_all": 0.0}
    rejections = exposed["vllm:admission_rejections"].samples[0]
    assert set(rejections.labels) == {"model_name", "reason"}


def test_cache_config_info_reports_the_kv_cache() -> None:
    info = exposition()["vllm:cache_config_info"].samples[0]
    assert info.value == 1
    assert info.labels["block_size"] == "16" and info.labels["gpu_memory_utilization"] == "0.92"
    assert int(info.labels["num_gpu_blocks"]) > 0


def test_request_token_buckets_follow_max_model_len() -> None:
    assert request_tokens_buckets(4096)[-1] == 2000
    assert request_tokens_buckets(32768)[-1] == 20000
    assert list(request_tokens_buckets(8192)) == REFERENCE["request_tokens_bucket_examples"]["8192"]
