"""Profiles (YAML file, env path, inline env) and fault specifications."""

from __future__ import annotations

from pathlib import Path

import pytest

from specpilot.mockvllm.faults import FaultBoard, FaultError, FaultKind, parse_fault
from specpilot.mockvllm.profile import (
    PROFILE_ENV,
    PROFILE_INLINE_ENV,
    Profile,
    ProfileError,
    load_profile,
    parse_profile,
)


def test_no_profile_means_defaults() -> None:
    assert load_profile(None, {}) == Profile()


def test_a_yaml_profile_sets_costs_and_per_scope_acceptance(tmp_path: Path) -> None:
    path = tmp_path / "profile.yaml"
    path.write_text(
        "cost: {step_time_s: 0.03, draft_cost_ratio: 2e-1}\n"
        "acceptance: {default: 0.5, scopes: {code: 0.9}}\n"
        "faults: [{kind: latency, factor: 2, start_s: 10}]\n"
    )
    profile = load_profile(str(path), {})
    assert profile.cost.step_time_s == 0.03
    assert profile.cost.draft_cost_ratio == 0.2
    assert (profile.alpha("code"), profile.alpha("chat")) == (0.9, 0.5)
    assert profile.faults[0].kind is FaultKind.LATENCY


def test_the_env_path_and_inline_override_merge(tmp_path: Path) -> None:
    path = tmp_path / "profile.yaml"
    path.write_text("cost: {step_time_s: 0.03, per_seq_s: 0.001}\n")
    env = {PROFILE_ENV: str(path), PROFILE_INLINE_ENV: '{"cost": {"per_seq_s": 5e-05}}'}
    profile = load_profile(None, env)
    assert (profile.cost.step_time_s, profile.cost.per_seq_s) == (0.03, 5e-05)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"costs": {}}, "unknown profile section"),
        ({"cost": {"step_time": 1}}, "unknown field"),
        ({"cost": {"step_time_s": 0}}, "must be positive"),
        ({"cost": {"per_seq_s": -1}}, "must be >= 0"),
        ({"memory": {"block_size": 16.5}}, "must be an integer"),
        ({"acceptance": {"scopes": {"code": 1.5}}}, "probability"),
        ({"faults": [{"kind": "meteor"}]}, "must be one of"),
        ({"model": {"greedy_divergence": 1.5}}, "model.greedy_divergence must be a probability"),
    ],
)
def test_bad_profiles_name_the_field(data: object, message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        parse_profile(data)


def test_an_unreadable_profile_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="cannot read profile"):
        load_profile(str(tmp_path / "missing.yaml"), {})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"kind": "latency", "alpha": 0.1}, "unknown field"),
        ({"kind": "memory", "fraction": 1.5}, r"fraction.*\[0.0, 1.0\]"),
        ({"kind": "hang", "scope": "code"}, "takes no scope"),
        ({"kind": "errors", "status": 200}, "status"),
        ({"kind": "acceptance", "alpha": "low"}, "alpha"),
    ],
)
def test_bad_faults_are_refused(data: dict[str, object], message: str) -> None:
    with pytest.raises(FaultError, match=message):
        parse_fault(data)


def test_faults_act_only_inside_their_window() -> None:
    board = FaultBoard(seed=0)
    board.add(parse_fault({"kind": "latency", "factor": 3, "extra_s": 0.01, "start_s": 5, "duration_s": 10}), 100.0)
    assert board.stretch(0.02, 104.9) == 0.02
    assert board.stretch(0.02, 105.0) == pytest.approx(0.07)
    assert board.stretch(0.02, 115.0) == 0.02


def test_acceptance_collapse_hits_only_its_scope() -> None:
    board = FaultBoard(seed=0)
    board.add(parse_fault({"kind": "acceptance", "alpha": 0.1, "scope": "code"}), 0.0)
    assert board.alpha("code", 0.8, 1.0) == 0.1
    assert board.alpha("chat", 0.8, 1.0) == 0.8


def test_memory_pressure_hang_and_crash_are_reported() -> None:
    board = FaultBoard(seed=0)
    assert (board.held_fraction(0.0), board.hung(0.0), board.crash(0.0)) == (0.0, False, None)
    board.add(parse_fault({"kind": "memory", "fraction": 0.7}), 0.0)
    hang = board.add(parse_fault({"kind": "hang"}), 0.0)
    board.add(parse_fault({"kind": "crash", "exit_code": 3, "start_s": 60}), 0.0)
    assert board.held_fraction(1.0) == 0.7
    assert board.hung(1.0)
    assert board.remove(hang.id) and not board.hung(1.0)
    crash = board.crash(60.0)
    assert crash is not None and crash.exit_code == 3


def test_error_and_rejection_rates_are_drawn_per_request() -> None:
    board = FaultBoard(seed=42)
    board.add(parse_fault({"kind": "rejections", "rate": 0.25}), 0.0)
    board.add(parse_fault({"kind": "errors", "rate": 0.5, "status": 503, "scope": "code"}), 0.0)
    chat = [board.refusal("chat", 1.0) for _ in range(4000)]
    assert chat.count(429) / len(chat) == pytest.approx(0.25, abs=0.03)
    assert set(chat) == {None, 429}
    code = [board.refusal("code", 1.0) for _ in range(4000)]
    assert code.count(503) / len(code) == pytest.approx(0.75 * 0.5, abs=0.03)


def test_divergence_names_the_position_it_starts_at() -> None:
    board = FaultBoard(seed=0)
    board.add(parse_fault({"kind": "divergence", "after_tokens": 7, "scope": "code"}), 0.0)
    assert board.divergence("code", 1.0) == 7
    assert board.divergence("chat", 1.0) is None


def test_fault_listing_is_json_ready() -> None:
    board = FaultBoard(seed=0)
    fault = board.add(parse_fault({"kind": "rejections", "rate": 0.5, "duration_s": 30}), 10.0)
    assert fault.to_dict() == {
        "id": fault.id,
        "start": 10.0,
        "end": 40.0,
        "kind": "rejections",
        "rate": 0.5,
        "scope": None,
        "start_s": 0.0,
        "duration_s": 30.0,
    }
    open_ended = board.add(parse_fault({"kind": "hang"}), 0.0)
    assert open_ended.to_dict()["end"] is None


def test_natural_variation_is_a_model_parameter_off_by_default() -> None:
    assert Profile().model.greedy_divergence == 0.0
    assert parse_profile({"model": {"greedy_divergence": 0.002}}).model.greedy_divergence == 0.002


@pytest.mark.parametrize("kind", ["stop_overrun", "tool_json", "structured_invalid", "cancel_leak"])
def test_quality_faults_strike_a_share_of_one_scopes_requests(kind: str) -> None:
    board = FaultBoard(seed=1)
    board.add(parse_fault({"kind": kind, "rate": 0.5, "scope": "code"}), 0.0)
    hits = [board.strikes(FaultKind(kind), "code", 1.0) for _ in range(2000)]
    assert sum(hits) / len(hits) == pytest.approx(0.5, abs=0.05)
    assert not board.strikes(FaultKind(kind), "chat", 1.0)


def test_a_repetition_fault_loops_a_share_of_one_scopes_answers_from_its_position() -> None:
    board = FaultBoard(seed=1)
    board.add(parse_fault({"kind": "repetition", "rate": 0.5, "after_tokens": 6, "scope": "chat"}), 0.0)
    hits = [board.repetition("chat", 1.0) for _ in range(2000)]
    assert set(hits) == {None, 6} and hits.count(6) / len(hits) == pytest.approx(0.5, abs=0.05)
    assert board.repetition("code", 1.0) is None and board.divergence("chat", 1.0) is None
    with pytest.raises(FaultError, match="unknown field"):
        parse_fault({"kind": "repetition", "alpha": 0.5})


def test_only_per_request_faults_are_drawn_per_request() -> None:
    with pytest.raises(ValueError, match="not a per-request fault"):
        FaultBoard(seed=0).strikes(FaultKind.LATENCY, "code", 0.0)
