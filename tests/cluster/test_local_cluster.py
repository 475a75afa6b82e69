"""The local control plane is a real one: CEL validation, scheduling of GPU pods, pods that run
as processes and answer on their pod IPs, EndpointSlices, graceful deletion, clear failures."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from typing import Any

import yaml

from specpilot.testing.waiting import wait_until
from tests.cluster.local import CLUSTER_SH, Cluster

CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.probe.specpilot.io}
spec:
  group: probe.specpilot.io
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            x-kubernetes-validations:
            - rule: "self.replicas <= self.maxReplicas"
              message: "spec.replicas must not exceed spec.maxReplicas"
            properties:
              replicas: {type: integer}
              maxReplicas: {type: integer}
"""


def http_get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as resp:
        body: bytes = resp.read()
        return body.decode()


def deployment(name: str, image: str = "specpilot/specpilot:dev", replicas: int = 2, gpus: int = 1) -> str:
    doc = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "terminationGracePeriodSeconds": 5,
                    "containers": [
                        {
                            "name": "web",
                            "image": image,
                            "command": ["python", "-m", "http.server", "--bind", "$(POD_IP)", "8000"],
                            "ports": [{"name": "http", "containerPort": 8000}],
                            "readinessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1},
                            "resources": {"limits": {"nvidia.com/gpu": gpus}},
                        }
                    ],
                },
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
    }
    return yaml.safe_dump_all([doc, service])


def test_crd_cel_rule_rejects_a_bad_object_with_its_message(cluster: Cluster, namespace: str) -> None:
    cluster.kubectl("apply", "-f", "-", input=CRD)
    cluster.kubectl("wait", "--for=condition=Established", "crd/gadgets.probe.specpilot.io", "--timeout=30s")
    good = (
        "apiVersion: probe.specpilot.io/v1\nkind: Gadget\nmetadata: {name: ok}\nspec: {replicas: 1, maxReplicas: 2}\n"
    )
    bad = good.replace("name: ok", "name: bad").replace("replicas: 1,", "replicas: 3,")
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=good)
    rejected = cluster.kubectl("apply", "-n", namespace, "-f", "-", input=bad, check=False)
    assert rejected.returncode != 0
    assert "spec.replicas must not exceed spec.maxReplicas" in rejected.stderr


def test_gpu_pods_run_as_processes_answer_on_pod_ips_and_fill_endpointslices(cluster: Cluster, namespace: str) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=deployment("web"))
    cluster.rollout(namespace, "web", timeout=90)
    pods = cluster.get_json("pods", "-n", namespace, "-l", "app=web")["items"]
    assert len(pods) == 2
    ips = sorted(p["status"]["podIP"] for p in pods)
    assert len(set(ips)) == 2
    for pod in pods:
        assert pod["spec"]["nodeName"] == "specpilot-local"
        assert "Directory listing" in http_get(f"http://{pod['status']['podIP']}:8000/")
        pid = int(pod["status"]["containerStatuses"][0]["containerID"].removeprefix("local://"))
        assert os.path.exists(f"/proc/{pid}")

    def slice_ips() -> list[str]:
        slices = cluster.get_json("endpointslices", "-n", namespace, "-l", "kubernetes.io/service-name=web")
        return sorted(
            a
            for s in slices["items"]
            for e in s.get("endpoints") or []
            if e.get("conditions", {}).get("ready")
            for a in e["addresses"]
        )

    try:
        wait_until("EndpointSlice with both pod IPs", lambda: slice_ips() == ips, timeout=30)
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}: slices have {slice_ips()}, pods {ips}\n{cluster.pods_report(namespace)}"
        ) from None


def test_deleting_the_deployment_stops_the_processes(cluster: Cluster, namespace: str) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=deployment("gone", replicas=1, gpus=0))
    cluster.rollout(namespace, "gone", timeout=90)
    pod = cluster.get_json("pods", "-n", namespace, "-l", "app=gone")["items"][0]
    pid = int(pod["status"]["containerStatuses"][0]["containerID"].removeprefix("local://"))
    ip = pod["status"]["podIP"]
    cluster.kubectl("delete", "-n", namespace, "deployment/gone")
    wait_until("pod object removed", lambda: not cluster.get_json("pods", "-n", namespace, "-l", "app=gone")["items"])
    assert not os.path.exists(f"/proc/{pid}")
    try:
        http_get(f"http://{ip}:8000/")
    except OSError:
        pass
    else:
        raise AssertionError(f"{ip}:8000 still answers after the pod was deleted")


def test_unrunnable_image_gets_a_clear_waiting_reason(cluster: Cluster, namespace: str) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "foreign"},
        "spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}]},
    }
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(pod))

    def waiting() -> dict[str, str] | None:
        statuses = cluster.get_json("pod", "-n", namespace, "foreign").get("status", {}).get("containerStatuses")
        return statuses[0]["state"].get("waiting") if statuses else None

    state = wait_until("a waiting reason", waiting, timeout=30)
    assert state["reason"] == "ImageNotRunnable"
    assert "'nginx:1.27'" in state["message"] and "specpilot/specpilot" in state["message"]
    assert cluster.get_json("pod", "-n", namespace, "foreign")["status"]["phase"] == "Pending"


def test_crashing_container_restarts_and_reports_its_exit(cluster: Cluster, namespace: str) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "crash"},
        "spec": {
            "restartPolicy": "Always",
            "containers": [
                {"name": "c", "image": "specpilot/specpilot:dev", "command": ["python", "-c", "raise SystemExit(3)"]}
            ],
        },
    }
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(pod))

    def restarted() -> dict[str, Any] | None:
        statuses = cluster.get_json("pod", "-n", namespace, "crash").get("status", {}).get("containerStatuses")
        return statuses[0] if statuses and statuses[0]["restartCount"] >= 1 else None

    status = wait_until("a restart", restarted, timeout=30)
    assert status["lastState"]["terminated"]["exitCode"] == 3


def test_a_failing_liveness_probe_restarts_on_its_own_period_not_the_readiness_one(
    cluster: Cluster, namespace: str
) -> None:
    web = {
        "name": "web",
        "image": "specpilot/specpilot:dev",
        "command": ["python", "-m", "http.server", "--bind", "$(POD_IP)", "8000"],
        "ports": [{"name": "http", "containerPort": 8000}],
        "readinessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1},
        "livenessProbe": {"httpGet": {"path": "/gone", "port": "http"}, "periodSeconds": 4, "failureThreshold": 3},
    }
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "unwell"}, "spec": {"containers": [web]}}
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(pod))

    def status() -> dict[str, Any]:
        statuses = cluster.get_json("pod", "-n", namespace, "unwell").get("status", {}).get("containerStatuses")
        return dict(statuses[0]) if statuses else {}

    wait_until("the container running", lambda: "running" in status().get("state", {}), timeout=30)
    started = time.monotonic()
    wait_until("a liveness restart", lambda: status().get("restartCount", 0) >= 1, timeout=60, every=0.5)
    # Three failures four seconds apart: the first restart comes no sooner than 8 s after the start,
    # however often readiness looks.
    assert time.monotonic() - started >= 7.5


def test_pod_service_account_gets_rbac_scoped_credentials(cluster: Cluster, namespace: str) -> None:
    """A pod's process talks to the API server as its ServiceAccount, so RBAC applies to it."""
    script = (
        "from kubernetes import client, config\n"
        "config.load_kube_config()\n"
        "v1 = client.CoreV1Api()\n"
        "try:\n"
        "    v1.list_namespaced_secret('kube-system')\n"
        "    print('ALLOWED')\n"
        "except client.ApiException as e:\n"
        "    print('DENIED', e.status)\n"
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "sa"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "specpilot/specpilot:dev", "command": ["python", "-c", script]}],
        },
    }
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(pod))
    wait_until(
        "the pod to finish",
        lambda: cluster.get_json("pod", "-n", namespace, "sa").get("status", {}).get("phase") == "Succeeded",
        timeout=60,
    )
    node_dir = cluster.kubeconfig.parent / "node" / "pods"
    uid = cluster.get_json("pod", "-n", namespace, "sa")["metadata"]["uid"]
    (log_file,) = node_dir.glob(f"{namespace}_sa_{uid}/c.log")
    assert "DENIED 403" in log_file.read_text()


def test_deletion_waits_the_grace_period_then_kills(cluster: Cluster, namespace: str) -> None:
    """A process that ignores SIGTERM lives through terminationGracePeriodSeconds, then is killed."""
    # It says when SIGTERM came, and then that it lives on, every quarter second (its log is its clock).
    stubborn = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: print('TERM', flush=True))\n"
        "for _ in range(2400):\n"
        "    time.sleep(0.25)\n"
        "    print('alive', flush=True)\n"
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "stubborn"},
        "spec": {
            "terminationGracePeriodSeconds": 3,
            "containers": [{"name": "c", "image": "specpilot/specpilot:dev", "command": ["python", "-c", stubborn]}],
        },
    }
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(pod))
    cluster.kubectl("wait", "-n", namespace, "--for=condition=Ready", "pod/stubborn", "--timeout=30s")
    body = cluster.get_json("pod", "-n", namespace, "stubborn")
    status, uid = body["status"], body["metadata"]["uid"]
    pid = int(status["containerStatuses"][0]["containerID"].removeprefix("local://"))
    (log_file,) = (cluster.kubeconfig.parent / "node" / "pods").glob(f"{namespace}_stubborn_{uid}/c.log")
    started = time.monotonic()
    cluster.kubectl("delete", "-n", namespace, "pod/stubborn", "--wait=false")

    def alive_after_term() -> int:
        _, term, after = log_file.read_text().partition("TERM\n")
        return after.count("alive") if term else 0

    wait_until(
        "the process to live 1.5 s past its SIGTERM, by its own log, or to go",
        lambda: alive_after_term() >= 6 or not os.path.exists(f"/proc/{pid}"),
        timeout=30,
    )
    assert os.path.exists(f"/proc/{pid}"), "killed before its grace period ended"
    wait_until(
        "the pod object to go",
        lambda: not cluster.kubectl("get", "-n", namespace, "pod/stubborn", check=False).stdout,
        timeout=30,
    )
    assert time.monotonic() - started >= 3
    assert not os.path.exists(f"/proc/{pid}")


def test_a_killed_node_agent_takes_its_containers_with_it(cluster: Cluster, namespace: str) -> None:
    """However the agent dies, no container outlives it to hold a pod IP against the next cluster."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "orphan"},
        "spec": {"containers": [{"name": "c", "image": "specpilot/specpilot:dev", "command": ["sleep", "600"]}]},
    }
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(pod))
    cluster.kubectl("wait", "-n", namespace, "--for=condition=Ready", "pod/orphan", "--timeout=30s")
    status = cluster.get_json("pod", "-n", namespace, "orphan")["status"]
    pid = int(status["containerStatuses"][0]["containerID"].removeprefix("local://"))
    agent = int((cluster.kubeconfig.parent / "run" / "localnode.pid").read_text())
    os.kill(agent, signal.SIGKILL)
    try:
        wait_until("the container to die with its agent", lambda: not os.path.exists(f"/proc/{pid}"), timeout=10)
    finally:
        cluster.kubectl("delete", "-n", namespace, "pod/orphan", "--grace-period=0", "--force", check=False)
        subprocess.run([str(CLUSTER_SH), "up"], check=True, capture_output=True, timeout=120)
