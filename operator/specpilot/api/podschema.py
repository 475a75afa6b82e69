"""The API server's half of `api.podsecurity`: the CRD's schema for a pilot's pod template's
securityContexts and volumes, with CEL rules generated from podsecurity's own tables and messages, so
that `kubectl apply` of a pilot asking for a hostPath volume, a privileged container or root is refused
by the API server naming the field, before the operator sees it.

CEL reaches only fields the schema declares, so the fields the rules read are declared (typed as
Kubernetes types them) and every other field is kept as written. What CEL cannot see stays with the
operator's check: the SELinux options and the Deployment a `workloadRef` names. A probe's `httpGet.host` and
`tcpSocket.host` are declared, so that a probe calling another host than the pod's is refused here too. The
pod-level hostNetwork, hostPID and hostIPC are no fields of the template at all, which the API server
refuses under strict field validation (kubectl's default) and prunes otherwise.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import WithJsonSchema

from specpilot.api.common import Rule
from specpilot.api.podsecurity import (
    CONTEXT_FORBIDDEN,
    HOST_ACTIONS,
    PROBE_HOST,
    VOLUME_TYPES,
    Forbidden,
    When,
    volume_refused,
)

# Every volume source of Kubernetes' core/v1 Volume (a fact of the API, not a policy): those outside
# podsecurity's VOLUME_TYPES get a rule each.
VOLUME_SOURCES = (
    "awsElasticBlockStore",
    "azureDisk",
    "azureFile",
    "cephfs",
    "cinder",
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "fc",
    "flexVolume",
    "flocker",
    "gcePersistentDisk",
    "gitRepo",
    "glusterfs",
    "hostPath",
    "image",
    "iscsi",
    "nfs",
    "persistentVolumeClaim",
    "photonPersistentDisk",
    "portworxVolume",
    "projected",
    "quobyte",
    "rbd",
    "scaleIO",
    "secret",
    "storageos",
    "vsphereVolume",
)
REFUSED_VOLUMES = tuple(kind for kind in VOLUME_SOURCES if kind not in VOLUME_TYPES)

_KEPT: dict[str, Any] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
_LIST_ITEMS = {"capabilities.add": {"type": "string", "maxLength": 64}}  # others: objects kept as written
_TYPES = {When.TRUE: "boolean", When.FALSE: "boolean", When.ZERO: "integer", When.EQUALS: "string"}


def forbidden_rule(forbidden: Forbidden) -> Rule:
    """The CEL rule refusing what `forbidden` refuses, on the securityContext that holds the field."""
    keys = forbidden.path.split(".")
    field = "self." + forbidden.path
    guard = " || ".join(f"!has(self.{'.'.join(keys[: n + 1])})" for n in range(len(keys)))
    allowed = {
        When.TRUE: f"!{field}",
        When.FALSE: field,
        When.ZERO: f"{field} != 0",
        When.SET: f"size({field}) == 0",
        When.EQUALS: f"{field} != '{forbidden.value}'",
    }[forbidden.when]
    return Rule(cel=f"{guard} || {allowed}", message=forbidden.message, field_path=f".{forbidden.path}")


def _leaf(forbidden: Forbidden) -> dict[str, Any]:
    about = {"description": f"Kubernetes' field, checked: {forbidden.message}."}
    if forbidden.when is When.SET:
        return {**about, "type": "array", "maxItems": 64, "items": _LIST_ITEMS.get(forbidden.path, _KEPT)}
    if forbidden.when is When.EQUALS:
        return {**about, "type": "string", "maxLength": 64}
    return {**about, "type": _TYPES[forbidden.when]}


def security_context_schema() -> dict[str, Any]:
    """A securityContext (a pod's or a container's) as the CRD declares it."""
    schema: dict[str, Any] = {**_KEPT, "properties": {}}
    for forbidden in CONTEXT_FORBIDDEN:
        *parents, leaf = forbidden.path.split(".")
        node = schema
        for key in parents:
            about = f"Kubernetes' {key}, kept as written but for the fields checked below."
            node = node["properties"].setdefault(key, {"description": about, **_KEPT, "properties": {}})
        node["properties"][leaf] = _leaf(forbidden)
    schema["x-kubernetes-validations"] = [forbidden_rule(f).to_schema() for f in CONTEXT_FORBIDDEN]
    return schema


def volume_schema() -> dict[str, Any]:
    """One volume as the CRD declares it: a rule for each volume source that reaches the node."""
    return {
        **_KEPT,
        "properties": {
            kind: {"description": f"Kubernetes' volume source, refused: {volume_refused(kind)}.", **_KEPT}
            for kind in REFUSED_VOLUMES
        },
        "x-kubernetes-validations": [
            Rule(cel=f"!has(self.{kind})", message=volume_refused(kind), field_path=f".{kind}").to_schema()
            for kind in REFUSED_VOLUMES
        ],
    }


def probe_schema() -> dict[str, Any]:
    """A probe as the CRD declares it: kept as written, but for a host on its httpGet or tcpSocket."""
    host = {"description": f"Kubernetes' field, checked: {PROBE_HOST}.", "type": "string", "maxLength": 253}
    return {
        **_KEPT,
        "properties": {
            action: {"description": f"Kubernetes' {action} action.", **_KEPT, "properties": {"host": host}}
            for action in HOST_ACTIONS
        },
        "x-kubernetes-validations": [
            Rule(
                cel=f"!has(self.{action}) || !has(self.{action}.host) || self.{action}.host == ''",
                message=PROBE_HOST,
                field_path=f".{action}.host",
            ).to_schema()
            for action in HOST_ACTIONS
        ],
    }


# A securityContext, a volume and a probe as the template's models carry them: passed through as written (the
# operator's check reads them), declared to the API server with the rules above.
SecurityContext = Annotated[dict[str, Any], WithJsonSchema(security_context_schema())]
Volume = Annotated[dict[str, Any], WithJsonSchema(volume_schema())]
Probe = Annotated[dict[str, Any], WithJsonSchema(probe_schema())]
