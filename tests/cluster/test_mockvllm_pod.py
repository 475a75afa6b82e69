"""The mock vLLM as a pod on the local cluster: it becomes Ready, serves, and its /metrics scrape
cleanly with prometheus-client's parser."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.cluster

SPECULATIVE = {"method": "draft_model", "model": "org/draft-1b", "num_speculative_tokens": 4}


def pod_manifest(name: str) -> dict[str, Any]:
    """A speculative arm as the operator would run it: vLLM's flags, bound to the pod IP."""
    args = [
        "org/target-8b",
        "--host",
        "$(POD_IP)",
        "--port",
        "8000",
        "--served-model-name",
        "target",
        "--speculative-config",
        json.dumps(SPECULATIVE),
        "--time-scale",
        "0.05",
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "mock-vllm"}},
        "spec": {
            "containers": [
                {
                    "name": "vllm",
                    "image": "specpilot/specpilot:dev",
                    "command": ["specpilot", "mock-vllm"],
                    "args": args,
                    "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                    "ports": [{"name": "http", "containerPort": 8000}],
                    "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 1},
                    "resources": {"limits": {"nvidia.com/gpu": 1}},
                }
            ],
            "terminationGracePeriodSeconds": 5,
        },
    }


def test_the_mock_runs_as_a_pod_and_scrapes_cleanly(cluster: Any, namespace: str) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(pod_manifest("mock-vllm")))
    cluster.kubectl("wait", "-n", namespace, "--for=condition=Ready", "pod/mock-vllm", "--timeout=120s", timeout=150)
    pod_ip = cluster.get_json("pod", "mock-vllm", "-n", namespace)["status"]["podIP"]
    base = f"http://{pod_ip}:8000"

    body = json.dumps(
        {"model": "target", "prompt": "[scope:code] hello", "max_tokens": 32, "temperature": 0, "ignore_eos": True}
    )
    request = urllib.request.Request(
        base + "/v1/completions", data=body.encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        completion = json.load(response)
    assert completion["model"] == "target" and completion["usage"]["completion_tokens"] == 32

    with urllib.request.urlopen(base + "/metrics", timeout=10) as response:
        text = response.read().decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    generated = families["vllm:generation_tokens"].samples[0]
    assert generated.labels == {"model_name": "target", "engine": "0"} and generated.value == 32
    positions = {s.labels["position"] for s in families["vllm:spec_decode_num_accepted_tokens_per_pos"].samples}
    assert positions == {"0", "1", "2", "3"}
