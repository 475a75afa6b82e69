"""A pilot's pod template may not ask for what no engine pod may: each refusal names its field and the fix,
and what an engine legitimately needs passes."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from specpilot.api import validate
from specpilot.api.podsecurity import (
    CAPABILITIES,
    ESCALATION,
    HOST_PATH,
    PRIVILEGED,
    PROBE_HOST,
    ROOT_ALLOWED,
    ROOT_USER,
    SELINUX,
    SYSCTLS,
    UNCONFINED,
    UNMASKED,
)

BASE: dict[str, Any] = {
    "apiVersion": "specpilot.io/v1alpha1",
    "kind": "SpeculationPilot",
    "metadata": {"name": "pilot"},
    "spec": {
        "engine": {"image": "vllm/vllm-openai:v0.33.0", "model": "Qwen/Qwen3-8B"},
        "speculative": {"draft": {"model": "Qwen/Qwen3-0.6B"}},
        "scopes": [{"name": "chat"}],
    },
}
TEMPLATE = "spec.engine.podTemplate"


def pilot(template: dict[str, Any]) -> dict[str, Any]:
    body = copy.deepcopy(BASE)
    body["spec"]["engine"]["podTemplate"] = template
    return body


def container(context: dict[str, Any]) -> dict[str, Any]:
    return {"container": {"securityContext": context}}


REFUSED = [
    ("hostPath", {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}, "volumes[0].hostPath", HOST_PATH),
    (
        "nfs",
        {"volumes": [{"name": "m", "emptyDir": {}}, {"name": "n", "nfs": {"server": "s", "path": "/"}}]},
        "volumes[1].nfs",
        "nfs volumes are refused: engine pods may use configMap, csi,",
    ),
    ("pod-root", {"securityContext": {"runAsUser": 0}}, "securityContext.runAsUser", ROOT_USER),
    ("pod-root-allowed", {"securityContext": {"runAsNonRoot": False}}, "securityContext.runAsNonRoot", ROOT_ALLOWED),
    ("container-root", container({"runAsUser": 0}), "container.securityContext.runAsUser", ROOT_USER),
    (
        "container-root-allowed",
        container({"runAsNonRoot": False}),
        "container.securityContext.runAsNonRoot",
        ROOT_ALLOWED,
    ),
    ("privileged", container({"privileged": True}), "container.securityContext.privileged", PRIVILEGED),
    (
        "escalation",
        container({"allowPrivilegeEscalation": True}),
        "container.securityContext.allowPrivilegeEscalation",
        ESCALATION,
    ),
    (
        "capabilities",
        container({"capabilities": {"add": ["SYS_ADMIN"]}}),
        "container.securityContext.capabilities.add",
        CAPABILITIES,
    ),
    (
        "seccomp",
        {"securityContext": {"seccompProfile": {"type": "Unconfined"}}},
        "securityContext.seccompProfile.type",
        UNCONFINED,
    ),
    (
        "container-seccomp",
        container({"seccompProfile": {"type": "Unconfined"}}),
        "container.securityContext.seccompProfile.type",
        UNCONFINED,
    ),
    (
        "apparmor",
        container({"appArmorProfile": {"type": "Unconfined"}}),
        "container.securityContext.appArmorProfile.type",
        UNCONFINED,
    ),
    (
        "apparmor-annotation",
        {"annotations": {"container.apparmor.security.beta.kubernetes.io/vllm": "unconfined"}},
        "annotations[container.apparmor.security.beta.kubernetes.io/vllm]",
        UNCONFINED,
    ),
    ("proc", container({"procMount": "Unmasked"}), "container.securityContext.procMount", UNMASKED),
    (
        "sysctls",
        {"securityContext": {"sysctls": [{"name": "kernel.shm_rmid_forced", "value": "0"}]}},
        "securityContext.sysctls",
        SYSCTLS,
    ),
    (
        "selinux",
        {"securityContext": {"seLinuxOptions": {"type": "spc_t"}}},
        "securityContext.seLinuxOptions",
        SELINUX,
    ),
    (
        "probe-host",
        {"container": {"livenessProbe": {"httpGet": {"host": "169.254.169.254", "path": "/", "port": 80}}}},
        "container.livenessProbe.httpGet.host",
        PROBE_HOST,
    ),
]


@pytest.mark.parametrize(("template", "field", "says"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_a_template_asking_for_what_no_engine_pod_may_is_refused(
    template: dict[str, Any], field: str, says: str
) -> None:
    problems = validate(pilot(template))
    assert [p.field for p in problems] == [f"{TEMPLATE}.{field}"], problems
    assert problems[0].message.startswith(says), problems[0].message


def test_what_an_engine_legitimately_needs_passes() -> None:
    template = {
        "securityContext": {
            "runAsUser": 1000,
            "runAsGroup": 1000,
            "fsGroup": 1000,
            "runAsNonRoot": True,
            "seccompProfile": {"type": "Localhost", "localhostProfile": "vllm.json"},
            "seLinuxOptions": {"type": "container_t", "level": "s0:c1,c2"},
        },
        "volumes": [
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}},
            {"name": "models", "persistentVolumeClaim": {"claimName": "models", "readOnly": True}},
            {"name": "token", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}},
            {"name": "config", "configMap": {"name": "vllm"}},
        ],
        "container": {
            "securityContext": {
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
                "readOnlyRootFilesystem": True,
            },
            "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
            "startupProbe": {"httpGet": {"path": "/health", "port": "http"}},
        },
        "annotations": {"container.apparmor.security.beta.kubernetes.io/vllm": "runtime/default"},
        "automountServiceAccountToken": True,
        "allowServiceAccountToken": True,  # a ServiceAccount made for the engine, confirmed
        "serviceAccountName": "vllm",
    }
    assert validate(pilot(template)) == []
