"""A pilot's data plane on the local cluster, without the operator: two mock vLLM arms, their
Services, the routing ConfigMap, and the router as a pod with its ServiceAccount and RBAC."""

from __future__ import annotations

import json
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import yaml

from specpilot.testing.waiting import wait_until
from specpilot.wire.names import routes_name
from specpilot.wire.routes import ArmWeights, RoutingTable, ScopeRoute, render_routes
from tests.cluster.local import Cluster
from tests.cluster.pilots import router_samples

PILOT = "p1"
IMAGE = "specpilot/specpilot:dev"
TIME_SCALE = 0.1


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


def scope(name: str, *, spec: int, deadline: float | None = None) -> ScopeRoute:
    """A scope with no match rule: it takes the requests that name it in the scope header, as the
    tests' requests and the load generator's do."""
    return ScopeRoute(name=name, weights=ArmWeights(baseline=100 - spec, speculative=spec), deadline_seconds=deadline)


def routes_configmap(*scopes: ScopeRoute, generation: int = 1) -> str:
    table = RoutingTable(pilot=PILOT, generation=generation, updated_at=datetime.now(UTC), scopes=scopes)
    doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": routes_name(PILOT)}}
    return json.dumps({**doc, "data": render_routes(table)})


def _deployment(name: str, labels: dict[str, str], container: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"terminationGracePeriodSeconds": 5, "containers": [container], **spec},
            },
        },
    }


def _service(name: str, labels: dict[str, str], port: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"selector": labels, "ports": [{"name": "http", "port": port, "targetPort": "http"}]},
    }


def arm(name: str, *, replicas: int = 1, speculative: bool = False) -> list[dict[str, Any]]:
    labels = {"pilot": PILOT, "arm": name}
    command = ["specpilot", "mock-vllm", "m", "--host", "$(POD_IP)", "--port", "8000", "--time-scale", str(TIME_SCALE)]
    if speculative:
        command += [
            "--speculative-config",
            json.dumps({"method": "draft_model", "model": "d", "num_speculative_tokens": 3}),
        ]
    container = {
        "name": "vllm",
        "image": IMAGE,
        "command": command,
        "ports": [{"name": "http", "containerPort": 8000}],
        "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 1},
    }
    deployment = _deployment(f"{PILOT}-{name}", labels, container)
    deployment["spec"]["replicas"] = replicas
    return [deployment, _service(f"{PILOT}-{name}", labels, 8000)]


def router(namespace: str) -> list[dict[str, Any]]:
    labels = {"pilot": PILOT, "component": "router"}
    account = f"{PILOT}-router"
    rules = [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch"]},
    ]
    container = {
        "name": "router",
        "image": IMAGE,
        "command": ["specpilot", "router", "--namespace", namespace, "--pilot", PILOT, "--listen", "$(POD_IP):8080",
                    "--admin-listen", "$(POD_IP):9090", "--max-table-age", "0"],
        "ports": [{"name": "http", "containerPort": 8080}, {"name": "admin", "containerPort": 9090}],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "admin"}, "periodSeconds": 1},
    }  # fmt: skip
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": account}, "rules": rules},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": account},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        },
        _deployment(account, labels, container, serviceAccountName=account),
    ]


@dataclass(frozen=True)
class Pilot:
    """The deployed data plane; `url` and `admin` are the router pod's addresses."""

    cluster: Cluster
    namespace: str
    router_ip: str

    @property
    def url(self) -> str:
        return f"http://{self.router_ip}:8080"

    @property
    def admin(self) -> str:
        return f"http://{self.router_ip}:9090"

    def apply(self, manifest: str) -> None:
        self.cluster.kubectl("apply", "-n", self.namespace, "-f", "-", input=manifest)

    def routes(self) -> dict[str, Any]:
        result: dict[str, Any] = get_json(f"{self.admin}/routes")
        return result

    def samples(self) -> list[dict[str, Any]]:
        """Every request the router has served, oldest first, as its admin port sends them."""
        return [sample.to_json() for sample in router_samples(self.router_ip)]

    def metrics(self) -> str:
        with urllib.request.urlopen(f"{self.admin}/metrics", timeout=5) as resp:
            text: bytes = resp.read()
            return text.decode()


def deploy(cluster: Cluster, namespace: str, *scopes: ScopeRoute, speculative_replicas: int = 1) -> Pilot:
    """Deploy both arms, the routing table and the router; wait until the router is ready."""
    docs = [*arm("baseline"), *arm("speculative", replicas=speculative_replicas, speculative=True), *router(namespace)]
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=routes_configmap(*scopes))
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(docs))
    for name in ("baseline", "speculative", "router"):
        cluster.rollout(namespace, f"{PILOT}-{name}")
    pods = cluster.get_json("pods", "-n", namespace, "-l", "component=router")["items"]
    pilot = Pilot(cluster, namespace, pods[0]["status"]["podIP"])
    wait_until(
        "the router to see both arms",
        lambda: all(pilot.routes()["endpoints"][a] for a in ("baseline", "speculative")) or speculative_replicas == 0,
        timeout=30,
    )
    return pilot
