"""Every pod the operator renders (routers, the rehearsal's load Jobs, and the engines, which it hardens
whoever wrote their template) passes the `restricted` Pod Security Standard where the API server enforces
it; the same engine pod without that hardening does not, so the check is real. So does the calibration
Job's pod, which `kubectl specpilot calibrate` renders."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.cluster.local import Cluster
from tests.unit.controller.specs import load

from specpilot.calibrate import measure
from specpilot.calibrate.job import Calibration, ConfigMapKey, render
from specpilot.controller.core.arm_objects import render_arm
from specpilot.controller.core.rehearsal.manifests import render_step_load
from specpilot.controller.core.router_objects import render_router
from specpilot.wire.names import Arm

pytestmark = pytest.mark.cluster

EXAMPLES = sorted((Path(__file__).resolve().parents[3] / "manifests" / "examples").glob("*.yaml"))
IMAGE = "specpilot/specpilot:dev"


@pytest.fixture(scope="module")
def restricted(api: Cluster) -> Iterator[str]:
    name = f"t-psa-{uuid.uuid4().hex[:8]}"
    api.kubectl("create", "namespace", name)
    api.kubectl("label", "namespace", name, "pod-security.kubernetes.io/enforce=restricted")
    yield name
    api.kubectl("delete", "namespace", name, "--wait=false", check=False)


def _create(api: Cluster, namespace: str, name: str, template: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """A pod of `template`, created in a server-side dry run (admission runs, nothing is stored)."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}}
    manifest = json.dumps({**pod, "spec": template["spec"]})
    return api.kubectl("create", "--dry-run=server", "-n", namespace, "-f", "-", input=manifest, check=False)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda path: path.stem)
def test_router_and_load_pods_are_admitted_under_restricted(api: Cluster, restricted: str, path: Path) -> None:
    ref, spec = load(path)
    router, _ = render_router(ref, spec, image=IMAGE)
    account = router["spec"]["template"]["spec"]["serviceAccountName"]
    api.kubectl("create", "serviceaccount", account, "-n", restricted, check=False)
    job = render_step_load(ref, spec, step=0, router_ip="10.0.0.1", mix="{}", rate=1.0, seconds=60, image=IMAGE)
    for name, template in (("router", router["spec"]["template"]), ("load", job["spec"]["template"])):
        done = _create(api, restricted, name, template)
        assert done.returncode == 0, f"{name} pod of {path.stem} refused: {done.stderr}"


def test_engine_pods_are_admitted_there_and_one_without_the_hardening_is_refused(api: Cluster, restricted: str) -> None:
    for path in EXAMPLES:
        ref, spec = load(path)
        if spec.engine is None:
            continue  # a workload's copy: hardened the same way (tests/unit/controller/test_render.py)
        engine = render_arm(ref, spec, Arm.SPECULATIVE).deployment["spec"]["template"]
        # what the template refers to (its account, its priority class) is left out: admission looks
        # those up before Pod Security, and they are the team's objects, not the pod's security
        pod = {k: v for k, v in engine["spec"].items() if k not in ("serviceAccountName", "priorityClassName")}
        done = _create(api, restricted, "engine", {"spec": pod})
        assert done.returncode == 0, f"engine pod of {path.stem} refused: {done.stderr}"
    ref, spec = load(EXAMPLES[0])
    engine = render_arm(ref, spec, Arm.BASELINE).deployment["spec"]["template"]
    pod = engine["spec"]
    bare = {
        **pod,
        "securityContext": {},
        "containers": [{k: v for k, v in c.items() if k != "securityContext"} for c in pod["containers"]],
    }
    done = _create(api, restricted, "engine", {"spec": bare})
    assert done.returncode != 0 and "restricted" in done.stderr, done.stderr


def test_the_calibration_job_is_valid_and_its_pod_admitted_under_restricted(api: Cluster, restricted: str) -> None:
    calibration = Calibration(
        name="llama-8b",
        namespace=restricted,
        image="vllm/vllm-openai:v0.11.0",
        code=Path(measure.__file__).read_text(),
        target=json.dumps({"hidden_size": 4096}),
        draft=ConfigMapKey(name="llama-1b"),
        node_selector={"pool": "gpu"},
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    )
    for obj in render(calibration):
        done = api.kubectl(
            "create", "--dry-run=server", "-n", restricted, "-f", "-", input=json.dumps(obj), check=False
        )
        assert done.returncode == 0, f"{obj['kind']} refused: {done.stderr}"
    done = _create(api, restricted, "calibration", render(calibration)[1]["spec"]["template"])
    assert done.returncode == 0, f"the calibration pod refused: {done.stderr}"
