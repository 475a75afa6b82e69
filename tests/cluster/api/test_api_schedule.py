"""The draft's schedule at the API server: one vLLM reads is accepted and stored as written, under either
vLLM release, and `kubectl explain` says what it is. What the server refuses is in the invalid corpus
(`invalid/schedule-*.yaml`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.cluster.local import Cluster

from specpilot.api import validate
from specpilot.testing.waiting import wait_until

pytestmark = pytest.mark.cluster

MINIMAL = Path(__file__).resolve().parents[3] / "manifests" / "examples" / "minimal.yaml"
# Drafting up to 8 sequences, fewer tokens up to 32, none from 64 on; 33 to 63 carry the 2 before them.
SCHEDULE = [
    {"start": 1, "end": 8, "numSpeculativeTokens": 3},
    {"start": 9, "end": 32, "numSpeculativeTokens": 2},
    {"start": 64, "end": 64, "numSpeculativeTokens": 0},
]


@pytest.mark.parametrize("release", [None, "0.33", "main"], ids=["default", "0.33", "main"])
def test_a_schedule_vllm_reads_is_accepted_as_written(
    api: Cluster, dry_run_namespace: str, release: str | None
) -> None:
    manifest: dict[str, Any] = yaml.safe_load(MINIMAL.read_text())
    manifest["spec"]["speculative"]["draft"]["schedule"] = SCHEDULE
    if release is not None:
        manifest["spec"]["engine"]["vllmVersion"] = release
    applied = api.kubectl(
        "apply", "--dry-run=server", "--validate=strict", "-n", dry_run_namespace, "-f", "-", "-o", "json",
        input=json.dumps(manifest),
    )  # fmt: skip
    stored: dict[str, Any] = json.loads(applied.stdout)
    assert stored["spec"]["speculative"]["draft"]["schedule"] == SCHEDULE
    assert stored["spec"]["engine"]["vllmVersion"] == (release or "0.33")
    assert validate(stored) == []


def test_explain_documents_the_schedule(api: Cluster) -> None:
    def explained() -> str | None:
        result = api.kubectl("explain", "speculationpilot.spec.speculative.draft.schedule", check=False)
        return " ".join(result.stdout.split()) if result.returncode == 0 else None

    text = str(wait_until("kubectl explain of the schedule", explained, timeout=30, every=1))
    assert "num_speculative_tokens_per_batch_size" in text
    assert "0 meaning ordinary decoding for that step" in text
    for field in ("start", "end", "numSpeculativeTokens"):
        assert f"{field} <integer> -required-" in text
