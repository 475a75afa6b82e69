"""The draft's batch-size schedule in `--speculative-config`: under the key the engine's vLLM reads, as
3-item ranges, in the speculative arm alone, and said in status."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from specpilot.api.spec import Draft
from specpilot.api.status import RoutesStatus
from specpilot.controller.core.arm_objects import arms_of, render_arm, speculative_config
from specpilot.controller.core.health import Observed
from specpilot.controller.core.next_status import carry_scopes, reconciled_status
from specpilot.wire.batchschedule import VllmRelease, validate
from specpilot.wire.names import Arm
from tests.unit.controller.specs import ROOT, load, with_spec, workload_of

MINIMAL = ROOT / "manifests/examples/minimal.yaml"
WORKLOAD = ROOT / "manifests/examples/workload-ref.yaml"
SCHEDULE = [
    {"start": 1, "end": 8, "numSpeculativeTokens": 4},
    {"start": 9, "end": 32, "numSpeculativeTokens": 2},
    {"start": 64, "end": 64, "numSpeculativeTokens": 0},
]
RANGES = [[1, 8, 4], [9, 32, 2], [64, 64, 0]]
KEYS = {
    VllmRelease.V0_33: "num_speculative_tokens_per_batch_size",
    VllmRelease.MAIN: "speculative_token_schedule",
}


def _draft(**fields: object) -> Draft:
    return Draft.from_wire({"model": "Qwen/Qwen3-0.6B", "numSpeculativeTokens": 4, **fields})


@pytest.mark.parametrize("release", list(VllmRelease), ids=str)
def test_the_schedule_renders_under_the_releases_key_as_three_item_ranges(release: VllmRelease) -> None:
    config = json.loads(speculative_config(_draft(schedule=SCHEDULE), release=release))
    assert config == {
        "method": "draft_model",
        "model": "Qwen/Qwen3-0.6B",
        "num_speculative_tokens": 4,
        KEYS[release]: RANGES,
    }
    assert [r.render() for r in validate(config[KEYS[release]], release)] == RANGES


def test_without_a_schedule_the_releases_render_alike() -> None:
    rendered = {release: speculative_config(_draft(), release=release) for release in VllmRelease}
    assert rendered[VllmRelease.V0_33] == rendered[VllmRelease.MAIN]
    assert not set(KEYS.values()) & set(json.loads(rendered[VllmRelease.MAIN]))


def test_the_schedule_and_its_form_change_the_speculative_arm_alone() -> None:
    ref, plain = load(MINIMAL)
    scheduled = with_spec(plain, "speculative.draft.schedule", SCHEDULE)
    on_main = with_spec(scheduled, "engine.vllmVersion", "main")
    for arm in (Arm.BASELINE, Arm.CONTROL, Arm.SPECULATIVE):
        hashes = {render_arm(ref, spec, arm).config_hash for spec in (plain, scheduled, on_main)}
        assert len(hashes) == (3 if arm is Arm.SPECULATIVE else 1), arm


@pytest.mark.parametrize(
    ("example", "source"), [(MINIMAL, "engine"), (WORKLOAD, "workloadRef")], ids=["engine", "workload"]
)
@pytest.mark.parametrize("release", list(VllmRelease), ids=str)
def test_the_speculative_arm_runs_the_schedule_in_its_engines_form(
    example: Path, source: str, release: VllmRelease
) -> None:
    ref, spec = load(example)
    spec = with_spec(spec, "speculative.draft.schedule", SCHEDULE[:2])
    spec = with_spec(spec, f"{source}.vllmVersion", release.value)
    workload = workload_of(spec)
    plans = {arm: render_arm(ref, spec, arm, workload) for arm in arms_of(spec)}
    speculative = plans[Arm.SPECULATIVE]
    assert speculative.deployment is not None
    args = [arg for c in speculative.deployment["spec"]["template"]["spec"]["containers"] for arg in c.get("args", [])]
    flag = args.index("--speculative-config")
    assert args[flag + 1] == speculative.speculative_config
    assert json.loads(args[flag + 1])[KEYS[release]] == RANGES[:2]
    assert all(plan.speculative_config is None for arm, plan in plans.items() if arm is not Arm.SPECULATIVE)


def test_status_shows_the_rendered_config_on_the_speculative_arm() -> None:
    ref, spec = load(MINIMAL)
    spec = with_spec(spec, "speculative.draft.schedule", SCHEDULE)
    spec = with_spec(spec, "engine.vllmVersion", "main")
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    arms = tuple(render_arm(ref, spec, arm) for arm in arms_of(spec))
    scopes, events = carry_scopes(None, spec, arms, now=now)
    status = reconciled_status(
        None,
        spec=spec,
        generation=1,
        arms=arms,
        router_deployment="qwen3-chat-router",
        observed=Observed(deployments={}),
        routes=RoutesStatus(generation=1, hash="abc"),
        scopes=scopes,
        scope_events=events,
        now=now,
    ).status
    assert status.arms is not None
    shown = status.arms.to_wire()
    assert json.loads(shown["speculative"]["speculativeConfig"])["speculative_token_schedule"] == RANGES
    assert "speculativeConfig" not in shown["baseline"] and "speculativeConfig" not in shown["control"]
