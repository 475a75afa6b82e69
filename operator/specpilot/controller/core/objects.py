"""What every object a pilot owns shares: the pilot it belongs to (`PilotRef`), owned metadata, a
content hash, a Service, placement, and the restricted pod settings of the project's own image. Pure."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specpilot.api.pilot import API_VERSION, KIND
from specpilot.api.spec import SpeculationPilotSpec, Toleration
from specpilot.wire.names import pilot_labels

Json = dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class PilotRef:
    """Identity of the pilot object, for names and ownerReferences."""

    name: str
    namespace: str
    uid: str


def owned_metadata(ref: PilotRef, name: str, **labels: str) -> Json:
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


def placement(node_selector: Mapping[str, str], tolerations: Sequence[Toleration]) -> Json:
    """A pod's nodeSelector and tolerations, each only when given."""
    placed: Json = {}
    if node_selector:
        placed["nodeSelector"] = dict(sorted(node_selector.items()))
    if tolerations:
        placed["tolerations"] = [t.to_wire() for t in tolerations]
    return placed


def service_object(
    ref: PilotRef, name: str, selector: Mapping[str, str], labels: Mapping[str, str], ports: Any
) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": owned_metadata(ref, name, **labels),
        "spec": {
            "selector": dict(selector),
            "ports": [{"name": n, "port": p, "targetPort": n, "protocol": "TCP"} for n, p in ports],
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


def project_pod(spec: SpeculationPilotSpec) -> Json:
    """What pods of the project's image (routers, load Jobs) take from spec.router: pull secrets and
    placement; and the restricted standard's pod-level fields."""
    router = spec.router
    pod: Json = {"securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}}
    if router.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": name} for name in router.image_pull_secrets]
    return {**pod, **placement(router.node_selector, router.tolerations)}
