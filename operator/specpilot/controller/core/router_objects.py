"""The live router's objects: its access (ServiceAccount, Role, RoleBinding), configuration, Deployment,
Service and routing-table ConfigMap. Pure."""

from __future__ import annotations

from collections.abc import Mapping

from specpilot.api.spec import SpeculationPilotSpec
from specpilot.controller.core.objects import (
    RESTRICTED_CONTAINER,
    Json,
    PilotRef,
    owned_metadata,
    project_pod,
    service_object,
)
from specpilot.wire.names import (
    COMPONENT_LABEL,
    ROUTER_ADMIN_PORT,
    ROUTER_COMPONENT,
    ROUTER_PORT,
    Arm,
    pilot_labels,
    rehearsal_pilot,
    router_name,
    router_selector,
    routes_name,
)
from specpilot.wire.routerconfig import RouterConfig
from specpilot.wire.routes import RoutingTable, render_routes

ROUTER_CONTAINER = "router"


ROUTER_PROGRESS_DEADLINE_SECONDS = 300


ROUTER_DRAIN_SECONDS = 5.0


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
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": owned_metadata(ref, name, **labels)}
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": owned_metadata(ref, name, **labels),
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
        "metadata": owned_metadata(ref, name, **labels),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ref.namespace}],
    }
    return account, role, binding


def render_router(ref: PilotRef, spec: SpeculationPilotSpec, *, image: str) -> tuple[Json, Json]:
    """The router's Deployment and Service."""
    name, selector = router_name(ref.name), router_selector(ref.name)
    labels = {COMPONENT_LABEL: ROUTER_COMPONENT}
    deployment = render_router_deployment(ref, spec, name=name, selector=selector, image=image, rehearsal=False)
    # the admin port (/samples, /routes, /metrics) is reached on the pods, never through the clients' Service
    return deployment, service_object(ref, name, selector, labels, [("http", ROUTER_PORT)])


def render_router_deployment(
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
        "metadata": owned_metadata(ref, name, **{COMPONENT_LABEL: selector[COMPONENT_LABEL]}),
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
                    **project_pod(spec),
                },
            },
        },
    }


ROUTER_RESOURCES = {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}}


def _router_resources(spec: SpeculationPilotSpec) -> Json:
    found = spec.router.resources
    if found is None:
        return ROUTER_RESOURCES
    return {key: dict(value) for key, value in (("requests", found.requests), ("limits", found.limits)) if value}


def render_routes_configmap(ref: PilotRef, table: RoutingTable) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": owned_metadata(ref, routes_name(ref.name), **{COMPONENT_LABEL: ROUTER_COMPONENT}),
        "data": render_routes(table),
    }
