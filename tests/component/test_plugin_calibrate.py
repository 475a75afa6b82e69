"""`kubectl specpilot calibrate --dry-run` as a user runs it, a process with no cluster: the manifests it
prints are a ConfigMap and a Job whose pod meets the restricted Pod Security Standard and carries no
secret, and the measuring code it ships runs on a bare Python, without specpilot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml
from tests.restricted import restricted

from specpilot.calibrate import measure

PLUGIN = Path(sys.executable).with_name("kubectl-specpilot")
LLAMA_8B = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
}


def test_the_dry_run_prints_a_restricted_job_and_the_configmap_of_its_inputs(tmp_path: Path) -> None:
    assert PLUGIN.is_file(), "not installed: run `make venv`"
    target = tmp_path / "config.json"
    target.write_text(json.dumps(LLAMA_8B))
    argv = [str(PLUGIN), "calibrate", "llama-8b", "-n", "team-a", "--target-config", str(target)]
    argv += ["--draft-config", "configmap:llama-1b", "--image", "vllm/vllm-openai:v0.11.0", "--dry-run"]
    argv += ["--toleration", "nvidia.com/gpu:NoSchedule", "--node-selector", "pool=h200", "--max-batch", "128"]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "KUBECONFIG": str(tmp_path / "absent")}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    configmap, job = yaml.safe_load_all(done.stdout)
    assert (configmap["kind"], job["kind"], job["apiVersion"]) == ("ConfigMap", "Job", "batch/v1")
    pod = job["spec"]["template"]["spec"]
    assert restricted(pod) == [] and pod["automountServiceAccountToken"] is False
    assert "secret" not in json.dumps(job).lower() and sorted(configmap["data"]) == ["measure.py", "target.json"]
    assert pod["nodeSelector"] == {"pool": "h200"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1
    # The code the pod runs is the package's own, carried whole through YAML.
    assert configmap["data"]["measure.py"] == Path(measure.__file__).read_text()
    assert json.loads(configmap["data"]["target.json"]) == LLAMA_8B


def test_the_shipped_measuring_code_runs_on_a_python_without_specpilot(tmp_path: Path) -> None:
    code = tmp_path / "measure.py"
    code.write_text(Path(measure.__file__).read_text())
    moe = tmp_path / "moe.json"
    moe.write_text(json.dumps({**LLAMA_8B, "num_local_experts": 8}))
    bare = [sys.executable, "-I", "-S"]  # no site-packages: the standard library only
    check = subprocess.run([*bare, "-c", "import specpilot"], capture_output=True, text=True, timeout=30, check=False)
    assert check.returncode == 1 and "No module named 'specpilot'" in check.stderr
    done = subprocess.run(
        [*bare, str(code), "--target", str(moe)], capture_output=True, text=True, timeout=30, check=False
    )
    assert (done.returncode, done.stderr) == (
        1,
        f"error: target {moe}: a mixture-of-experts model: only dense decoders are measured\n",
    )
