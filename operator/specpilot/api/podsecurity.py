"""What no engine pod may ask for, whoever wrote its template: a pilot's `spec.engine.podTemplate`, or the
Deployment `spec.workloadRef` names, whose pod the other arms copy.

Whoever may create a pilot would otherwise get pods out of the operator's own permissions (a confused
deputy): a hostPath volume reaches the node's files, a privileged or root container the node itself. The
checks are the Pod Security Standards' baseline, and of the restricted standard its volume types, no
privilege escalation, no added capability and no root; the operator renders the rest of restricted
itself (`controller.core.render`). A GPU reaches the engine through the device plugin, and shared
memory through an emptyDir of medium Memory, so an engine needs none of what is refused here. Each
check yields the field refused and why, with the fix; `api.validate` and the workload reader make them
problems. `hardened_engine_pod` is the other half: what every pod of an image the operator did not build
runs with (engines, and the calibration Job's pod of the team's own image).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

Json = Mapping[str, Any]
Pod = dict[str, Any]
Refused = tuple[str, str]  # the field, as the API server names it, and why, with the fix

# The restricted standard's volume types: none reaches the node.
VOLUME_TYPES = (
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
)
HOST_NAMESPACES = ("hostNetwork", "hostPID", "hostIPC")
CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")
PROBES = ("startupProbe", "readinessProbe", "livenessProbe")
HOOKS = ("postStart", "preStop")  # a container's lifecycle handlers
HOST_ACTIONS = ("httpGet", "tcpSocket")  # the handlers' actions that take a host
SELINUX_TYPES = ("container_t", "container_init_t", "container_kvm_t", "container_engine_t")
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"

HOST_PATH = (
    "hostPath volumes are refused: they reach the node's files. Keep model weights on a persistentVolumeClaim "
    "(or an image volume of the csi kind) and scratch space, /dev/shm included, on an emptyDir (medium: Memory)"
)
HOST_NAMESPACE = "the node's namespaces are refused: remove it (the engine is reached on its pod's own IP)"
HOST_PORT = "host ports are refused: remove it (the routers reach the engine on its pod's IP)"
PRIVILEGED = "privileged containers are refused: remove it (GPUs come through the device plugin, nvidia.com/gpu)"
ESCALATION = "privilege escalation is refused: remove it (the operator sets false)"
CAPABILITIES = "added capabilities are refused: remove them (the engine needs none; the operator drops ALL)"
ROOT_USER = "running as root is refused: give a non-zero user, or none (the operator then runs the engine as 1000)"
ROOT_ALLOWED = "runAsNonRoot false is refused: remove it (the operator sets true)"
UNCONFINED = "an unconfined profile is refused: remove it (the runtime's default applies) or name a Localhost profile"
UNMASKED = "an unmasked /proc is refused: remove it"
SYSCTLS = "sysctls are refused: remove them (the engine needs none)"
HOST_PROCESS = "Windows host processes are refused: remove it"
SELINUX = f"SELinux user and role are refused, and types other than {', '.join(SELINUX_TYPES)}: remove them"
PROBE_HOST = "a probe's host is refused: remove it (the kubelet probes the pod's own IP)"
HOOK_HOST = (
    "a lifecycle hook's host is refused: the kubelet would call that host from the node; remove it (the hook "
    "then calls the pod's own IP) or make the hook an exec command"
)


class When(StrEnum):
    """What makes a securityContext field's value refused."""

    TRUE = "true"
    FALSE = "false"
    ZERO = "zero"
    SET = "set"  # a non-empty list
    EQUALS = "equals"  # the Forbidden's own value


@dataclass(frozen=True)
class Forbidden:
    """A securityContext field (dotted path) refused when its value passes `when`. `context_refusals`
    reads these, and `api.podschema` turns them into the CRD's CEL rules, so that the operator and the
    API server refuse the same fields with the same words."""

    path: str
    when: When
    message: str
    value: str = ""


CONTEXT_FORBIDDEN = (
    Forbidden("privileged", When.TRUE, PRIVILEGED),
    Forbidden("allowPrivilegeEscalation", When.TRUE, ESCALATION),
    Forbidden("capabilities.add", When.SET, CAPABILITIES),
    Forbidden("runAsUser", When.ZERO, ROOT_USER),
    Forbidden("runAsNonRoot", When.FALSE, ROOT_ALLOWED),
    Forbidden("seccompProfile.type", When.EQUALS, UNCONFINED, "Unconfined"),
    Forbidden("appArmorProfile.type", When.EQUALS, UNCONFINED, "Unconfined"),
    Forbidden("procMount", When.EQUALS, UNMASKED, "Unmasked"),
    Forbidden("sysctls", When.SET, SYSCTLS),
    Forbidden("windowsOptions.hostProcess", When.TRUE, HOST_PROCESS),
)


def pod_refusals(pod: Json, field: str) -> Iterator[Refused]:
    """A whole pod spec at `field`: a workload's pod template, which the other arms copy."""
    for key in HOST_NAMESPACES:
        if pod.get(key) is True:
            yield f"{field}.{key}", HOST_NAMESPACE
    yield from volume_refusals(pod.get("volumes") or (), f"{field}.volumes")
    yield from context_refusals(pod.get("securityContext") or {}, f"{field}.securityContext")
    for key in CONTAINER_LISTS:
        for index, container in enumerate(pod.get(key) or ()):
            yield from container_refusals(container, f"{field}.{key}[{index}]")


def container_refusals(container: Json, field: str) -> Iterator[Refused]:
    """One container's security context, host ports, and the hosts of its probes and lifecycle hooks: the
    kubelet makes those calls from the node, so a host set there would reach whatever the node reaches.
    Refused rather than dropped: without it the call goes to the pod's own IP, which is another check
    than the one the Deployment's owner wrote."""
    yield from context_refusals(container.get("securityContext") or {}, f"{field}.securityContext")
    for index, port in enumerate(container.get("ports") or ()):
        if port.get("hostPort"):
            yield f"{field}.ports[{index}].hostPort", HOST_PORT
    lifecycle = container.get("lifecycle") or {}
    handlers = [(key, container.get(key), PROBE_HOST) for key in PROBES]
    handlers += [(f"lifecycle.{key}", lifecycle.get(key), HOOK_HOST) for key in HOOKS]
    for path, handler, why in handlers:
        for action in HOST_ACTIONS:
            if ((handler or {}).get(action) or {}).get("host"):
                yield f"{field}.{path}.{action}.host", why


def volume_refusals(volumes: Sequence[Json], field: str) -> Iterator[Refused]:
    """Volumes of any type but the restricted standard's."""
    for index, volume in enumerate(volumes):
        for kind in sorted(set(volume) - {"name", *VOLUME_TYPES}):
            yield f"{field}[{index}].{kind}", volume_refused(kind)


def volume_refused(kind: str) -> str:
    """Why a volume of this kind is refused, with the fix."""
    return (
        HOST_PATH
        if kind == "hostPath"
        else f"{kind} volumes are refused: engine pods may use {', '.join(VOLUME_TYPES)} volumes"
    )


def context_refusals(context: Json, field: str) -> Iterator[Refused]:
    """A pod's or a container's securityContext."""
    for forbidden in CONTEXT_FORBIDDEN:
        if _found(context, forbidden):
            yield f"{field}.{forbidden.path}", forbidden.message
    if _selinux_refused(context.get("seLinuxOptions") or {}):
        yield f"{field}.seLinuxOptions", SELINUX


def _found(context: Json, forbidden: Forbidden) -> bool:
    value: Any = context
    for key in forbidden.path.split("."):
        value = value.get(key) if isinstance(value, Mapping) else None
    match forbidden.when:
        case When.TRUE:
            return value is True
        case When.FALSE:
            return value is False
        case When.ZERO:
            return value == 0 and not isinstance(value, bool)
        case When.SET:
            return bool(value)
        case When.EQUALS:
            return bool(value == forbidden.value)


def _selinux_refused(options: Json) -> bool:
    kind = options.get("type")
    return bool(options.get("user") or options.get("role")) or (bool(kind) and kind not in SELINUX_TYPES)


def annotation_refusals(annotations: Mapping[str, str], field: str) -> Iterator[Refused]:
    """Pod annotations that unconfine a container (AppArmor's, before its field)."""
    for key, value in annotations.items():
        if key.startswith(APPARMOR_ANNOTATION) and value == "unconfined":
            yield f"{field}[{key}]", UNCONFINED


# What every engine pod runs with, whoever wrote its template (the restricted Pod Security Standard but
# a read-only root, which vLLM's caches need writable): no capability, no privilege escalation (GPUs come
# through the device plugin), the runtime's seccomp profile, and no root. vLLM's official image runs as
# root and keeps its caches in the home directory, so a pod whose template names no user runs as
# ENGINE_USER with HOME on an emptyDir of its own, and its volumes (a model cache a workload writes to)
# are made writable to that user's group the way Kubernetes does it, by fsGroup.
ENGINE_SECURITY = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
ENGINE_USER = 1000
ENGINE_HOME = "/home/engine"
HOME_VOLUME = "specpilot-home"


def hardened_engine_pod(pod: Mapping[str, Any]) -> Pod:
    """The engine pod as deployed: hardened as ENGINE_SECURITY says, and with no service-account token
    (the engine calls no Kubernetes API) unless its template asks for one. The checks above have refused
    whatever would undo this. Outside the config hash, which covers what the engine runs."""
    context = {**pod.get("securityContext", {}), "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    homed = "runAsUser" not in context  # the operator picks the user, so it gives the home too
    if homed:
        context["runAsUser"] = ENGINE_USER
        if "fsGroup" not in context:
            context |= {"fsGroup": ENGINE_USER, "fsGroupChangePolicy": "OnRootMismatch"}
    hardened = {
        **pod,
        "securityContext": context,
        "automountServiceAccountToken": pod.get("automountServiceAccountToken") is True,
    }
    for key in ("initContainers", "containers"):
        if key in pod:
            hardened[key] = [_hardened_container(c, homed=homed) for c in pod[key]]
    if any(_homed(c) for key in ("initContainers", "containers") for c in hardened.get(key, ())):
        others = [v for v in pod.get("volumes", []) if v.get("name") != HOME_VOLUME]
        hardened["volumes"] = [*others, {"name": HOME_VOLUME, "emptyDir": {}}]
    return hardened


def _hardened_container(container: Mapping[str, Any], *, homed: bool) -> Pod:
    """A container under ENGINE_SECURITY; given HOME on the pod's home volume where it runs as
    ENGINE_USER and sets no HOME of its own."""
    context = {**container.get("securityContext", {}), **ENGINE_SECURITY}
    out = {**container, "securityContext": context}
    own_home = any(var.get("name") == "HOME" for var in container.get("env", []))
    if homed and "runAsUser" not in context and not own_home:
        out["env"] = [*container.get("env", []), {"name": "HOME", "value": ENGINE_HOME}]
        mounts = [m for m in container.get("volumeMounts", []) if m.get("name") != HOME_VOLUME]
        out["volumeMounts"] = [*mounts, {"name": HOME_VOLUME, "mountPath": ENGINE_HOME}]
    return out


def _homed(container: Mapping[str, Any]) -> bool:
    return any(m.get("name") == HOME_VOLUME for m in container.get("volumeMounts", []))
