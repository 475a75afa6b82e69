"""The API server itself refuses a pilot whose pod template asks for the node (the CRD's CEL rules from
api.podsecurity), naming the field and the fix, before any operator sees it; a template asking for
nothing of the kind is admitted, so the refusals are the rules' and not the pilot's."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from specpilot.api.podsecurity import HOST_PATH, PRIVILEGED, ROOT_USER
from tests.cluster.local import ROOT, Cluster
from tests.cluster.operator_process import apply_crd

pytestmark = pytest.mark.cluster

MINIMAL = yaml.safe_load((ROOT / "manifests" / "examples" / "minimal.yaml").read_text())
TEMPLATE = "spec.engine.podTemplate"
CLEAN = {
    "securityContext": {"runAsUser": 1000},
    "volumes": [{"name": "weights", "persistentVolumeClaim": {"claimName": "weights"}}],
    "container": {"securityContext": {"readOnlyRootFilesystem": False}},
}


@pytest.fixture(scope="module", autouse=True)
def crd(cluster: Cluster) -> None:
    apply_crd(cluster)


def pilot(template: dict[str, Any]) -> str:
    body = copy.deepcopy(MINIMAL)
    body["spec"]["engine"]["podTemplate"] = template
    return yaml.safe_dump(body)


def dry_run(cluster: Cluster, namespace: str, template: dict[str, Any]) -> tuple[int, str]:
    out = cluster.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-", input=pilot(template), check=False)
    return out.returncode, out.stderr


def test_a_template_asking_for_nothing_of_the_node_is_admitted(cluster: Cluster, namespace: str) -> None:
    code, stderr = dry_run(cluster, namespace, CLEAN)
    assert code == 0, stderr


@pytest.mark.parametrize(
    ("template", "field", "why"),
    [
        ({"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}, "volumes[0].hostPath", HOST_PATH),
        (
            {**CLEAN, "volumes": [*CLEAN["volumes"], {"name": "n", "nfs": {"server": "s", "path": "/"}}]},
            "volumes[1].nfs",
            "nfs volumes are refused",
        ),
        ({"container": {"securityContext": {"privileged": True}}}, "container.securityContext.privileged", PRIVILEGED),
        ({"securityContext": {"runAsUser": 0}}, "securityContext.runAsUser", ROOT_USER),
        ({"container": {"securityContext": {"runAsUser": 0}}}, "container.securityContext.runAsUser", ROOT_USER),
    ],
    ids=["hostPath", "nfs", "privileged", "pod-root", "container-root"],
)
def test_the_api_server_refuses_naming_the_field_and_the_fix(
    cluster: Cluster, namespace: str, template: dict[str, Any], field: str, why: str
) -> None:
    code, stderr = dry_run(cluster, namespace, template)
    assert code != 0
    assert f"{TEMPLATE}.{field}" in stderr and why in stderr, stderr


@pytest.mark.parametrize("key", ["hostNetwork", "hostPID", "hostIPC"])
def test_the_nodes_namespaces_are_no_field_of_the_template(cluster: Cluster, namespace: str, key: str) -> None:
    # kubectl asks for strict field validation: an unknown field is refused, naming it
    code, stderr = dry_run(cluster, namespace, {**CLEAN, key: True})
    assert code != 0
    assert f'unknown field "{TEMPLATE}.{key}"' in stderr, stderr
