"""vLLM's metric and label names are not ours: every sample the mock serves on /metrics must carry a
name and label names of vLLM 0.33 exactly as tests/data/vllm-0.33-metrics.json has them, and that file
must be the reference unchanged, so that no project-wide rename can reach both and pass.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

FIXTURE = Path(__file__).parents[2] / "data" / "vllm-0.33-metrics.json"
# The reference as taken from vLLM 0.33's source: replaced only by copying a newer reference, never edited.
FIXTURE_SHA256 = "783c3ecaeeb29a1e766effe28461e69ee554fc06cb11d04ddb326957ca69bf7f"
REFERENCE: list[dict[str, Any]] = json.loads(FIXTURE.read_text())["families"]
# Families the mock serves that vLLM does not (by the name /metrics declares), each with its reason.
MOCK_OWN: dict[str, str] = {}
# Every optional family the mock can serve: speculation, KV residency, the tool-call parser, MFU
# estimates, and the NaN check that registers vllm:corrupted_requests.
EVERYTHING = (
    *("--speculative-config", '{"model": "org/draft", "num_speculative_tokens": 3}'),
    *("--kv-cache-metrics", "--enable-mfu-metrics", "--tool-call-parser", "hermes", "--enable-auto-tool-choice"),
    *("--time-scale", "0.01"),
)
NAN_CHECK = {"VLLM_COMPUTE_NANS_IN_LOGITS": "1"}


def _by_sample() -> dict[str, dict[str, Any]]:
    """Reference family by exposed sample name, with the `_created` series prometheus_client adds to
    counters, histograms and summaries in a single process (the reference's exposition notes)."""
    out = {sample: family for family in REFERENCE for sample in family["exposed_samples"]}
    for family in REFERENCE:
        if family["type"] in ("counter", "histogram", "summary"):
            base = family["name"].removesuffix("_total") if family["type"] == "counter" else family["name"]
            out[base + "_created"] = family
    return out


BY_SAMPLE = _by_sample()


def strangers(exposition: str) -> list[str]:
    """Each sample whose name or label names are not vLLM 0.33's, unless its family is the mock's own."""
    problems = []
    for family in text_string_to_metric_families(exposition):
        if family.name in MOCK_OWN:
            continue
        for sample in family.samples:
            reference = BY_SAMPLE.get(sample.name)
            if reference is None:
                problems.append(f"{sample.name}: not a vLLM 0.33 sample")
                continue
            expected = set(reference["labels"]) | ({"le"} if sample.name.endswith("_bucket") else set())
            if set(sample.labels) != expected:
                problems.append(f"{sample.name}: labels {sorted(sample.labels)}, vLLM has {sorted(expected)}")
    return problems


async def served(mock_vllm: Any) -> str:
    """/metrics of a mock with every optional family, after a request so the HTTP families have series."""
    mock = await mock_vllm(*EVERYTHING, env=NAN_CHECK)
    async with aiohttp.ClientSession() as session:
        body = {"prompt": "names", "max_tokens": 4, "temperature": 0}
        async with session.post(mock.url + "/v1/completions", json=body) as response:
            assert response.status == 200
        async with session.get(mock.url + "/metrics") as response:
            assert response.status == 200
            return await response.text()


def test_the_fixture_is_the_reference_unchanged() -> None:
    assert hashlib.sha256(FIXTURE.read_bytes()).hexdigest() == FIXTURE_SHA256


async def test_every_sample_on_metrics_has_vllms_name_and_label_names(mock_vllm: Any) -> None:
    exposition = await served(mock_vllm)
    optional = ("vllm:corrupted_requests_total", "vllm:kv_block_lifetime_seconds_count", "http_requests_total")
    assert all(name + "{" in exposition for name in optional)
    assert strangers(exposition) == []


async def test_a_renamed_label_is_named_and_so_is_a_family_of_the_mocks_own_until_listed(
    mock_vllm: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    exposition = await served(mock_vllm)
    renamed = exposition.replace("kv_cache_max_concurrency=", "kv_cache_max_load=")
    extended = renamed + '# TYPE mock_extra gauge\nmock_extra{engine="0"} 1.0\n'
    label, unknown = strangers(extended)
    assert label.startswith("vllm:cache_config_info: labels ") and "'kv_cache_max_load'" in label
    assert unknown == "mock_extra: not a vLLM 0.33 sample"
    monkeypatch.setitem(MOCK_OWN, "mock_extra", "a figure of the mock's own")
    assert strangers(extended) == [label]
