"""The measuring code measured: tiny shapes on the CPU, in seconds, where torch is installed. torch is the
calibration pod's dependency, not the project's, so these run only when asked for: `pytest -m torch`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specpilot.calibrate.measure import MARKER, main, problems

pytestmark = pytest.mark.torch

TINY = {
    "hidden_size": 256,
    "intermediate_size": 1024,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "vocab_size": 8192,
}


def test_tiny_shapes_on_the_cpu_give_the_schema_and_cost_more_with_the_batch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("torch")
    target, draft, out = tmp_path / "target.json", tmp_path / "draft.json", tmp_path / "stepcost.json"
    target.write_text(json.dumps(TINY))
    draft.write_text(json.dumps({**TINY, "num_hidden_layers": 1}))
    argv = ["--target", str(target), "--draft", str(draft), "--draft-name", "head", "--grid", "tiny"]
    assert main([*argv, "--device", "cpu", "--reps", "7", "--out", str(out)]) == 0
    document = json.loads(out.read_text())
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith(MARKER)]
    assert [json.loads(line.removeprefix(MARKER)) for line in printed] == [document]
    assert problems(document) == []
    assert (document["gpu"], document["device"], document["dtype"]) == ("cpu", "cpu", "float32")
    assert document["roles"] == {"target": "target", "draft": "head"} and "stopped" not in document
    rows = {(r["model"], r["batch"], r["q"], r["ctx"]): r["ms"] for r in document["rows"]}
    assert len(rows) == len(document["rows"]) == 6 + 2 + 1 + 3
    for model, q in (("target", 1), ("target", 3), ("head", 1)):
        assert rows[(model, 64, q, 32)] > rows[(model, 1, q, 32)], (model, q, rows)
    assert rows[("target", 1, 32, 0)] > 0  # a prefill step


def test_the_budget_stops_measuring_and_says_so(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    target, out = tmp_path / "target.json", tmp_path / "stepcost.json"
    target.write_text(json.dumps(TINY))
    assert (
        main(["--target", str(target), "--grid", "tiny", "--device", "cpu", "--budget-s", "0", "--out", str(out)]) == 1
    )
    document = json.loads(out.read_text())
    assert document["stopped"] == "budget" and document["rows"] == []
