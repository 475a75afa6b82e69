"""Length distributions, scope mixes, arrival processes and traces."""

from __future__ import annotations

import json
import random
import statistics
from itertools import islice, pairwise
from pathlib import Path

import pytest

from specpilot.loadgen.workload import (
    WorkloadError,
    burst_arrivals,
    constant_arrivals,
    load_mix,
    parse_length,
    parse_mix,
    plan,
    poisson_arrivals,
    read_trace,
)


@pytest.mark.parametrize(
    ("spec", "mean"),
    [
        (100, 100),
        ({"dist": "uniform", "min": 50, "max": 150}, 100),
        ({"dist": "normal", "mean": 200, "std": 20}, 200),
        ({"dist": "lognormal", "mean": 300, "sigma": 0.5}, 300),
        ({"dist": "exponential", "mean": 80}, 80),
        ({"dist": "choice", "values": [10, 100], "weights": [3, 1]}, 32.5),
    ],
    ids=["constant", "uniform", "normal", "lognormal", "exponential", "choice"],
)
def test_lengths_sample_around_their_mean(spec: object, mean: float) -> None:
    length = parse_length(spec, "test")
    rng = random.Random(3)
    samples = [length.sample(rng) for _ in range(20_000)]
    assert length.mean == pytest.approx(mean)
    assert statistics.mean(samples) == pytest.approx(mean, rel=0.03)
    assert min(samples) >= 1


def test_lengths_respect_bounds() -> None:
    length = parse_length({"dist": "exponential", "mean": 100, "min": 20, "max": 150}, "test")
    rng = random.Random(0)
    samples = [length.sample(rng) for _ in range(2000)]
    assert min(samples) == 20 and max(samples) == 150


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (0, "at least 1"),
        ({"dist": "gamma", "mean": 3}, "'dist' must be one of"),
        ({"dist": "normal", "mean": 3}, "needs std"),
        ({"dist": "uniform", "min": 9, "max": 3}, "min <= max"),
        ({"dist": "constant", "value": 3, "scale": 2}, "unknown field"),
        ({"dist": "choice", "values": [1, 2], "weights": [1]}, "match"),
        ("long", "expected an integer or a mapping"),
    ],
)
def test_bad_lengths_say_where(spec: object, message: str) -> None:
    with pytest.raises(WorkloadError, match=message):
        parse_length(spec, "scopes[0].output_tokens")


def test_a_mix_parses_from_yaml_text() -> None:
    mix = load_mix(
        "scopes:\n"
        "  - {name: code, weight: 3, input_tokens: 400, output_tokens: {dist: uniform, min: 50, max: 300},"
        " deadline_s: 20}\n"
        "  - {name: chat, output_tokens: 64}\n"
    )
    assert [s.name for s in mix] == ["code", "chat"]
    assert (mix[0].weight, mix[0].deadline_s, mix[1].weight, mix[1].deadline_s) == (3.0, 20.0, 1.0, None)


def test_a_mix_parses_from_a_long_inline_text_or_a_file(tmp_path: Path) -> None:
    text = "".join(f"- {{name: scope-{i}, input_tokens: {{dist: uniform, min: 60, max: 200}}}}\n" for i in range(8))
    assert len(text) > 255  # longer than a file name may be
    assert [s.name for s in load_mix(text)] == [f"scope-{i}" for i in range(8)]
    (tmp_path / "mix.yaml").write_text(text)
    assert load_mix(str(tmp_path / "mix.yaml")) == load_mix(text)
    with pytest.raises(WorkloadError, match=r"mix file .*absent.yaml.*No such file"):
        load_mix(str(tmp_path / "absent.yaml"))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"scopes": []}, "non-empty"),
        ([{"weight": 1}], "needs a 'name'"),
        ([{"name": "a", "colour": 1}], "unknown"),
        ([{"name": "a"}, {"name": "a"}], "unique"),
        ([{"name": "a", "weight": 0}], "> 0"),
    ],
)
def test_bad_mixes_are_refused(data: object, message: str) -> None:
    with pytest.raises(WorkloadError, match=message):
        parse_mix(data)


def test_poisson_arrivals_have_the_requested_rate() -> None:
    times = list(islice(poisson_arrivals(5.0, random.Random(1)), 20_000))
    assert len(times) / times[-1] == pytest.approx(5.0, rel=0.03)
    gaps = [b - a for a, b in pairwise(times)]
    assert statistics.stdev(gaps) == pytest.approx(statistics.mean(gaps), rel=0.05)  # exponential gaps


def test_constant_and_burst_arrivals() -> None:
    assert list(islice(constant_arrivals(4.0), 4)) == [0.0, 0.25, 0.5, 0.75]
    assert list(islice(burst_arrivals(3, 10.0), 6)) == [0.0, 0.0, 0.0, 10.0, 10.0, 10.0]
    assert list(islice(burst_arrivals(2, 10.0, spread=1.0), 4)) == [0.0, 0.5, 10.0, 10.5]


def test_a_plan_draws_scopes_by_weight() -> None:
    mix = parse_mix([{"name": "a", "weight": 3}, {"name": "b", "weight": 1, "deadline_s": 5}])
    planned = list(islice(plan(constant_arrivals(1.0), mix, random.Random(0)), 4000))
    share = sum(p.scope == "a" for p in planned) / len(planned)
    assert share == pytest.approx(0.75, abs=0.03)
    assert {p.deadline_s for p in planned if p.scope == "b"} == {5.0}


def test_traces_are_relative_sorted_and_filled_from_the_mix(tmp_path: Path) -> None:
    trace = tmp_path / "peak.jsonl"
    rows = [
        {"timestamp": 1000.5, "scope": "code", "output_tokens": 12},
        {"timestamp": 1000.0, "scope": "chat", "input_tokens": 7, "deadline_s": 3, "prompt": "hello"},
        {"timestamp": 1002.0},
    ]
    trace.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    mix = parse_mix([{"name": "code", "input_tokens": 99, "deadline_s": 9}, {"name": "chat", "output_tokens": 5}])
    planned = read_trace(str(trace), mix, random.Random(0))
    assert [(p.at, p.scope) for p in planned] == [(0.0, "chat"), (0.5, "code"), (2.0, "code")]
    assert (planned[0].input_tokens, planned[0].output_tokens, planned[0].deadline_s, planned[0].prompt) == (
        7,
        5,
        3.0,
        "hello",
    )
    assert (planned[1].input_tokens, planned[1].output_tokens, planned[1].deadline_s) == (99, 12, 9.0)


def test_a_bad_trace_line_is_located(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 1}\n{"scope": "x"}\n')
    with pytest.raises(WorkloadError, match=r"t.jsonl:2: needs a numeric 'timestamp'"):
        read_trace(str(trace), parse_mix([{"name": "a"}]), random.Random(0))
