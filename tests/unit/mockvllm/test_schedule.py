"""vLLM 0.33's dynamic speculative decoding in the mock: the batch-size schedule refused at start-up as
vLLM refuses it, each step's k looked up from its batch, counters that count only drafting steps, and the
#49548 stall at the schedule's switch."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from specpilot.mockvllm import simulate
from specpilot.mockvllm.cmdline import ConfigError
from specpilot.mockvllm.config import parse_args, resolve_limits
from specpilot.mockvllm.profile import parse_profile
from specpilot.mockvllm.server import MockServer, main
from specpilot.mockvllm.textgen import TokenSource

KEY = "num_speculative_tokens_per_batch_size"
PROFILE = {"calibrated": "h200-llama-3.1-8b-eagle", "acceptance": {"default": 0.7}}
FLAGS = ("--max-model-len", "2048")
PLAIN = {"method": "eagle", "model": "draft", "num_speculative_tokens": 2}
SWITCH = 4  # vLLM #49548's schedule: 2 draft tokens up to batch 4, none above
SCHEDULED = {**PLAIN, KEY: [[1, SWITCH, 2], [SWITCH + 1, 512, 0]]}
WARMUP_S = 10.0


def _argv(schedule: object, **more: object) -> list[str]:
    return ["m", "--max-num-seqs", "8", "-sc", json.dumps({**PLAIN, KEY: schedule, **more})]


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        pytest.param(
            {"1": 2},
            f"{KEY} must be a non-empty list of (range_start, range_end, num_speculative_tokens) entries.",
            id="not-a-list",
        ),
        pytest.param([], f"{KEY} must not be empty.", id="empty"),
        pytest.param(
            [[1, 4]],
            f"Each {KEY} entry must be a 3-item sequence: (range_start, range_end, num_speculative_tokens).",
            id="two-items",
        ),
        pytest.param([[0, 4, 2]], "Batch-size range (0, 4) must be positive.", id="non-positive"),
        pytest.param([[1, 4, 2], [8, 5, 0]], "Batch-size range start must be <= end for (8, 5, 0).", id="start>end"),
        pytest.param([[1, 4, -1]], f"{KEY} values must be >= 0.", id="negative-k"),
        pytest.param([[1, 4, 2], [4, 8, 0]], "Batch-size ranges must be non-overlapping and sorted.", id="overlap"),
        pytest.param(
            [[5, 10, 0], [1, 6, 2]], "Batch-size ranges must be non-overlapping and sorted.", id="unsorted-overlap"
        ),
        pytest.param(
            [[2, 4, 2]],
            "The first batch-size range must start at 1 so every runtime batch size has a defined schedule.",
            id="not-from-1",
        ),
    ],
)
def test_a_schedule_vllm_refuses_is_refused_at_start_up_with_vllms_message(schedule: object, message: str) -> None:
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        parse_args(_argv(schedule))


def test_the_refusal_ends_the_process_with_the_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(_argv([[1, 4, 2], [4, 8, 0]])) == 2
    assert capsys.readouterr().err.strip() == (
        "specpilot mock-vllm: error: Batch-size ranges must be non-overlapping and sorted."
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        pytest.param(
            {"speculative_token_schedule": [[1, 4, 2]]},
            "unknown key(s) speculative_token_schedule",
            id="later-vllm-key",
        ),
        pytest.param({"num_speculative_tokens": 0}, "num_speculative_tokens must be an integer > 0", id="k-zero"),
    ],
)
def test_what_vllm_0_33_does_not_take_with_a_schedule_is_refused(extra: Mapping[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_args(_argv([[1, 4, 2]], **extra))


@pytest.mark.parametrize(
    ("schedule", "dense"),
    [
        pytest.param([[1, 2, 2], [5, 6, 1]], (2, 2, 2, 2, 1, 1, 1, 1), id="gap-and-tail-carry-the-last-k"),
        pytest.param([[5, 512, 0], [1, 4, 2]], (2, 2, 2, 2, 0, 0, 0, 0), id="unsorted-cut-at-max-num-seqs"),
        pytest.param([[1, 3, 5], [4, 4, 1]], (2, 2, 2, 1, 1, 1, 1, 1), id="k-above-num-speculative-tokens-clamped"),
    ],
)
def test_a_valid_schedule_is_accepted_and_looked_up_by_batch(schedule: object, dense: tuple[int, ...]) -> None:
    config = parse_args(_argv(schedule))
    limits = resolve_limits(config, parse_profile(None))
    assert limits.draft_tokens_by_batch is not None
    assert limits.draft_tokens_by_batch[1:] == dense


def _lengths(rng: random.Random) -> Iterator[tuple[int, int]]:
    while True:
        yield rng.randint(100, 300), rng.randint(100, 200)


def _arrivals(rate: float, seconds: float) -> list[simulate.Arrival]:
    rng = random.Random(7)
    return simulate.poisson([rate], seconds, scope="s", lengths=_lengths(rng), rng=rng)


def _tpct(speculative: Mapping[str, Any] | None, arrivals: list[simulate.Arrival], **profile: Any) -> float:
    engine = simulate.engine({**PROFILE, **profile}, speculative, flags=FLAGS)
    served = simulate.serve(engine, arrivals, until=arrivals[-1].at + 30)
    return simulate.time_per_committed_token(served, after=WARMUP_S)


def test_a_schedule_runs_as_plain_speculation_below_its_switch_and_as_ordinary_decoding_above() -> None:
    light = _arrivals(1.0, 60)  # a batch of one or two, rarely past the switch
    scheduled, plain, control = (_tpct(spec, light) for spec in (SCHEDULED, PLAIN, None))
    assert scheduled == pytest.approx(plain, rel=0.02)
    assert scheduled < 0.8 * control
    heavy = _arrivals(40.0, 30)  # a batch of tens, never back under the switch after the first steps
    scheduled, plain, control = (_tpct(spec, heavy) for spec in (SCHEDULED, PLAIN, None))
    assert scheduled == pytest.approx(control, rel=0.02)
    assert abs(plain / control - 1) > 0.1  # the arm it is told apart from differs


def _counted(server: MockServer) -> dict[str, float]:
    def value(name: str, **labels: str) -> float:
        sample = server.registry.get_sample_value(name, {"model_name": "m", "engine": "0", **labels})
        return sample or 0.0

    return {
        "drafts": value("vllm:spec_decode_num_drafts_total"),
        "draft_tokens": value("vllm:spec_decode_num_draft_tokens_total"),
        "accepted": value("vllm:spec_decode_num_accepted_tokens_total"),
        "pos2": value("vllm:spec_decode_num_accepted_tokens_per_pos_total", position="2"),
        "generated": value("vllm:generation_tokens_total"),
    }


def _step(server: MockServer) -> int:
    """Run one step of the engine; return its k."""
    step = server.engine.next_step()
    assert step is not None
    server.engine.end_step(step, server.engine.time() + step.duration)
    return step.k


def test_only_drafting_steps_count_drafts_and_positions_only_up_to_the_steps_k() -> None:
    spec = {**PLAIN, "num_speculative_tokens": 3, KEY: [[1, 1, 3], [2, 2, 1], [3, 8, 0]]}
    config = parse_args(["m", "--max-num-seqs", "8", "-sc", json.dumps(spec)])
    server = MockServer(config, parse_profile({"acceptance": {"default": 1.0}}), env={})
    server.engine.clock = simulate.VirtualClock()
    for max_tokens in (3, 40, 80):
        server.engine.submit(
            scope="s",
            prompt_tokens=16,
            max_tokens=max_tokens,
            tokens=TokenSource(max_tokens, mean_length=max_tokens),
            stop=(),
            ignore_eos=True,
        )
    assert _step(server) == 0  # the three prefills
    before = _counted(server)
    assert _step(server) == 0
    after = _counted(server)
    assert after["generated"] > before["generated"]
    assert {key: after[key] for key in after if key != "generated"} == {
        k: v for k, v in before.items() if k != "generated"
    }
    while len(server.engine.scheduler.running) == 3:
        _step(server)
    before = _counted(server)
    assert _step(server) == 1  # two left: one draft token each, all accepted
    after = _counted(server)
    assert after["drafts"] - before["drafts"] == 2
    assert after["draft_tokens"] - before["draft_tokens"] == 2
    assert after["accepted"] - before["accepted"] == 2
    assert after["pos2"] == before["pos2"]


def test_the_49548_stall_cuts_throughput_where_the_batch_hovers_at_the_switch_by_the_issues_factor() -> None:
    hovering = _arrivals(3.0, 90)
    without = _tpct(SCHEDULED, hovering)
    stalled = _tpct(SCHEDULED, hovering, faults=[{"kind": "switch_stall"}])
    assert without <= 1.02 * _tpct(None, hovering)  # no worse than ordinary decoding without it
    # the issue: 232 tok/s fell to 24-157 tok/s (1.5-9.7x) when concurrency crossed the switch
    assert 232 / 157 <= stalled / without <= 232 / 24
    # where the batch never reaches the switch, the stall never strikes
    light = _arrivals(0.5, 60)
    assert _tpct(SCHEDULED, light, faults=[{"kind": "switch_stall"}]) == pytest.approx(
        _tpct(SCHEDULED, light), rel=0.02
    )
