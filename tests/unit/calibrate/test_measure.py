"""The measuring code's pure part: shapes from config.json, the grids, the rows and the document's check.
Measuring itself needs torch: tests/unit/calibrate/test_measure_torch.py (opt in with -m torch)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from specpilot.calibrate.measure import GRIDS, main, plan, problems, shape_of, steps, summary

LLAMA_8B = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "rope_theta": 500000.0,
}
LLAMA_1B = {**LLAMA_8B, "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16, "head_dim": 64}
QWEN_32B = {**LLAMA_8B, "hidden_size": 5120, "intermediate_size": 27648, "num_attention_heads": 40}
QWEN_32B |= {"num_hidden_layers": 64, "vocab_size": 152064}
EAGLE_8B = {**LLAMA_8B, "num_hidden_layers": 1}


@pytest.mark.parametrize(
    ("config", "params"),
    # The parameter counts the H200 measurements (../shared/calibration/h200-stepcost.json) list per model.
    [(LLAMA_8B, 7504920576), (LLAMA_1B, 1235812352), (EAGLE_8B, 743448576), (QWEN_32B, 31984844800)],
    ids=["llama-3.1-8b", "llama-3.2-1b", "eagle-head-8b", "qwen2.5-32b"],
)
def test_shapes_read_from_config_json_count_the_weights_a_step_reads(config: dict[str, Any], params: int) -> None:
    assert shape_of(config).params == params


def test_head_dim_defaults_to_hidden_over_heads_and_kv_heads_to_heads() -> None:
    assert shape_of(LLAMA_8B).head_dim == 128 and shape_of(LLAMA_1B).head_dim == 64
    multi_head = {k: v for k, v in LLAMA_8B.items() if k != "num_key_value_heads"} | {"head_dim": None}
    assert (shape_of(multi_head).kv_heads, shape_of(multi_head).head_dim) == (32, 128)


def test_a_multimodal_models_text_config_is_read() -> None:
    assert shape_of({"model_type": "llava", "text_config": LLAMA_8B}) == shape_of(LLAMA_8B)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"vocab_size": None}, "config.json has no vocab_size"),
        ({"hidden_size": "4096"}, "config.json's hidden_size is '4096', not a positive integer"),
        ({"num_key_value_heads": 5}, "num_attention_heads 32 is not a multiple of num_key_value_heads 5"),
        ({"num_local_experts": 8}, "a mixture-of-experts model: only dense decoders are measured"),
    ],
    ids=["missing", "not-a-number", "grouped-query-mismatch", "moe"],
)
def test_a_config_that_cannot_be_measured_says_why(change: dict[str, Any], message: str) -> None:
    config = {k: v for k, v in {**LLAMA_8B, **change}.items() if v is not None}
    with pytest.raises(ValueError, match=message):
        shape_of(config)


def test_a_plan_keeps_the_models_given_and_the_batches_that_fit() -> None:
    alone = plan("quick", roles=["target"], max_batch=64)
    assert alone and {s.role for s in alone} == {"target"}
    assert max(b for s in alone for b in s.batches) == 64
    both = plan("standard", roles=["target", "draft"])
    assert [s.role for s in both] == [s.role for s in GRIDS["standard"]]
    assert {(q, ctx) for s in both if s.role == "target" for q in s.qs for ctx in s.ctxs} >= {(1, 1024), (5, 1024)}
    assert plan("quick", roles=["target"], max_batch=0) == ()


def test_steps_run_batches_ascending_within_each_q_and_context() -> None:
    (sweep, *_) = plan("tiny", roles=["target"])
    assert list(steps(sweep)) == [(1, 1, 32), (8, 1, 32), (64, 1, 32), (1, 3, 32), (8, 3, 32), (64, 3, 32)]


def test_a_row_summarises_its_replays() -> None:
    row = summary("m", 4, 5, 1024, [3.0, 1.0, 2.0, 9.0, 4.0, 5.0, 6.0, 7.0, 8.0, 10.0, 11.0], graph=True)
    assert row == {
        "model": "m",
        "batch": 4,
        "q": 5,
        "ctx": 1024,
        "graph": True,
        "ms": 6.0,
        "ms_min": 1.0,
        "ms_p90": 10.0,
    }


# Two rows as the H200 measurements have them: the schema the cost model's fit reads.
H200 = {
    "gpu": "NVIDIA H200",
    "torch": "2.11.0+cu130",
    "rows": [
        {
            "model": "llama-3.1-8b",
            "batch": 1,
            "q": 1,
            "ctx": 1024,
            "graph": True,
            "ms": 5.49,
            "ms_min": 5.48,
            "ms_p90": 5.49,
        },
        {
            "model": "llama-3.1-8b",
            "batch": 2,
            "q": 1,
            "ctx": 1024,
            "graph": True,
            "ms": 5.61,
            "ms_min": 5.59,
            "ms_p90": 5.62,
        },
    ],
    "params": {"llama-3.1-8b": 7504920576},
    "elapsed_s": 32.5,
}


@pytest.mark.parametrize(
    ("document", "found"),
    [
        (H200, []),
        ({**H200, "rows": [*H200["rows"], {"model": "x", "batch": 512, "q": 1, "ctx": 1024, "error": "OOM"}]}, []),
        ({**H200, "rows": [{"model": "x", "batch": 1, "q": 1, "ctx": 1, "error": "OOM"}]}, ["no row was measured"]),
        ({"rows": []}, ["no gpu", "no torch", "no row was measured"]),
        ({**H200, "rows": {}}, ["rows is not a list"]),
        (
            {**H200, "rows": [{"batch": 1, "q": 1, "ctx": 1, "ms": 0, "ms_min": 1, "ms_p90": 1}]},
            ["rows[0] has no model", "rows[0].ms is no positive time"],
        ),
        ([], ["not a JSON object"]),
    ],
    ids=["h200", "an-error-row", "only-errors", "no-provenance", "rows-not-a-list", "bad-row", "not-an-object"],
)
def test_the_document_check_reads_the_h200_schema(document: Any, found: list[str]) -> None:
    assert problems(document) == found


def test_a_config_that_cannot_be_read_fails_before_torch_is_needed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**LLAMA_8B, "num_local_experts": 8}))
    assert main(["--target", str(config)]) == 1
    assert (
        capsys.readouterr().err
        == f"error: target {config}: a mixture-of-experts model: only dense decoders are measured\n"
    )
    assert main(["--target", str(tmp_path / "absent.json")]) == 1
    assert "No such file" in capsys.readouterr().err


def test_an_image_without_torch_is_one_line_naming_what_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA_8B))
    monkeypatch.setitem(sys.modules, "torch", None)  # as if not installed: importing it raises ImportError
    assert main(["--target", str(config)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: no torch here (") and err.endswith(
        "measuring needs an image with torch 2.4 or later\n"
    )
