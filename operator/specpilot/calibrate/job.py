"""The calibration's objects, rendered with no I/O: a ConfigMap and a Job, both named after the calibration.

The ConfigMap holds what the pod reads (the measuring code, `measure.py`, and the model configs given as
files) and, once `kubectl specpilot calibrate` has collected the pod's output, the measurements under
STEPCOST_KEY: the code and shapes that measured a profile stay beside it. The Job runs the code in the
team's own image (any with torch), on one GPU, hardened as an engine pod is: no root, no capability, no
privilege escalation, no service-account token. It reads no Secret, calls no API and downloads no weights:
its one output is its log, which the plugin reads (so a team that may create Jobs and ConfigMaps, as
Kubernetes' `edit` role may, can calibrate without granting a pod any permission).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specpilot.api.podsecurity import hardened_engine_pod
from specpilot.api.spec.engine_spec import GPU_RESOURCE
from specpilot.wire.names import CALIBRATION_COMPONENT, COMPONENT_LABEL, PART_OF_LABEL

Json = dict[str, Any]

CODE_KEY = "measure.py"
MOUNT = "/calibrate"  # the calibration ConfigMap's inputs
MODELS = "/models"  # model configs read from ConfigMaps of the team's
CONTAINER = "measure"
# The Job's deadline: the measuring budget and this long to pull an image of several GB onto a GPU node.
PULL_SECONDS = 1800
KEEP_SECONDS = 86400  # a finished Job (and its pod's log) stays this long, to collect later
RESOURCES = {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"memory": "16Gi"}}


@dataclass(frozen=True, kw_only=True)
class ConfigMapKey:
    """A model's config.json in a ConfigMap of the namespace's."""

    name: str
    key: str = "config.json"


ModelConfig = str | ConfigMapKey  # the text of a local config.json, carried in the calibration's ConfigMap


@dataclass(frozen=True, kw_only=True)
class Calibration:
    """One measurement of a target model's step costs, and its draft's."""

    name: str
    namespace: str
    image: str  # the team's, with python3 and torch
    code: str  # measure.py's text
    target: ModelConfig
    draft: ModelConfig | None = None
    target_name: str = "target"
    draft_name: str = "draft"
    gpu_resource: str = GPU_RESOURCE
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: Sequence[Json] = ()
    grid: str = "quick"
    max_batch: int | None = None
    budget_seconds: int = 600


def labels() -> dict[str, str]:
    return {COMPONENT_LABEL: CALIBRATION_COMPONENT, PART_OF_LABEL: "specpilot"}


def _metadata(calibration: Calibration) -> Json:
    return {"name": calibration.name, "namespace": calibration.namespace, "labels": labels()}


def _models(calibration: Calibration) -> list[tuple[str, ModelConfig]]:
    given = [("target", calibration.target), ("draft", calibration.draft)]
    return [(role, config) for role, config in given if config is not None]


def render_configmap(calibration: Calibration) -> Json:
    """The calibration's ConfigMap before any measurement: the code and the model configs given as files."""
    data = {CODE_KEY: calibration.code}
    data |= {f"{role}.json": config for role, config in _models(calibration) if isinstance(config, str)}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _metadata(calibration), "data": data}


def _config_path(role: str, config: ModelConfig) -> str:
    return f"{MOUNT}/{role}.json" if isinstance(config, str) else f"{MODELS}/{role}/config.json"


def measure_args(calibration: Calibration) -> list[str]:
    """measure.py's arguments: the configs where the pod mounts them, the names, the grid and the budget."""
    args = []
    for role, config in _models(calibration):
        name = calibration.target_name if role == "target" else calibration.draft_name
        args += [f"--{role}", _config_path(role, config), f"--{role}-name", name]
    args += ["--grid", calibration.grid, "--budget-s", str(calibration.budget_seconds), "--device", "cuda"]
    return args + (["--max-batch", str(calibration.max_batch)] if calibration.max_batch is not None else [])


def _volumes(calibration: Calibration) -> tuple[list[Json], list[Json]]:
    """The pod's volumes and the container's mounts: the calibration's ConfigMap, and each model config
    that a ConfigMap of the team's holds, as `config.json` in a folder of its own."""
    inline = [CODE_KEY, *(f"{role}.json" for role, c in _models(calibration) if isinstance(c, str))]
    volumes: list[Json] = [
        {
            "name": "calibration",
            "configMap": {"name": calibration.name, "items": [{"key": key, "path": key} for key in inline]},
        }
    ]
    mounts: list[Json] = [{"name": "calibration", "mountPath": MOUNT, "readOnly": True}]
    for role, config in _models(calibration):
        if isinstance(config, ConfigMapKey):
            items = [{"key": config.key, "path": "config.json"}]
            volumes.append({"name": f"{role}-config", "configMap": {"name": config.name, "items": items}})
            mounts.append({"name": f"{role}-config", "mountPath": f"{MODELS}/{role}", "readOnly": True})
    return volumes, mounts


def render_job(calibration: Calibration) -> Json:
    """The Job: one pod of the team's image on one GPU, run once (a failed measurement is rerun by hand,
    not retried on the GPU's time)."""
    volumes, mounts = _volumes(calibration)
    gpu = {calibration.gpu_resource: 1}
    container = {
        "name": CONTAINER,
        "image": calibration.image,
        "command": ["python3", f"{MOUNT}/{CODE_KEY}"],
        "args": measure_args(calibration),
        "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}, {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"}],
        "resources": {
            "requests": {**RESOURCES["requests"], **gpu},
            "limits": {**RESOURCES["limits"], **gpu},
        },
        "volumeMounts": mounts,
    }
    pod: Json = {"restartPolicy": "Never", "containers": [container], "volumes": volumes}
    if calibration.node_selector:
        pod["nodeSelector"] = dict(sorted(calibration.node_selector.items()))
    if calibration.tolerations:
        pod["tolerations"] = [dict(t) for t in calibration.tolerations]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(calibration),
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": calibration.budget_seconds + PULL_SECONDS,
            "ttlSecondsAfterFinished": KEEP_SECONDS,
            "template": {"metadata": {"labels": labels()}, "spec": hardened_engine_pod(pod)},
        },
    }


def render(calibration: Calibration) -> tuple[Json, Json]:
    """The ConfigMap, then the Job that mounts it."""
    return render_configmap(calibration), render_job(calibration)
