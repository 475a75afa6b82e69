"""The calibration's ConfigMap and Job: what the pod runs and mounts, where it runs, and that it runs as
the restricted Pod Security Standard asks, with no secret, no token and no permission."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specpilot.calibrate import measure
from specpilot.calibrate.job import MOUNT, PULL_SECONDS, Calibration, ConfigMapKey, render
from specpilot.wire.names import COMPONENT_LABEL
from tests.restricted import restricted

CODE = Path(measure.__file__).read_text()
TARGET = json.dumps({"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32})
TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def calibration(**changes: Any) -> Calibration:
    given: dict[str, Any] = {
        "name": "llama-8b",
        "namespace": "team-a",
        "image": "registry.example/vllm-openai:v0.11.0",
        "code": CODE,
        "target": TARGET,
        "draft": ConfigMapKey(name="llama-1b", key="draft.json"),
        "draft_name": "llama-3.2-1b",
        "node_selector": {"pool": "h200"},
        "tolerations": [TOLERATION],
    }
    return Calibration(**(given | changes))


def pod_of(job: dict[str, Any]) -> dict[str, Any]:
    return dict(job["spec"]["template"]["spec"])


def mounted_files(pod: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Each file the container sees from a ConfigMap: its path -> (ConfigMap, key)."""
    (container,) = pod["containers"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    files = {}
    for mount in container["volumeMounts"]:
        source = volumes[mount["name"]].get("configMap")
        for item in (source or {}).get("items", []):
            files[f"{mount['mountPath']}/{item['path']}"] = (source["name"], item["key"])
    return files


def test_the_pod_runs_the_measuring_code_on_the_configs_it_mounts() -> None:
    configmap, job = render(calibration())
    assert configmap["metadata"]["name"] == job["metadata"]["name"] == "llama-8b"
    assert configmap["data"] == {"measure.py": CODE, "target.json": TARGET}  # the draft's is the team's ConfigMap
    pod = pod_of(job)
    (container,) = pod["containers"]
    assert container["image"] == "registry.example/vllm-openai:v0.11.0"
    assert container["command"] == ["python3", f"{MOUNT}/measure.py"]
    files = mounted_files(pod)
    assert files[f"{MOUNT}/measure.py"] == ("llama-8b", "measure.py")
    # measure.py's own parser reads the arguments, and every config it is given is mounted where it looks.
    args = measure._arguments(container["args"])
    assert files[args.target] == ("llama-8b", "target.json")
    assert files[args.draft] == ("llama-1b", "draft.json")
    assert (args.target_name, args.draft_name, args.grid, args.device) == ("target", "llama-3.2-1b", "quick", "cuda")


def test_the_grid_batches_and_budget_reach_the_pod_and_the_deadline() -> None:
    _, job = render(calibration(draft=None, grid="standard", max_batch=64, budget_seconds=300))
    args = measure._arguments(pod_of(job)["containers"][0]["args"])
    assert (args.draft, args.grid, args.max_batch, args.budget_s) == (None, "standard", 64, 300.0)
    assert job["spec"]["activeDeadlineSeconds"] == 300 + PULL_SECONDS
    assert job["spec"]["backoffLimit"] == 0  # a failed measurement is not retried on the GPU's time


@pytest.mark.parametrize("resource", ["nvidia.com/gpu", "nvidia.com/mig-3g.71gb"])
def test_one_gpu_of_the_resource_asked_for_on_the_nodes_asked_for(resource: str) -> None:
    pod = pod_of(render(calibration(gpu_resource=resource))[1])
    resources = pod["containers"][0]["resources"]
    assert resources["limits"][resource] == resources["requests"][resource] == 1
    assert pod["nodeSelector"] == {"pool": "h200"} and pod["tolerations"] == [TOLERATION]
    assert "nodeSelector" not in pod_of(render(calibration(node_selector={}, tolerations=[]))[1])


def key_paths(value: Any, path: str = "") -> list[tuple[str, Any]]:
    """Every key path of a JSON value, with its value."""
    if isinstance(value, dict):
        return [
            pair for key, item in value.items() for pair in [(f"{path}.{key}", item), *key_paths(item, f"{path}.{key}")]
        ]
    if isinstance(value, list):
        return [pair for index, item in enumerate(value) for pair in key_paths(item, f"{path}[{index}]")]
    return []


def test_the_pod_meets_restricted_and_carries_no_secret_token_or_permission() -> None:
    configmap, job = render(calibration())
    pod = pod_of(job)
    assert restricted(pod) == []
    assert pod["automountServiceAccountToken"] is False and "serviceAccountName" not in pod
    assert pod["securityContext"]["runAsUser"] != 0
    keys = {path.rsplit(".", 1)[-1] for path, _ in key_paths([configmap, job])}
    assert not keys & {"secret", "secretKeyRef", "secretRef", "imagePullSecrets", "projected", "hostPath"}
    assert {job["metadata"]["labels"][COMPONENT_LABEL], configmap["metadata"]["labels"][COMPONENT_LABEL]} == {
        "calibration"
    }
