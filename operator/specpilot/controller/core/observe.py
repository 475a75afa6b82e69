"""What the operator keeps of each child it watches: small summaries, never whole bodies.

Kopf's indices call these on every watch event of a pilot's children (selected server-side by the
`specpilot.io/pilot` label); the reconcile reads the summaries instead of calling the API server.
Pure functions of a body.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from specpilot.wire.names import (
    ARM_LABEL,
    COMPONENT_LABEL,
    ENGINE_COMPONENT,
    REHEARSAL_LOAD_COMPONENT,
    REHEARSAL_ROUTER_COMPONENT,
    ROUTER_COMPONENT,
    Arm,
)

# Waiting reasons of a container that will not resolve by waiting: the arm is unavailable.
FATAL_WAITING = frozenset(
    {
        "ImageNotRunnable",
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "CrashLoopBackOff",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)


@dataclass(frozen=True, kw_only=True)
class DeploymentState:
    """What a Deployment reports about its rollout."""

    generation: int = 0
    observed_generation: int = 0
    replicas: int = 0
    current: int = 0  # status.replicas: pods of every revision
    updated: int = 0
    ready: int = 0
    available: int = 0
    deadline_exceeded: bool = False

    @property
    def rolled_out(self) -> bool:
        """The current generation is observed and every replica runs it and is ready."""
        return (
            self.observed_generation >= self.generation
            and self.updated >= self.replicas
            and self.ready >= self.replicas
            and self.available >= self.replicas
            and self.current <= self.replicas
        )


@dataclass(frozen=True, kw_only=True)
class PodTrouble:
    """A pod of an arm or of the router that is not running, and why."""

    component: str  # an Arm value, or "router"
    pod: str
    reason: str
    message: str

    @property
    def fatal(self) -> bool:
        return self.reason in FATAL_WAITING

    def describe(self) -> str:
        text = f"pod {self.pod}: {self.reason}"
        return f"{text}: {self.message}" if self.message else text


# Pods other than engines that the operator tells apart: the routers, and a rehearsal step's load.
ROUTER_COMPONENTS = (ROUTER_COMPONENT, REHEARSAL_ROUTER_COMPONENT, REHEARSAL_LOAD_COMPONENT)


@dataclass(frozen=True, kw_only=True)
class ChildSummary:
    """One owned object: enough to tell whether it drifted from what was applied."""

    kind: str
    name: str
    generation: int  # Deployments count spec edits; 0 for kinds without a generation
    managed: Mapping[str, Any]  # the top-level fields the operator renders (spec, data, rules, ...)
    deployment: DeploymentState | None = None


# Top-level fields the operator renders, per kind (metadata is compared through labels only).
MANAGED_FIELDS: Mapping[str, tuple[str, ...]] = {
    "ServiceAccount": (),
    "ConfigMap": ("data",),
    "Service": ("spec",),
    "Role": ("rules",),
    "RoleBinding": ("roleRef", "subjects"),
    "Deployment": (),  # compared by metadata.generation: a rendered Deployment comes back defaulted
    "Job": (),  # a rehearsal step's load: created once, never edited (a Job's template cannot change)
}


def summarize(body: Mapping[str, Any]) -> ChildSummary:
    kind, meta = str(body.get("kind", "")), body.get("metadata") or {}
    managed = {field: body.get(field) for field in MANAGED_FIELDS.get(kind, ())}
    return ChildSummary(
        kind=kind,
        name=str(meta.get("name", "")),
        generation=int(meta.get("generation") or 0),
        managed={**managed, "labels": meta.get("labels") or {}},
        deployment=deployment_state(body) if kind == "Deployment" else None,
    )


def deployment_state(body: Mapping[str, Any]) -> DeploymentState:
    meta, spec, status = body.get("metadata") or {}, body.get("spec") or {}, body.get("status") or {}
    conditions = status.get("conditions") or []
    return DeploymentState(
        generation=int(meta.get("generation") or 0),
        observed_generation=int(status.get("observedGeneration") or 0),
        replicas=int(spec.get("replicas", 1)),
        current=int(status.get("replicas") or 0),
        updated=int(status.get("updatedReplicas") or 0),
        ready=int(status.get("readyReplicas") or 0),
        available=int(status.get("availableReplicas") or 0),
        deadline_exceeded=any(
            c.get("type") == "Progressing" and c.get("reason") == "ProgressDeadlineExceeded" for c in conditions
        ),
    )


@dataclass(frozen=True)
class PodView:
    """What the operator keeps of a pod of a pilot."""

    name: str
    component: str  # an Arm value, or "router"
    troubles: tuple[PodTrouble, ...]
    ready_ip: str | None  # set while the pod is Ready and not being deleted
    role: str = ""  # its component label: an engine, a router, a rehearsal's restarted replica
    ready_since: datetime | None = None  # when it last became Ready, while it is


def pod_view(body: Mapping[str, Any]) -> PodView:
    meta, status = body.get("metadata") or {}, body.get("status") or {}
    ready = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "Ready" and c.get("status") == "True"), None
    )
    ip = status.get("podIP") if ready is not None and not meta.get("deletionTimestamp") else None
    since = ready.get("lastTransitionTime") if ready is not None else None
    return PodView(
        name=str(meta.get("name", "")),
        component=_component(meta),
        troubles=pod_troubles(body),
        ready_ip=ip,
        role=str((meta.get("labels") or {}).get(COMPONENT_LABEL, "")),
        ready_since=_timestamp(since) if ip and isinstance(since, str) else None,
    )


def baseline_pod_view(body: Mapping[str, Any]) -> PodView:
    """A pod of the team's own Deployment (spec.workloadRef): production's baseline, which carries none
    of the operator's labels."""
    return replace(pod_view(body), component=Arm.BASELINE.value, role=ENGINE_COMPONENT)


def _timestamp(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def _component(meta: Mapping[str, Any]) -> str:
    labels = meta.get("labels") or {}
    component = labels.get(COMPONENT_LABEL)
    return str(labels.get(ARM_LABEL) or (component if component in ROUTER_COMPONENTS else ""))


def pod_troubles(body: Mapping[str, Any]) -> tuple[PodTrouble, ...]:
    """Why a pod of an arm or of the router is not running: waiting containers, or unschedulable."""
    meta, status = body.get("metadata") or {}, body.get("status") or {}
    if meta.get("deletionTimestamp"):
        return ()
    component, name = _component(meta), str(meta.get("name", ""))
    troubles = []
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason") not in (None, "ContainerCreating", "PodInitializing"):
            troubles.append(
                PodTrouble(
                    component=component,
                    pod=name,
                    reason=str(waiting["reason"]),
                    message=str(waiting.get("message", "")),
                )
            )
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            reason = str(cond.get("reason") or "Unschedulable")
            troubles.append(
                PodTrouble(component=component, pod=name, reason=reason, message=str(cond.get("message", "")))
            )
    return tuple(troubles)


def drifted(desired: Mapping[str, Any], observed: Any) -> bool:
    """Whether `observed` lacks or differs in any value `desired` sets (defaults the server adds are fine)."""
    if isinstance(desired, Mapping):
        return not isinstance(observed, Mapping) or any(drifted(v, observed.get(k)) for k, v in desired.items())
    if isinstance(desired, list):
        return (
            not isinstance(observed, list)
            or len(desired) != len(observed)
            or any(drifted(d, o) for d, o in zip(desired, observed, strict=True))
        )
    return bool(desired != observed)
