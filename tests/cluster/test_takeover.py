"""A pilot of the team's own Deployment that serves through the Service its clients already use
(`spec.workloadRef` with `spec.router.takeover`), on a real cluster: the Service selects the routers
once they are ready, and after an operator SIGKILL with the Service taken and the pilot deleted
meanwhile, the restarted operator puts it back exactly as it was before anything of the pilot goes.

The local cluster has no kube-proxy: the client here resolves the Service through its EndpointSlices
before each request, as kube-proxy would, and sends the request to one of its ready endpoints."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e.local.demo import team_service

from specpilot.testing.waiting import wait_until
from tests.cluster.local import ROOT, Cluster, in_background
from tests.cluster.operator_process import Operator, pilot, running_operator, wait_ready

pytestmark = pytest.mark.cluster

TEAM = [
    d for d in yaml.safe_load_all((ROOT / "manifests/demo/team-vllm.yaml").read_text()) if d["kind"] == "Deployment"
]
SERVICE: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {"name": "llm"},
    "spec": {"selector": {"app": "team-vllm"}, "ports": [{"name": "web", "port": 80, "targetPort": 8000}]},
}


@pytest.fixture(scope="module")
def operator(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    with running_operator(cluster, tmp_path_factory.mktemp("takeover") / "operator.log") as running:
        yield running


def takeover_pilot() -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "manifests/demo/pilot.yaml").read_text())
    spec = doc["spec"]
    spec.pop("engine")
    spec.pop("baseline")
    spec["workloadRef"] = {"name": "team-vllm"}
    spec["router"]["takeover"] = {"service": "llm"}
    return doc


def service_spec(cluster: Cluster, namespace: str) -> dict[str, Any]:
    found = json.loads(cluster.kubectl("get", "service", "llm", "-n", namespace, "-o", "json").stdout)
    return {key: found["spec"][key] for key in ("selector", "ports")}


def endpoints(cluster: Cluster, namespace: str) -> list[str]:
    """The Service's ready endpoints, address:port, from its EndpointSlices."""
    out = cluster.kubectl(
        "get", "endpointslices", "-n", namespace, "-l", "kubernetes.io/service-name=llm", "-o", "json", check=False
    )
    if out.returncode != 0:
        return []
    found = []
    for piece in json.loads(out.stdout)["items"]:
        port = next((p["port"] for p in piece.get("ports") or []), None)
        for endpoint in piece.get("endpoints") or []:
            if port is not None and (endpoint.get("conditions") or {}).get("ready"):
                found += [f"{address}:{port}" for address in endpoint["addresses"]]
    return sorted(found)


@dataclass
class Sent:
    started: float
    endpoint: str
    ok: bool
    error: str = ""


@contextmanager
def clients(cluster: Cluster, namespace: str) -> Iterator[list[Sent]]:
    """Requests through the Service one after another, each to an endpoint resolved just before it."""
    sent: list[Sent] = []

    def run(stop: threading.Event) -> None:
        body = json.dumps({"model": "demo", "prompt": "hello", "max_tokens": 8}).encode()
        turn = 0
        while not stop.is_set():
            started, found = time.monotonic(), endpoints(cluster, namespace)
            if not found:
                stop.wait(0.2)  # a moment for the Service's endpoints, unless the clients stop
                continue
            endpoint = found[turn % len(found)]
            turn += 1
            request = urllib.request.Request(
                f"http://{endpoint}/v1/completions",
                data=body,
                headers={"Content-Type": "application/json", "x-task": "chat"},
            )
            try:
                with urllib.request.urlopen(request, timeout=30) as answer:
                    sent.append(Sent(started, endpoint, answer.status == 200))
            except OSError as error:
                sent.append(Sent(started, endpoint, False, str(error)))

    with in_background(run):
        yield sent


def test_the_service_serves_the_routers_and_is_put_back_exactly_after_a_sigkill(
    cluster: Cluster, operator: Operator, namespace: str, tmp_path: Path
) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=team_service(namespace))
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(SERVICE))
    wait_until("the team's pods ready", lambda: len(endpoints(cluster, namespace)) == 2, timeout=120, every=1)
    original = service_spec(cluster, namespace)
    team_ips = set(endpoints(cluster, namespace))
    with clients(cluster, namespace) as sent:
        cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(takeover_pilot()))
        wait_ready(cluster, operator, namespace)

        def taken() -> bool:
            return (pilot(cluster, namespace).get("status", {}).get("takeover") or {}).get("phase") == "Taken"

        wait_until("the Service taken over", taken, timeout=60, every=1)
        recorded = pilot(cluster, namespace)["status"]["takeover"]
        assert recorded["selector"] == original["selector"] and recorded["ports"] == original["ports"]
        routers = wait_until(
            "the Service's endpoints are the routers",
            lambda: (found := set(endpoints(cluster, namespace))) and not found & team_ips and found,
            timeout=60,
            every=0.5,
        )
        wait_until("requests served by the routers", lambda: sum(s.ok and s.endpoint in routers for s in sent) >= 5)

        # The worst moment: the Service taken, the operator gone, the pilot deleted meanwhile.
        operator.kill()
        cluster.kubectl("delete", "speculationpilot", "demo", "-n", namespace, "--wait=false")
        served = sum(s.ok and s.endpoint in routers for s in sent)
        wait_until(
            "requests served by the routers with the operator down",
            lambda: sum(s.ok and s.endpoint in routers for s in sent) >= served + 5,
        )
        assert service_spec(cluster, namespace) != original, "nothing restores it while the operator is down"
        operator.start()
        restored_at = wait_until(
            "the Service put back",
            lambda: time.monotonic() if service_spec(cluster, namespace) == original else None,
            timeout=60,
            every=0.2,
        )
        wait_until(
            "the pilot gone",
            lambda: cluster.kubectl("get", "speculationpilot", "demo", "-n", namespace, check=False).returncode != 0,
            timeout=120,
            every=1,
        )
        wait_until("requests to the team's pods again", lambda: sum(s.ok and s.endpoint in team_ips for s in sent) > 5)
    after = [s for s in sent if s.started > restored_at]
    failed = [s for s in after if not s.ok]
    routed = sum(s.ok and s.endpoint in routers for s in sent)
    print(f"{len(sent)} requests, {routed} through the routers, {len(after)} after the restore, {len(failed)} failed")
    assert after and not failed, failed[:5]
    assert service_spec(cluster, namespace) == original
    assert set(endpoints(cluster, namespace)) == team_ips
    cluster.kubectl("delete", "persistentvolume", f"{namespace}-team-vllm-models", "--wait=false", check=False)
