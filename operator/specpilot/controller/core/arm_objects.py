"""The arms' objects: every arm runs the same frozen engine, rendered by one function (`render_arm`); the
speculative arm adds exactly `--speculative-config`, and the alternative arm changes only what its spec names
(replicas, tensor parallel size, extraArgs). Each arm is a Deployment (none for a workload's baseline, which is
read) and a Service. Pure."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specpilot.api.podsecurity import hardened_engine_pod
from specpilot.api.spec import Draft, Engine, PodTemplate, SpeculationPilotSpec
from specpilot.api.spec.engine_spec import GPU_RESOURCE
from specpilot.controller.core.objects import Json, PilotRef, content_hash, owned_metadata, placement, service_object
from specpilot.controller.core.workload_ref import Workload, copied_metadata, copied_pod, tensor_parallel_size
from specpilot.wire.batchschedule import VllmRelease
from specpilot.wire.names import (
    ARM_LABEL,
    COMPONENT_LABEL,
    CONFIG_HASH_ANNOTATION,
    ENGINE_COMPONENT,
    ENGINE_PORT,
    Arm,
    arm_name,
    arm_selector,
    pilot_labels,
)

ENGINE_CONTAINER = "vllm"


# A pod may take this long to become ready before its Deployment reports ProgressDeadlineExceeded:
# loading a large model and capturing CUDA graphs takes minutes.
ENGINE_PROGRESS_DEADLINE_SECONDS = 1800


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
    pod.update(placement(engine.node_selector, engine.tolerations))
    return _templated(pod, engine.pod_template) if engine.pod_template is not None else pod


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


def arm_pod(spec: SpeculationPilotSpec, arm: Arm, workload: Workload | None) -> tuple[Json, int]:
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


def engine_template(
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
    pod, tp = arm_pod(spec, arm, workload)
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
            service=engine_service(ref, spec, name, workload.selector, labels),
        )
    replicas = arm_replicas(spec, arm)
    # Speculative, control and alternative arms take no spare GPUs to roll: the router sends their share
    # to the baseline while a replica restarts. The baseline keeps serving through a surge replica. The
    # control arm's pod is the baseline's own, so the two share a config hash.
    surge = {"maxSurge": 1, "maxUnavailable": 0} if arm is Arm.BASELINE else {"maxSurge": 0, "maxUnavailable": 1}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": owned_metadata(ref, name, **labels),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector},
            "progressDeadlineSeconds": ENGINE_PROGRESS_DEADLINE_SECONDS,
            "strategy": {"type": "RollingUpdate", "rollingUpdate": surge},
            "template": engine_template(
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
        service=engine_service(ref, spec, name, selector, labels),
        speculative_config=(
            speculative_config(spec.speculative.draft, release=spec.vllm_release) if arm is Arm.SPECULATIVE else None
        ),
    )


def engine_service(
    ref: PilotRef, spec: SpeculationPilotSpec, name: str, selector: Mapping[str, str], labels: Json
) -> Json:
    """A Service of engine pods: to their port named http where the operator renders them, to vLLM's
    port by number where they are a workload's (or its copies), which name their ports as they like."""
    service = service_object(ref, name, selector, labels, [("http", ENGINE_PORT)])
    if spec.engine is None:
        service["spec"]["ports"][0]["targetPort"] = ENGINE_PORT
    return service


def arm_plans(ref: PilotRef, spec: SpeculationPilotSpec, workload: Workload | None) -> tuple[ArmPlan, ...]:
    """Every arm of the spec, rendered."""
    return tuple(render_arm(ref, spec, arm, workload) for arm in arms_of(spec))
