"""Calibrated profiles: loaded by name, and the engine under them times its steps as the GPU measured them."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from specpilot.mockvllm import simulate
from specpilot.mockvllm.engine import Engine
from specpilot.mockvllm.profile import (
    PROFILE_ENV,
    PROFILE_INLINE_ENV,
    Profile,
    ProfileError,
    calibrated_names,
    load_profile,
    parse_profile,
)
from specpilot.mockvllm.step import Step
from specpilot.mockvllm.textgen import TokenSource
from specpilot.wire.stepcost import Form

DRAFT_1B = "h200-llama-3.1-8b-draft-1b"
DATA = json.loads(resources.files("specpilot.mockvllm").joinpath("profiles/h200-stepcost.json").read_text())
WHOLE_PROMPTS = ("--max-num-batched-tokens", "300000")  # every prompt in one step: all sequences start alike


def measured_ms(model: str, batch: int, q: int, ctx: int) -> float:
    (row,) = [r for r in DATA["rows"] if (r["model"], r["batch"], r["q"], r["ctx"]) == (model, batch, q, ctx)]
    return float(row["ms"])


def first_decode_step(engine: Engine, batch: int, prompt: int) -> Step:
    """The engine's first step in which all `batch` requests decode, after their prompts."""
    for index in range(batch):
        engine.submit(
            scope="s",
            prompt_tokens=prompt,
            max_tokens=64,
            tokens=TokenSource(index, mean_length=64),
            stop=(),
            ignore_eos=True,
        )
    while True:
        step = engine.next_step()
        assert step is not None
        if not step.prefills and len(step.decodes) == batch:
            return step
        engine.end_step(step, engine.time() + step.duration)


def test_the_package_carries_the_three_calibrated_profiles_with_their_provenance() -> None:
    assert set(calibrated_names()) == {DRAFT_1B, "h200-llama-3.1-8b-eagle", "h200-qwen2.5-32b"}
    for name in calibrated_names():
        profile = parse_profile({"calibrated": name})
        assert profile.cost.form is Form.ADDITIVE and profile.draft is not None
        assert profile.provenance["gpu"].startswith("NVIDIA H200") and profile.provenance["date"] == "2026-12-04"


@pytest.mark.parametrize(("batch", "ctx"), [(1, 1024), (16, 1024), (64, 1024), (1, 256), (64, 256), (64, 4096)])
def test_an_ordinary_step_under_the_8b_profile_takes_what_the_gpu_measured(batch: int, ctx: int) -> None:
    engine = simulate.engine({"calibrated": DRAFT_1B}, flags=WHOLE_PROMPTS)
    step = first_decode_step(engine, batch, prompt=ctx)
    assert step.duration * 1000 == pytest.approx(measured_ms("llama-3.1-8b", batch, 1, ctx), rel=0.05)


@pytest.mark.parametrize("batch", [1, 16, 64])
@pytest.mark.parametrize(("name", "draft"), [(DRAFT_1B, "llama-3.2-1b"), ("h200-llama-3.1-8b-eagle", "eagle-head-8b")])
def test_a_round_of_four_drafts_costs_a_measured_five_token_verification_and_four_measured_draft_steps(
    batch: int, name: str, draft: str
) -> None:
    spec = {"method": "draft_model", "model": "d", "num_speculative_tokens": 4}
    engine = simulate.engine({"calibrated": name}, spec, flags=WHOLE_PROMPTS)
    step = first_decode_step(engine, batch, prompt=1024)
    measured = measured_ms("llama-3.1-8b", batch, 5, 1024) + 4 * measured_ms(draft, batch, 1, 1024)
    assert step.duration * 1000 == pytest.approx(measured, rel=0.05)


def test_a_calibrated_profile_loads_by_name_and_a_profile_naming_one_merges_on_top(tmp_path: Path) -> None:
    by_flag = load_profile(DRAFT_1B, {})
    assert by_flag == load_profile(None, {PROFILE_ENV: DRAFT_1B}) == parse_profile({"calibrated": DRAFT_1B})
    assert by_flag.cost.step_time_s == pytest.approx(measured_ms("llama-3.1-8b", 1, 1, 1024) / 1000, rel=0.05)
    inline = json.dumps({"calibrated": DRAFT_1B, "acceptance": {"scopes": {"code": 0.9}}, "cost": {"knee_tokens": 7}})
    merged = load_profile(None, {PROFILE_INLINE_ENV: inline})
    assert merged.alpha("code") == 0.9 and merged.cost.knee_tokens == 7
    assert merged.cost.step_time_s == by_flag.cost.step_time_s and merged.draft == by_flag.draft
    path = tmp_path / "p.yaml"
    path.write_text(f"calibrated: {DRAFT_1B}\nmemory: {{gpu_memory_gib: 80}}\n")
    assert load_profile(str(path), {}).memory.gpu_memory_gib == 80


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"calibrated": "h100-nothing"}, "no calibrated profile 'h100-nothing'"),
        ({"cost": {"form": "quadratic"}}, "cost.form must be one of roofline, additive"),
        ({"draft": {"per_seq_s": 0.001}}, "'draft' must be a mapping with the draft's step_time_s"),
        ({"draft": {"step_time_s": 0}}, "draft.step_time_s must be positive"),
        ({"provenance": "h200"}, "'provenance' must be a mapping"),
    ],
    ids=["unknown-name", "unknown-form", "draft-without-step", "draft-zero-step", "provenance-not-mapping"],
)
def test_a_profile_that_names_what_does_not_exist_is_refused(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        parse_profile(data)


def test_without_a_draft_section_the_invented_ratio_still_prices_the_draft() -> None:
    assert parse_profile({"cost": {"draft_cost_ratio": 0.2}}).draft is None
    assert Profile().cost.form is Form.ROOFLINE
