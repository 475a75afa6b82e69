"""Pure translation between pod specs and local processes, and back into pod status.

No I/O here: the agent gathers observations and this module decides argv, environment, probe
targets and the status document that the API server receives.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Json = dict[str, Any]

DEFAULT_ENTRYPOINT = ("specpilot",)
REASON_NOT_RUNNABLE = "ImageNotRunnable"
REASON_CRASH_LOOP = "CrashLoopBackOff"
REASON_BAD_CONFIG = "CreateContainerConfigError"

_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def image_repository(image: str) -> str:
    """`registry/repo:tag@digest` -> `registry/repo`."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)
    if ":" in last[-1]:
        name = name[: name.rfind(":")]
    return name


def is_runnable(image: str, repositories: Sequence[str]) -> bool:
    """Whether this node can run `image`: only the project's own image, whatever the tag."""
    return image_repository(image) in repositories


def not_runnable_message(image: str, repositories: Sequence[str]) -> str:
    return (
        f"image {image!r} cannot run on this local node: it runs only the project's own image "
        f"({', '.join(repositories)}) as local processes; use one of those or a cluster with a container runtime"
    )


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes `$(VAR)` expansion: unknown references stay as written, `$$` escapes `$`."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return _VAR.sub(sub, text)


@dataclass(frozen=True)
class PodRefs:
    """The downward-API values a pod can reference."""

    name: str
    namespace: str
    uid: str
    node_name: str
    service_account: str
    pod_ip: str
    host_ip: str

    def field(self, path: str) -> str:
        values = {
            "metadata.name": self.name,
            "metadata.namespace": self.namespace,
            "metadata.uid": self.uid,
            "spec.nodeName": self.node_name,
            "spec.serviceAccountName": self.service_account,
            "status.podIP": self.pod_ip,
            "status.podIPs": self.pod_ip,
            "status.hostIP": self.host_ip,
            "status.hostIPs": self.host_ip,
        }
        if path not in values:
            raise ValueError(f"fieldRef {path!r} is not supported by the local node")
        return values[path]


def container_env(
    container: Json,
    refs: PodRefs,
    *,
    lookup: Any,
    base: Mapping[str, str],
) -> dict[str, str]:
    """Environment for one container: base, envFrom, then env in order (later wins, `$(VAR)` expanded).

    `lookup(kind, name, key | None, optional)` returns a str (one key) or a dict (whole object) for
    configMap/secret references, or None when absent and optional; it raises when a required one is absent.
    """
    env: dict[str, str] = dict(base)
    env.update({"HOSTNAME": refs.name, "POD_IP": refs.pod_ip, "POD_NAME": refs.name, "POD_NAMESPACE": refs.namespace})
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        for kind in ("configMapRef", "secretRef"):
            if kind in source:
                ref = source[kind]
                data = lookup(kind, ref["name"], None, bool(ref.get("optional")))
                env.update({prefix + k: v for k, v in (data or {}).items()})
    for var in container.get("env") or []:
        name = var["name"]
        if "value" in var:
            env[name] = expand(str(var["value"]), env)
            continue
        value_from = var.get("valueFrom") or {}
        if "fieldRef" in value_from:
            env[name] = refs.field(value_from["fieldRef"]["fieldPath"])
        elif "configMapKeyRef" in value_from or "secretKeyRef" in value_from:
            kind = "configMapKeyRef" if "configMapKeyRef" in value_from else "secretKeyRef"
            ref = value_from[kind]
            value = lookup(kind, ref["name"], ref["key"], bool(ref.get("optional")))
            if value is not None:
                env[name] = value
        elif "resourceFieldRef" in value_from:
            env[name] = "0"
        else:
            env[name] = ""
    return env


def container_argv(container: Json, env: Mapping[str, str]) -> list[str]:
    """The process argv: command (else the image entrypoint `specpilot`) plus args, expanded."""
    command = list(container.get("command") or DEFAULT_ENTRYPOINT)
    args = list(container.get("args") or [])
    return [expand(str(part), env) for part in command + args]


def resolve_port(port: int | str, container: Json) -> int:
    """A probe's port: a number or the name of one of the container's ports."""
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for p in container.get("ports") or []:
        if p.get("name") == port:
            return int(p["containerPort"])
    raise ValueError(f"container {container.get('name')!r} has no port named {port!r}")


@dataclass(frozen=True)
class Probe:
    """A readiness or liveness probe, with kubelet defaults."""

    kind: Literal["http", "tcp", "exec"]
    target: str  # URL, host:port or shell-free argv joined by NUL
    initial_delay: float
    period: float
    timeout: float
    success_threshold: int
    failure_threshold: int


def parse_probe(spec: Json | None, container: Json, pod_ip: str) -> Probe | None:
    """Translate a probe spec; None when the container has none."""
    if not spec:
        return None
    common = {
        "initial_delay": float(spec.get("initialDelaySeconds", 0)),
        "period": float(spec.get("periodSeconds", 10)),
        "timeout": float(spec.get("timeoutSeconds", 1)),
        "success_threshold": int(spec.get("successThreshold", 1)),
        "failure_threshold": int(spec.get("failureThreshold", 3)),
    }
    if "httpGet" in spec:
        http = spec["httpGet"]
        scheme = str(http.get("scheme", "HTTP")).lower()
        host = http.get("host") or pod_ip
        path = http.get("path", "/")
        url = f"{scheme}://{host}:{resolve_port(http['port'], container)}{path}"
        return Probe(kind="http", target=url, **common)  # type: ignore[arg-type]
    if "tcpSocket" in spec:
        tcp = spec["tcpSocket"]
        target = f"{tcp.get('host') or pod_ip}:{resolve_port(tcp['port'], container)}"
        return Probe(kind="tcp", target=target, **common)  # type: ignore[arg-type]
    if "exec" in spec:
        return Probe(kind="exec", target="\0".join(spec["exec"]["command"]), **common)  # type: ignore[arg-type]
    raise ValueError(f"container {container.get('name')!r}: unsupported probe {sorted(spec)}")


@dataclass(frozen=True)
class ContainerState:
    """What the agent observed of one container."""

    name: str
    image: str
    state: Literal["waiting", "running", "terminated"]
    reason: str = ""
    message: str = ""
    pid: int | None = None
    exit_code: int | None = None
    started_at: str | None = None
    finished_at: str | None = None
    ready: bool = False
    restart_count: int = 0
    last_terminated: Json | None = None


def restart_wanted(policy: str, exit_code: int) -> bool:
    """Whether a container that exited with `exit_code` is restarted under the pod's restartPolicy."""
    return policy == "Always" or (policy == "OnFailure" and exit_code != 0)


def pod_phase(policy: str, containers: Sequence[ContainerState]) -> str:
    """The pod phase from its containers, as the kubelet computes it."""
    if any(c.state == "running" for c in containers):
        return "Running"
    if containers and all(c.state == "terminated" for c in containers):
        if all(c.exit_code == 0 for c in containers):
            return "Succeeded"
        return "Failed"
    if policy != "Always" and any(c.state == "terminated" for c in containers):
        return "Running" if any(c.state == "waiting" for c in containers) else "Failed"
    return "Pending"


def _condition(kind: str, ok: bool, now: str, previous: Mapping[str, Json], reason: str = "") -> Json:
    status = "True" if ok else "False"
    before = previous.get(kind)
    since = before["lastTransitionTime"] if before and before.get("status") == status else now
    cond: Json = {"type": kind, "status": status, "lastProbeTime": None, "lastTransitionTime": since}
    if reason and not ok:
        cond["reason"] = reason
    return cond


def _container_status(c: ContainerState) -> Json:
    state: Json
    if c.state == "running":
        state = {"running": {"startedAt": c.started_at}}
    elif c.state == "terminated":
        state = {
            "terminated": {
                "exitCode": c.exit_code,
                "reason": c.reason or ("Completed" if c.exit_code == 0 else "Error"),
                "startedAt": c.started_at,
                "finishedAt": c.finished_at,
            }
        }
    else:
        state = {"waiting": {"reason": c.reason, **({"message": c.message} if c.message else {})}}
    status: Json = {
        "name": c.name,
        "image": c.image,
        "imageID": "",
        "containerID": f"local://{c.pid}" if c.pid else "",
        "ready": c.ready,
        "started": c.state == "running",
        "restartCount": c.restart_count,
        "state": state,
        "lastState": {"terminated": c.last_terminated} if c.last_terminated else {},
    }
    return status


def pod_status(
    *,
    policy: str,
    containers: Sequence[ContainerState],
    pod_ip: str,
    host_ip: str,
    start_time: str,
    now: str,
    previous_conditions: Sequence[Json] = (),
) -> Json:
    """The `status` document for a pod: phase, conditions, IPs and container statuses."""
    previous = {c["type"]: c for c in previous_conditions}
    all_ready = bool(containers) and all(c.ready for c in containers)
    not_ready_reason = "" if all_ready else "ContainersNotReady"
    phase = pod_phase(policy, containers)
    return {
        "phase": phase,
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": start_time,
        "conditions": [
            _condition("PodReadyToStartContainers", True, now, previous),
            _condition("Initialized", True, now, previous),
            _condition("Ready", all_ready, now, previous, not_ready_reason),
            _condition("ContainersReady", all_ready, now, previous, not_ready_reason),
            _condition("PodScheduled", True, now, previous),
        ],
        "containerStatuses": [_container_status(c) for c in containers],
    }


def conditions_overwritten(served: Json, written: Json) -> bool:
    """Whether the API serves a pod condition other than this node last wrote: another writer changed
    it (the node lifecycle controller marks a node's pods not Ready while its Lease has lapsed)."""

    def states(status: Json) -> dict[str, str]:
        return {c.get("type", ""): c.get("status", "") for c in status.get("conditions") or []}

    now = states(served)
    return any(now.get(kind) != state for kind, state in states(written).items())
