"""`kubectl specpilot calibrate`: flags to a Job, the dry run, and collecting the pod's measurements into
the calibration's ConfigMap (against a fake of the plugin's client)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from specpilot.calibrate.measure import MARKER
from specpilot.plugin.calibrate import measurements, wait
from specpilot.plugin.client import PluginError
from specpilot.plugin.kubectl import main

CONFIG = {
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
}
DOCUMENT = {
    "gpu": "NVIDIA H200",
    "torch": "2.11.0",
    "params": {"target": 7504920576},
    "elapsed_s": 41.0,
    "rows": [
        {"model": "target", "batch": 1, "q": 1, "ctx": 1024, "graph": True, "ms": 5.5, "ms_min": 5.4, "ms_p90": 5.6}
    ],
}
LOG = f"target batch 1 q 1 ctx 1024: 5.5\n{MARKER}{json.dumps(DOCUMENT)}\n"


class FakeClient:
    """The calls `calibrate` makes, answered from a script: Job statuses in turn, then the pod's log."""

    def __init__(self, statuses: list[dict[str, Any]], log: str = LOG) -> None:
        self.namespace = "team-a"
        self.statuses, self.log = statuses, log
        self.created: list[dict[str, Any]] = []
        self.patched: dict[str, dict[str, str]] = {}

    def create(self, obj: dict[str, Any]) -> None:
        self.created.append(obj)

    def job(self, name: str) -> dict[str, Any]:
        return {"metadata": {"name": name}, "status": self.statuses.pop(0)}

    def job_log(self, name: str) -> str:
        return self.log

    def patch_config_map(self, name: str, data: dict[str, str]) -> None:
        self.patched[name] = data


def unreachable(**_: Any) -> Any:
    raise PluginError("no kubeconfig at /nowhere: pass --kubeconfig or set KUBECONFIG")


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "llama" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(CONFIG))
    return path


def calibrate(config: Path, *extra: str) -> list[str]:
    return ["calibrate", "llama-8b", "--target-config", str(config), "--image", "vllm/vllm-openai:v0.11.0", *extra]


@pytest.mark.parametrize(("flags", "namespace"), [([], "default"), (["-n", "team-a"], "team-a")])
def test_a_dry_run_needs_no_cluster_and_prints_the_configmap_and_the_job(
    config: Path, capsys: pytest.CaptureFixture[str], flags: list[str], namespace: str
) -> None:
    assert main([*calibrate(config.parent, "--dry-run"), *flags], connect_to=unreachable) == 0
    out = capsys.readouterr().out
    configmap, job = yaml.safe_load_all(out)
    assert out.startswith(f"# Apply these, then `kubectl specpilot calibrate llama-8b -n {namespace} --collect`")
    assert [configmap["kind"], job["kind"]] == ["ConfigMap", "Job"]
    assert {configmap["metadata"]["namespace"], job["metadata"]["namespace"]} == {namespace}
    assert json.loads(configmap["data"]["target.json"]) == CONFIG  # a model folder: its config.json


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--image", ""], "calibrate needs --target-config and --image"),
        (["--toleration", "gpu:Sometimes"], "--toleration 'gpu:Sometimes': expected KEY[=VALUE][:EFFECT]"),
        (["--node-selector", "=h200"], "--node-selector takes KEY=VALUE"),
        (["--draft-config", "/nowhere/config.json"], "--draft-config /nowhere/config.json: [Errno 2]"),
        (["--draft-config", "configmap:/config.json"], "--draft-config 'configmap:/config.json': configmap:NAME"),
    ],
    ids=["no-image", "bad-toleration", "bad-selector", "no-draft-file", "no-configmap-name"],
)
def test_wrong_flags_are_one_line_and_exit_1(
    config: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    assert main([*calibrate(config, "--dry-run"), *flags], connect_to=unreachable) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message}") and err.count("\n") == 1, err


def test_a_config_that_cannot_be_measured_is_refused_before_anything_is_created(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config.write_text(json.dumps({**CONFIG, "num_local_experts": 8}))
    fake = FakeClient([])
    assert main(calibrate(config), connect_to=lambda **_: fake) == 1
    assert "only dense decoders are measured" in capsys.readouterr().err and fake.created == []


def test_calibrate_creates_waits_and_collects_the_measurements_into_the_configmap(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeClient([{"succeeded": 1}])
    assert main(calibrate(config, "--draft-config", "configmap:llama-1b"), connect_to=lambda **_: fake) == 0
    assert [(o["kind"], o["metadata"]["name"], o["metadata"]["namespace"]) for o in fake.created] == [
        ("ConfigMap", "llama-8b", "team-a"),
        ("Job", "llama-8b", "team-a"),
    ]
    assert json.loads(fake.patched["llama-8b"]["stepcost.json"]) == DOCUMENT
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == ["configmap/llama-8b created", "job.batch/llama-8b created"]
    assert lines[-1] == "configmap/llama-8b: stepcost.json written (1 of 1 steps measured, target on NVIDIA H200, 41 s)"


def test_collect_waits_for_a_job_created_before_and_creates_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeClient([{"succeeded": 1}])
    assert main(["calibrate", "llama-8b", "--collect"], connect_to=lambda **_: fake) == 0
    assert fake.created == [] and "stepcost.json" in fake.patched["llama-8b"]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_wait_polls_until_the_job_succeeds() -> None:
    fake, clock = FakeClient([{"active": 1}, {"active": 1}, {"succeeded": 1}]), Clock()
    wait(fake, "llama-8b", timeout=60, sleep=clock.sleep, clock=clock)  # type: ignore[arg-type]
    assert fake.statuses == [] and clock.now == 10.0


@pytest.mark.parametrize(
    ("statuses", "message"),
    [
        (
            [{"failed": 1, "conditions": [{"type": "Failed", "status": "True", "message": "Job was active longer"}]}],
            "job 'llama-8b' failed: Job was active longer; its log ends: Traceback | "
            "ModuleNotFoundError: No module named 'torch'",
        ),
        ([{"active": 1}] * 20, "job 'llama-8b' has not finished in 60 s: collect later with --collect"),
    ],
    ids=["failed", "timed-out"],
)
def test_wait_says_why_a_job_gave_nothing(statuses: list[dict[str, Any]], message: str) -> None:
    fake, clock = FakeClient(statuses, log="Traceback\nModuleNotFoundError: No module named 'torch'\n"), Clock()
    with pytest.raises(PluginError) as raised:
        wait(fake, "llama-8b", timeout=60, sleep=clock.sleep, clock=clock)  # type: ignore[arg-type]
    assert str(raised.value).endswith(message)


@pytest.mark.parametrize(
    ("log", "message"),
    [
        ("loading\nKilled\n", "the pod printed no measurements; its log ends: loading | Killed"),
        (f"{MARKER}{json.dumps({**DOCUMENT, 'rows': []})}\n", "the measurements cannot be used: no row was measured"),
    ],
)
def test_a_log_without_usable_measurements_is_an_error(log: str, message: str) -> None:
    with pytest.raises(PluginError, match=message):
        measurements(log)


def test_the_last_measurements_printed_win() -> None:
    later = {**DOCUMENT, "gpu": "NVIDIA L4"}
    assert measurements(f"{MARKER}{json.dumps(DOCUMENT)}\n{MARKER}{json.dumps(later)}\n")["gpu"] == "NVIDIA L4"
