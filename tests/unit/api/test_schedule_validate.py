"""The draft's schedule before anything is deployed: what vLLM would refuse at start-up, or silently change,
is refused naming spec.speculative.draft.schedule, even where the API server's rules did not run (an object
stored under an older CRD)."""

from __future__ import annotations

from typing import Any

import pytest

from specpilot.api import validate
from specpilot.api.spec import DraftMethod
from specpilot.api.spec.arms_spec import METHODS_WITH_DRAFT_MODEL, SCHEDULE_ASCENDS, SCHEDULE_WITHIN_DRAFT
from specpilot.wire.batchschedule import VllmRelease

FIELD = "spec.speculative.draft.schedule"
FIX = "write each range with start <= end, the first from 1, each after the previous one ends"


def _pilot(schedule: list[list[int]], *, release: VllmRelease = VllmRelease.V0_33, **draft: Any) -> dict[str, Any]:
    ranges = [{"start": start, "end": end, "numSpeculativeTokens": k} for start, end, k in schedule]
    return {
        "apiVersion": "specpilot.io/v1alpha1",
        "kind": "SpeculationPilot",
        "metadata": {"name": "pilot"},
        "spec": {
            "engine": {"image": "vllm/vllm-openai:v0.33.0", "model": "Qwen/Qwen3-8B", "vllmVersion": release.value},
            "speculative": {
                "draft": {"model": "Qwen/Qwen3-0.6B", "numSpeculativeTokens": 4, **draft, "schedule": ranges}
            },
            "scopes": [{"name": "chat"}],
        },
    }


@pytest.mark.parametrize("release", list(VllmRelease), ids=str)
@pytest.mark.parametrize(
    "schedule",
    [[[1, 1, 4]], [[1, 8, 4], [9, 32, 2], [33, 33, 0]], [[1, 4, 4], [16, 16, 0]]],
    ids=["one-range", "down-to-zero", "with-a-gap"],
)
def test_a_schedule_vllm_reads_is_deployable(schedule: list[list[int]], release: VllmRelease) -> None:
    assert validate(_pilot(schedule, release=release)) == []


@pytest.mark.parametrize("method", list(DraftMethod), ids=str)
def test_every_method_takes_a_schedule(method: DraftMethod) -> None:
    body = _pilot([[1, 8, 4], [9, 9, 0]], method=method.value)
    if method not in METHODS_WITH_DRAFT_MODEL:
        del body["spec"]["speculative"]["draft"]["model"]
    assert validate(body) == []


VLLM_REFUSES = [
    ("not-from-one", [[2, 8, 3]], "The first batch-size range must start at 1"),
    ("overlapping", [[1, 8, 3], [8, 16, 0]], "Batch-size ranges must be non-overlapping and sorted."),
    ("reversed", [[1, 8, 3], [20, 10, 0]], "Batch-size range start must be <= end for (20, 10, 0)."),
]


@pytest.mark.parametrize("release", list(VllmRelease), ids=str)
@pytest.mark.parametrize(("schedule", "refusal"), [case[1:] for case in VLLM_REFUSES], ids=[c[0] for c in VLLM_REFUSES])
def test_what_vllm_refuses_is_refused_with_its_reason_and_the_fix(
    schedule: list[list[int]], refusal: str, release: VllmRelease
) -> None:
    (problem,) = validate(_pilot(schedule, release=release))
    assert problem.field == FIELD
    assert problem.message.startswith(f"vLLM refuses it at start-up ({refusal}")
    assert problem.message.endswith(f"): {FIX}")


def test_ranges_written_out_of_order_are_refused_though_vllm_would_sort_them() -> None:
    assert [(p.field, p.message) for p in validate(_pilot([[9, 16, 0], [1, 8, 3]]))] == [
        (FIELD, SCHEDULE_ASCENDS.message)
    ]


def test_a_range_above_the_drafts_tokens_is_refused_though_vllm_would_cut_it() -> None:
    assert [(p.field, p.message) for p in validate(_pilot([[1, 8, 5], [9, 9, 0]]))] == [
        (FIELD, SCHEDULE_WITHIN_DRAFT.message)
    ]
    assert validate(_pilot([[1, 8, 5], [9, 9, 0]], numSpeculativeTokens=5)) == []


@pytest.mark.parametrize(
    ("schedule", "field"),
    [([[0, 8, 3]], f"{FIELD}[0].start"), ([[1, 8, -1]], f"{FIELD}[0].numSpeculativeTokens"), ([], FIELD)],
    ids=["start-zero", "negative-tokens", "empty"],
)
def test_a_malformed_range_is_refused_at_its_field(schedule: list[list[int]], field: str) -> None:
    assert [p.field for p in validate(_pilot(schedule))] == [field]
