"""What a pilot's objects should look like: `render(pilot) -> objects`, with no I/O.

Every arm runs the same frozen engine, rendered by one function; the speculative arm adds exactly
`--speculative-config`, and the alternative arm changes only what its spec names (replicas, tensor
parallel size, extraArgs). There is no mock branch: a mock engine is an engine whose command is
`specpilot mock-vllm`. Objects are plain JSON-ready dicts in server-side-apply form, each owned by
the pilot, so deleting the pilot collects them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specpilot.api.pilot import API_VERSION, KIND
from specpilot.api.podsecurity import hardened_engine_pod
from specpilot.api.spec import GPU_RESOURCE, Draft, Engine, PodTemplate, SpeculationPilotSpec, Toleration
from specpilot.controller.core.workload import Workload, copied_metadata, copied_pod, tensor_parallel_size
from specpilot.wire.batchschedule import VllmRelease
from specpilot.wire.names import (
    ARM_LABEL,
    COMPONENT_LABEL,
    CONFIG_HASH_ANNOTATION,
    ENGINE_COMPONENT,
    ENGINE_PORT,
    EVIDENCE_KEY,
    EVIDENCE_LABEL,
    REHEARSAL_LOAD_COMPONENT,
    REHEARSAL_RESTART_COMPONENT,
    REHEARSAL_ROUTER_COMPONENT,
    ROUTER_ADMIN_PORT,
    ROUTER_COMPONENT,
    ROUTER_PORT,
    Arm,
    arm_name,
    arm_selector,
    evidence_name,
    pilot_labels,
    rehearsal_pilot,
    rehearsal_restart_name,
    rehearsal_step_name,
    router_name,
    router_selector,
    routes_name,
)
from specpilot.wire.routerconfig import RouterConfig
from specpilot.wire.routes import RoutingTable, render_routes

Json = dict[str, Any]

ENGINE_CONTAINER = "vllm"
ROUTER_CONTAINER = "router"
# A pod may take this long to become ready before its Deployment reports ProgressDeadlineExceeded:
# loading a large model and capturing CUDA graphs takes minutes.
ENGINE_PROGRESS_DEADLINE_SECONDS = 1800
ROUTER_PROGRESS_DEADLINE_SECONDS = 300
ROUTER_DRAIN_SECONDS = 5.0


@dataclass(frozen=True, kw_only=True)
class PilotRef:
    """Identity of the pilot object, for names and ownerReferences."""

    name: str
    namespace: str
    uid: str


@dataclass(frozen=True, kw_only=True)
class ArmPlan:
    """One arm as rendered: its Deployment (by name, and as applied where the operator owns it) and
    Service, GPU count and configuration hash."""

    arm: Arm
    name: str  # of its Deployment
    replicas: int
    gpus: int
    config_hash: str
    deployment: Json | None  # None: the team's own Deployment (spec.workloadRef), never the operator's
    service: Json
    speculative_config: str | None = None  # the speculative arm's `--speculative-config`, as rendered


def _meta(ref: PilotRef, name: str, **labels: str) -> Json:
    return {
        "name": name,
        "namespace": ref.namespace,
        "labels": {**pilot_labels(ref.name), **labels},
        "ownerReferences": [
            {
                "apiVersion": API_VERSION,
                "kind": KIND,
                "name": ref.name,
                "uid": ref.uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }


def content_hash(value: Any) -> str:
    """A short, stable hash of a JSON-ready value (key order does not matter)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def speculative_config(draft: Draft, *, release: VllmRelease) -> str:
    """vLLM's `--speculative-config` JSON for the draft, with the keys of the engine's vLLM `release` (the
    schedule's differs); what the spec leaves unset is left to vLLM's default (the draft's tensor parallel
    size defaults to the target's)."""
    config: dict[str, Any] = {"method": draft.method.value}
    if draft.model is not None:
        config["model"] = draft.model
    config["num_speculative_tokens"] = draft.num_speculative_tokens
    if draft.schedule is not None:
        config[release.schedule_key] = [entry.batch_range.render() for entry in draft.schedule]
    if draft.tensor_parallel_size is not None:
        config["draft_tensor_parallel_size"] = draft.tensor_parallel_size
    if draft.revision is not None:
        config["revision"] = draft.revision
    return json.dumps(config, separators=(",", ":"))


def engine_args(engine: Engine, *, tensor_parallel_size: int, extra: Sequence[str] = ()) -> list[str]:
    """`vllm serve` arguments after the command: the model, the flags the spec owns, then extraArgs."""
    args = [engine.model, "--host", "$(POD_IP)", "--port", str(ENGINE_PORT)]
    optional = (
        ("--served-model-name", engine.served_model_name),
        ("--revision", engine.revision),
        ("--tokenizer", engine.tokenizer),
        ("--max-model-len", engine.max_model_len),
        ("--gpu-memory-utilization", engine.gpu_memory_utilization),
    )
    args += [part for flag, value in optional if value is not None for part in (flag, str(value))]
    args += ["--tensor-parallel-size", str(tensor_parallel_size)]
    return [*args, *engine.extra_args, *extra]


def _env(engine: Engine) -> list[Json]:
    env: list[Json] = [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    for var in engine.env:
        if var.value_from is not None:
            ref = var.value_from.secret_key_ref
            env.append({"name": var.name, "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}})
        else:
            env.append({"name": var.name, "value": var.value or ""})
    return env


def _resources(engine: Engine, gpus: int) -> Json:
    """The engine's resources with `nvidia.com/gpu` set from the tensor parallel size, in limits and
    (when requests are given) requests: extended resources must match in both."""
    limits = {**engine.resources.limits, GPU_RESOURCE: gpus}
    out: Json = {"limits": {k: limits[k] for k in sorted(limits)}}
    if engine.resources.requests:
        requests = {**engine.resources.requests, GPU_RESOURCE: gpus}
        out["requests"] = {k: requests[k] for k in sorted(requests)}
    return out


def engine_pod(engine: Engine, *, tensor_parallel_size: int, extra_args: Sequence[str] = ()) -> Json:
    """The engine pod spec every arm shares; arms differ only through the two keyword arguments."""
    container: Json = {
        "name": ENGINE_CONTAINER,
        "image": engine.image,
        "command": list(engine.command),
        "args": engine_args(engine, tensor_parallel_size=tensor_parallel_size, extra=extra_args),
        "env": _env(engine),
        "ports": [{"name": "http", "containerPort": ENGINE_PORT, "protocol": "TCP"}],
        "readinessProbe": {
            "httpGet": {"path": "/health", "port": "http"},
            "periodSeconds": 2,
            "timeoutSeconds": 2,
            "failureThreshold": 3,
        },
        "resources": _resources(engine, tensor_parallel_size),
    }
    pod: Json = {"containers": [container]}
    if tensor_parallel_size > 1:
        # NCCL between tensor-parallel ranks needs more shared memory than a container's default 64 MiB.
        container["volumeMounts"] = [{"name": "dshm", "mountPath": "/dev/shm"}]
        pod["volumes"] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    pod.update(_placement(engine.node_selector, engine.tolerations))
    return _templated(pod, engine.pod_template) if engine.pod_template is not None else pod


def _placement(node_selector: Mapping[str, str], tolerations: Sequence[Toleration]) -> Json:
    """A pod's nodeSelector and tolerations, each only when given."""
    placed: Json = {}
    if node_selector:
        placed["nodeSelector"] = dict(sorted(node_selector.items()))
    if tolerations:
        placed["tolerations"] = [t.to_wire() for t in tolerations]
    return placed


PROBES = ("startupProbe", "readinessProbe", "livenessProbe")


def _templated(pod: Json, template: PodTemplate) -> Json:
    """The engine pod with the pilot's pod template merged under it: where both set a field, the
    operator's wins (a volume or mount by its name or path), except the probes, which replace its own."""
    (container,) = pod["containers"]
    part = template.container
    mounts = container.get("volumeMounts", [])
    taken = {mount.get("mountPath") for mount in mounts} | {mount.get("name") for mount in mounts}
    merged_container = {
        **({"securityContext": dict(part.security_context)} if part.security_context is not None else {}),
        **container,
        **{
            key: dict(probe)
            for key, probe in zip(PROBES, (part.startup_probe, part.readiness_probe, part.liveness_probe), strict=True)
            if probe is not None
        },
    }
    extra_mounts = [
        dict(m) for m in part.volume_mounts if m.get("mountPath") not in taken and m.get("name") not in taken
    ]
    if mounts or extra_mounts:
        merged_container["volumeMounts"] = [*mounts, *extra_mounts]
    volumes = pod.get("volumes", [])
    named = {volume.get("name") for volume in volumes}
    extra_volumes = [dict(v) for v in template.volumes if v.get("name") not in named]
    given: Json = {
        "serviceAccountName": template.service_account_name,
        "automountServiceAccountToken": True if template.automount_service_account_token else None,
        "imagePullSecrets": [{"name": name} for name in template.image_pull_secrets] or None,
        "priorityClassName": template.priority_class_name,
        "affinity": dict(template.affinity) if template.affinity is not None else None,
        "topologySpreadConstraints": [dict(c) for c in template.topology_spread_constraints] or None,
        "securityContext": dict(template.security_context) if template.security_context is not None else None,
    }
    merged = {**{key: value for key, value in given.items() if value is not None}, **pod}
    merged["containers"] = [merged_container]
    if volumes or extra_volumes:
        merged["volumes"] = [*volumes, *extra_volumes]
    return merged


def _pod_metadata(engine: Engine, labels: Mapping[str, str], annotations: Mapping[str, str]) -> Json:
    """An engine pod template's metadata: the pod template's labels and annotations under the operator's."""
    template = engine.pod_template
    return {
        "labels": {**(template.labels if template is not None else {}), **labels},
        "annotations": {**(template.annotations if template is not None else {}), **annotations},
    }


def _arm_pod(spec: SpeculationPilotSpec, arm: Arm, workload: Workload | None) -> tuple[Json, int]:
    """An arm's pod spec and its tensor parallel size: the one place where arms differ. From a workload,
    a copy of its pod, with `--speculative-config` for the speculative arm."""
    engine = spec.engine
    flag = ["--speculative-config", speculative_config(spec.speculative.draft, release=spec.vllm_release)]
    if engine is None:
        assert workload is not None, "a pilot without spec.engine pilots a workload"
        pod = copied_pod(workload, flag if arm is Arm.SPECULATIVE else ())
        return pod, tensor_parallel_size(workload)
    if arm is Arm.SPECULATIVE:
        return engine_pod(engine, tensor_parallel_size=engine.tensor_parallel_size, extra_args=flag), (
            engine.tensor_parallel_size
        )
    if arm is Arm.ALTERNATIVE and spec.alternative is not None:
        tp = spec.alternative.tensor_parallel_size or engine.tensor_parallel_size
        return engine_pod(engine, tensor_parallel_size=tp, extra_args=spec.alternative.extra_args), tp
    return engine_pod(engine, tensor_parallel_size=engine.tensor_parallel_size), engine.tensor_parallel_size


def arm_replicas(spec: SpeculationPilotSpec, arm: Arm) -> int:
    if arm is Arm.SPECULATIVE:
        return spec.speculative.replicas
    if arm is Arm.CONTROL:
        return spec.speculative.replicas if spec.control.enabled else 0
    if arm is Arm.ALTERNATIVE:
        return spec.alternative.replicas if spec.alternative is not None else 0
    return spec.baseline.replicas


def arms_of(spec: SpeculationPilotSpec) -> tuple[Arm, ...]:
    """The arms the spec asks for, baseline first."""
    control = (Arm.CONTROL,) if spec.control.enabled else ()
    return (Arm.BASELINE, Arm.SPECULATIVE, *control, *((Arm.ALTERNATIVE,) if spec.alternative is not None else ()))


def _engine_template(
    spec: SpeculationPilotSpec, workload: Workload | None, pod: Json, labels: Mapping[str, str], config_hash: str | None
) -> Json:
    """An engine Deployment's pod template: the operator's labels and config hash over the pod template's
    (or the workload's) own, hardened whoever wrote it."""
    annotations = {CONFIG_HASH_ANNOTATION: config_hash} if config_hash is not None else {}
    if spec.engine is None:
        assert workload is not None
        return {"metadata": copied_metadata(workload, labels, annotations), "spec": hardened_engine_pod(pod)}
    return {"metadata": _pod_metadata(spec.engine, labels, annotations), "spec": hardened_engine_pod(pod)}


def render_arm(ref: PilotRef, spec: SpeculationPilotSpec, arm: Arm, workload: Workload | None = None) -> ArmPlan:
    pod, tp = _arm_pod(spec, arm, workload)
    config_hash = content_hash(pod)
    name, selector = arm_name(ref.name, arm), arm_selector(ref.name, arm)
    labels = {ARM_LABEL: arm.value, COMPONENT_LABEL: ENGINE_COMPONENT}
    if workload is not None and arm is Arm.BASELINE:
        # Production runs as the team runs it: the routers reach its pods through a Service of the pilot's.
        return ArmPlan(
            arm=arm,
            name=workload.name,
            replicas=workload.state.replicas,
            gpus=workload.state.replicas * tp,
            config_hash=config_hash,
            deployment=None,
            service=_engine_service(ref, spec, name, workload.selector, labels),
        )
    replicas = arm_replicas(spec, arm)
    # Speculative, control and alternative arms take no spare GPUs to roll: the router sends their share
    # to the baseline while a replica restarts. The baseline keeps serving through a surge replica. The
    # control arm's pod is the baseline's own, so the two share a config hash.
    surge = {"maxSurge": 1, "maxUnavailable": 0} if arm is Arm.BASELINE else {"maxSurge": 0, "maxUnavailable": 1}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(ref, name, **labels),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector},
            "progressDeadlineSeconds": ENGINE_PROGRESS_DEADLINE_SECONDS,
            "strategy": {"type": "RollingUpdate", "rollingUpdate": surge},
            "template": _engine_template(
                spec,
                workload,
                pod,
                {**pilot_labels(ref.name), **selector, COMPONENT_LABEL: ENGINE_COMPONENT},
                config_hash,
            ),
        },
    }
    return ArmPlan(
        arm=arm,
        name=name,
        replicas=replicas,
        gpus=replicas * tp,
        config_hash=config_hash,
        deployment=deployment,
        service=_engine_service(ref, spec, name, selector, labels),
        speculative_config=(
            speculative_config(spec.speculative.draft, release=spec.vllm_release) if arm is Arm.SPECULATIVE else None
        ),
    )


def _service(ref: PilotRef, name: str, selector: Mapping[str, str], labels: Mapping[str, str], ports: Any) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(ref, name, **labels),
        "spec": {
            "selector": dict(selector),
            "ports": [{"name": n, "port": p, "targetPort": n, "protocol": "TCP"} for n, p in ports],
        },
    }


def _engine_service(
    ref: PilotRef, spec: SpeculationPilotSpec, name: str, selector: Mapping[str, str], labels: Json
) -> Json:
    """A Service of engine pods: to their port named http where the operator renders them, to vLLM's
    port by number where they are a workload's (or its copies), which name their ports as they like."""
    service = _service(ref, name, selector, labels, [("http", ENGINE_PORT)])
    if spec.engine is None:
        service["spec"]["ports"][0]["targetPort"] = ENGINE_PORT
    return service


def max_table_age_seconds(spec: SpeculationPilotSpec) -> float:
    """How old a routing table may get before the router sends everything to the baseline: three
    missed rewrites (the operator rewrites it every analysis interval), and never under 30 s."""
    return max(30.0, 3 * spec.analysis.interval.total_seconds())


def router_config(ref: PilotRef, spec: SpeculationPilotSpec, *, rehearsal: bool = False) -> RouterConfig:
    """The live router's configuration, or the rehearsal router's: under `rehearsal_pilot`, with the
    control arm as its ordinary arm."""
    return RouterConfig(
        pilot=rehearsal_pilot(ref.name) if rehearsal else ref.name,
        ordinary_arm=Arm.CONTROL if rehearsal else Arm.BASELINE,
        namespace=None,  # from POD_NAMESPACE
        listen=f"$(POD_IP):{ROUTER_PORT}",
        admin_listen=f"$(POD_IP):{ROUTER_ADMIN_PORT}",
        scope_header=spec.router.scope_header,
        request_timeout=spec.router.request_timeout.total_seconds(),
        max_table_age=max_table_age_seconds(spec),
        drain_seconds=ROUTER_DRAIN_SECONDS,
    )


def router_rbac(ref: PilotRef, spec: SpeculationPilotSpec) -> tuple[Json, Json, Json]:
    """ServiceAccount, Role and RoleBinding of the routers: read their own routing ConfigMaps (the live
    one, and the rehearsal's where the pilot has one) and the namespace's EndpointSlices (RBAC cannot
    narrow those by label), nothing else."""
    tables = [routes_name(ref.name)] + ([routes_name(rehearsal_pilot(ref.name))] if spec.rehearsal else [])
    name, labels = router_name(ref.name), {COMPONENT_LABEL: ROUTER_COMPONENT}
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(ref, name, **labels)}
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _meta(ref, name, **labels),
        "rules": [
            {
                "apiGroups": [""],
                "resources": ["configmaps"],
                "resourceNames": tables,
                "verbs": ["get", "list", "watch"],
            },
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch"]},
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _meta(ref, name, **labels),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ref.namespace}],
    }
    return account, role, binding


def render_router(ref: PilotRef, spec: SpeculationPilotSpec, *, image: str) -> tuple[Json, Json]:
    """The router's Deployment and Service."""
    name, selector = router_name(ref.name), router_selector(ref.name)
    labels = {COMPONENT_LABEL: ROUTER_COMPONENT}
    deployment = _router_deployment(ref, spec, name=name, selector=selector, image=image, rehearsal=False)
    # the admin port (/samples, /routes, /metrics) is reached on the pods, never through the clients' Service
    return deployment, _service(ref, name, selector, labels, [("http", ROUTER_PORT)])


def _router_deployment(
    ref: PilotRef, spec: SpeculationPilotSpec, *, name: str, selector: Mapping[str, str], image: str, rehearsal: bool
) -> Json:
    container = {
        "name": ROUTER_CONTAINER,
        "image": image,
        "args": ["router", *router_config(ref, spec, rehearsal=rehearsal).to_args()],
        "env": [
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        ],
        "ports": [
            {"name": "http", "containerPort": ROUTER_PORT, "protocol": "TCP"},
            {"name": "admin", "containerPort": ROUTER_ADMIN_PORT, "protocol": "TCP"},
        ],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "admin"}, "periodSeconds": 1},
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "admin"}, "periodSeconds": 10, "failureThreshold": 3},
        "resources": _router_resources(spec),
        "securityContext": RESTRICTED_CONTAINER,
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(ref, name, **{COMPONENT_LABEL: selector[COMPONENT_LABEL]}),
        "spec": {
            "replicas": 1 if rehearsal else spec.router.replicas,
            "selector": {"matchLabels": dict(selector)},
            "progressDeadlineSeconds": ROUTER_PROGRESS_DEADLINE_SECONDS,
            "template": {
                "metadata": {"labels": {**pilot_labels(ref.name), **selector}},
                "spec": {
                    "serviceAccountName": router_name(ref.name),
                    # In-flight requests finish within the drain and the request timeout.
                    "terminationGracePeriodSeconds": int(ROUTER_DRAIN_SECONDS + 30),
                    "containers": [container],
                    **_project_pod(spec),
                },
            },
        },
    }


# The `restricted` Pod Security Standard, which the project's image (a non-root user) meets.
RESTRICTED_CONTAINER = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}
ROUTER_RESOURCES = {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}}


def _router_resources(spec: SpeculationPilotSpec) -> Json:
    found = spec.router.resources
    if found is None:
        return ROUTER_RESOURCES
    return {key: dict(value) for key, value in (("requests", found.requests), ("limits", found.limits)) if value}


def _project_pod(spec: SpeculationPilotSpec) -> Json:
    """What pods of the project's image (routers, load Jobs) take from spec.router: pull secrets and
    placement; and the restricted standard's pod-level fields."""
    router = spec.router
    pod: Json = {"securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}}
    if router.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": name} for name in router.image_pull_secrets]
    return {**pod, **_placement(router.node_selector, router.tolerations)}


def render_routes_configmap(ref: PilotRef, table: RoutingTable) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(ref, routes_name(ref.name), **{COMPONENT_LABEL: ROUTER_COMPONENT}),
        "data": render_routes(table),
    }


def render_rehearsal(ref: PilotRef, spec: SpeculationPilotSpec, *, table: RoutingTable, image: str) -> tuple[Json, ...]:
    """The rehearsal router and what it routes by: its table, and its two arms as Services of
    `rehearsal_pilot` selecting the pilot's speculative and control pods (none selects production)."""
    rehearsal, labels = rehearsal_pilot(ref.name), {COMPONENT_LABEL: REHEARSAL_ROUTER_COMPONENT}
    services = tuple(
        _engine_service(ref, spec, arm_name(rehearsal, arm), arm_selector(ref.name, arm), labels)
        for arm in (Arm.SPECULATIVE, Arm.CONTROL)
    )
    routes = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(ref, routes_name(rehearsal), **labels),
        "data": render_routes(table),
    }
    selector = {**router_selector(ref.name), COMPONENT_LABEL: REHEARSAL_ROUTER_COMPONENT}
    router = _router_deployment(ref, spec, name=router_name(rehearsal), selector=selector, image=image, rehearsal=True)
    return (routes, *services, router)


def render_restart(ref: PilotRef, spec: SpeculationPilotSpec, workload: Workload | None = None) -> Json:
    """The replica the restart fallback brings up in place of a speculative one: the control arm's pod
    (ordinary decoding), labelled as the speculative arm's so that its Services reach it once Ready."""
    selector = {**arm_selector(ref.name, Arm.SPECULATIVE), COMPONENT_LABEL: REHEARSAL_RESTART_COMPONENT}
    pod, _ = _arm_pod(spec, Arm.CONTROL, workload)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(ref, rehearsal_restart_name(ref.name), **{COMPONENT_LABEL: REHEARSAL_RESTART_COMPONENT}),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": selector},
            "progressDeadlineSeconds": ENGINE_PROGRESS_DEADLINE_SECONDS,
            "template": _engine_template(spec, workload, pod, {**pilot_labels(ref.name), **selector}, None),
        },
    }


def _one_replica_fewer(deployment: Json) -> Json:
    spec = {**deployment["spec"], "replicas": max(0, int(deployment["spec"]["replicas"]) - 1)}
    return {**deployment, "spec": spec}


def render_step_load(
    ref: PilotRef,
    spec: SpeculationPilotSpec,
    *,
    step: int,
    router_ip: str,
    mix: str,
    rate: float,
    seconds: float,
    image: str,
) -> Json:
    """A rehearsal step's load: the project's load generator as a Job, open-loop Poisson arrivals of
    the scopes' own mix at `rate` for `seconds`, into the rehearsal router's pod (the one seen ready:
    a router that goes mid-step fails the step's Job rather than retrying it elsewhere)."""
    labels = {COMPONENT_LABEL: REHEARSAL_LOAD_COMPONENT}
    timeout = spec.router.request_timeout.total_seconds()
    args = [
        "loadgen",
        f"--url=http://{router_ip}:{ROUTER_PORT}",
        f"--mix={mix}",
        "--arrivals=poisson",
        f"--rate={rate:g}",
        f"--duration={seconds:g}",
        f"--timeout={timeout:g}",
        f"--seed={step}",
        "--no-progress",
    ]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(ref, rehearsal_step_name(ref.name, step), **labels),
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": int(seconds + timeout + 60),
            "template": {
                "metadata": {"labels": {**pilot_labels(ref.name), **labels}},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "containers": [
                        {
                            "name": "loadgen",
                            "image": image,
                            "args": args,
                            "resources": {
                                "requests": {"cpu": "200m", "memory": "128Mi"},
                                "limits": {"memory": "512Mi"},
                            },
                            "securityContext": RESTRICTED_CONTAINER,
                        }
                    ],
                    **_project_pod(spec),
                },
            },
        },
    }


def render_evidence_configmap(ref: PilotRef, text: str) -> Json:
    """The evidence store, owned by the pilot (collected with it) but outside its watched children."""
    meta = _meta(ref, evidence_name(ref.name))
    meta["labels"] = {EVIDENCE_LABEL: ref.name}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {EVIDENCE_KEY: text}}


@dataclass(frozen=True, kw_only=True)
class Rendered:
    """Every object of a pilot, in the order they are applied (the router's access before the router,
    the table before anything routes by it, arms before the router that sends them traffic)."""

    arms: tuple[ArmPlan, ...]
    routes: Json
    objects: tuple[Json, ...]


def render(
    ref: PilotRef,
    spec: SpeculationPilotSpec,
    *,
    table: RoutingTable,
    router_image: str,
    extra: Sequence[Json] = (),
    restarting: bool = False,
    workload: Workload | None = None,
) -> Rendered:
    """Every object; `extra` (the rehearsal's, while it runs) after the rest. While the restart fallback
    is rehearsed (`restarting`), one speculative replica runs ordinary decoding in its own Deployment.
    With a `workload`, the baseline is the team's Deployment, which is read and never rendered."""
    arms = tuple(render_arm(ref, spec, arm, workload) for arm in arms_of(spec))
    routes = render_routes_configmap(ref, table)
    deployment, service = render_router(ref, spec, image=router_image)
    deployments = tuple(
        _one_replica_fewer(plan.deployment) if restarting and plan.arm is Arm.SPECULATIVE else plan.deployment
        for plan in arms
        if plan.deployment is not None
    )
    objects = (
        *router_rbac(ref, spec),
        routes,
        *(plan.service for plan in arms),
        *deployments,
        service,
        deployment,
        *extra,
        *((render_restart(ref, spec, workload),) if restarting else ()),
    )
    return Rendered(arms=arms, routes=routes, objects=objects)
