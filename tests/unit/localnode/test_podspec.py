"""Pod spec -> process translation and pod status, as the local node agent computes them."""

from __future__ import annotations

from typing import Any

import pytest

from specpilot.localnode import podspec
from specpilot.localnode.podspec import ContainerState, PodRefs

REFS = PodRefs(
    name="p", namespace="ns", uid="u1", node_name="n", service_account="sa", pod_ip="127.1.0.7", host_ip="127.0.0.1"
)
REPOS = ["specpilot/specpilot", "ghcr.io/specpilot/specpilot"]


@pytest.mark.parametrize(
    ("image", "ok"),
    [
        ("specpilot/specpilot:dev", True),
        ("specpilot/specpilot", True),
        ("ghcr.io/specpilot/specpilot:0.1.0@sha256:abc", True),
        ("localhost:5000/specpilot/specpilot:dev", False),
        ("nginx:1.27", False),
        ("specpilot/specpilot-other:dev", False),
    ],
)
def test_only_the_projects_image_is_runnable(image: str, ok: bool) -> None:
    assert podspec.is_runnable(image, REPOS) is ok


def test_not_runnable_message_names_image_and_fix() -> None:
    msg = podspec.not_runnable_message("nginx:1.27", REPOS)
    assert "'nginx:1.27'" in msg and "specpilot/specpilot" in msg


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("--host=$(POD_IP)", "--host=127.1.0.7"),
        ("$(MISSING)", "$(MISSING)"),
        ("$$(POD_IP)", "$(POD_IP)"),
        ("a$(A)b$(A)", "a1b1"),
    ],
)
def test_expand_follows_kubernetes_rules(text: str, expected: str) -> None:
    assert podspec.expand(text, {"POD_IP": "127.1.0.7", "A": "1"}) == expected


def lookup_from(data: dict[str, dict[str, str]]) -> Any:
    def lookup(kind: str, name: str, key: str | None, optional: bool) -> Any:
        if name not in data:
            if optional:
                return None
            raise ValueError(f"{kind} {name} missing")
        return data[name] if key is None else data[name].get(key)

    return lookup


def test_container_env_resolves_downward_api_refs_and_order() -> None:
    container = {
        "name": "c",
        "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}],
        "env": [
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "URL", "value": "http://$(IP):8000"},
            {"name": "K", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}},
            {"name": "OPT", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "x", "optional": True}}},
        ],
    }
    env = podspec.container_env(container, REFS, lookup=lookup_from({"cm": {"k": "v"}}), base={"PATH": "/bin"})
    assert env["IP"] == "127.1.0.7" and env["NS"] == "ns" and env["URL"] == "http://127.1.0.7:8000"
    assert env["K"] == "v" and env["CM_k"] == "v" and "OPT" not in env
    assert env["POD_IP"] == "127.1.0.7" and env["PATH"] == "/bin"


def test_unsupported_field_ref_is_an_error() -> None:
    container = {"name": "c", "env": [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels"}}}]}
    with pytest.raises(ValueError, match=r"metadata\.labels"):
        podspec.container_env(container, REFS, lookup=lookup_from({}), base={})


def test_argv_defaults_to_the_image_entrypoint() -> None:
    assert podspec.container_argv({"args": ["router", "--listen=$(POD_IP):8080"]}, {"POD_IP": "127.1.0.2"}) == [
        "specpilot",
        "router",
        "--listen=127.1.0.2:8080",
    ]
    assert podspec.container_argv({"command": ["python", "-V"]}, {}) == ["python", "-V"]


def test_probe_parsing_resolves_named_ports_and_defaults() -> None:
    container = {"name": "c", "ports": [{"name": "http", "containerPort": 8000}]}
    probe = podspec.parse_probe({"httpGet": {"path": "/health", "port": "http"}}, container, "127.1.0.3")
    assert probe is not None
    assert (probe.kind, probe.target, probe.period, probe.failure_threshold) == (
        "http",
        "http://127.1.0.3:8000/health",
        10.0,
        3,
    )
    assert podspec.parse_probe(None, container, "x") is None
    with pytest.raises(ValueError, match="no port named 'metrics'"):
        podspec.parse_probe({"tcpSocket": {"port": "metrics"}}, container, "x")


@pytest.mark.parametrize(
    ("policy", "code", "restart"),
    [("Always", 0, True), ("Always", 1, True), ("OnFailure", 0, False), ("OnFailure", 2, True), ("Never", 1, False)],
)
def test_restart_policy(policy: str, code: int, restart: bool) -> None:
    assert podspec.restart_wanted(policy, code) is restart


def running(ready: bool) -> ContainerState:
    return ContainerState(name="c", image="i", state="running", pid=42, started_at="t0", ready=ready)


def terminated(code: int) -> ContainerState:
    return ContainerState(name="c", image="i", state="terminated", exit_code=code, started_at="t0", finished_at="t1")


@pytest.mark.parametrize(
    ("policy", "containers", "phase"),
    [
        ("Always", [running(True)], "Running"),
        ("Always", [ContainerState(name="c", image="i", state="waiting", reason="ImageNotRunnable")], "Pending"),
        ("Never", [terminated(0)], "Succeeded"),
        ("Never", [terminated(3)], "Failed"),
        ("OnFailure", [terminated(0), running(False)], "Running"),
    ],
    ids=["running", "not-runnable", "succeeded", "failed", "partly-done"],
)
def test_pod_phase(policy: str, containers: list[ContainerState], phase: str) -> None:
    assert podspec.pod_phase(policy, containers) == phase


def test_pod_status_ready_conditions_keep_transition_time_until_they_change() -> None:
    first = podspec.pod_status(
        policy="Always", containers=[running(False)], pod_ip="127.1.0.9", host_ip="127.0.0.1", start_time="s", now="t1"
    )
    conds = {c["type"]: c for c in first["conditions"]}
    assert conds["Ready"]["status"] == "False" and conds["Ready"]["reason"] == "ContainersNotReady"
    assert first["podIP"] == "127.1.0.9" and first["containerStatuses"][0]["containerID"] == "local://42"
    again = podspec.pod_status(
        policy="Always",
        containers=[running(False)],
        pod_ip="127.1.0.9",
        host_ip="127.0.0.1",
        start_time="s",
        now="t2",
        previous_conditions=first["conditions"],
    )
    assert again == first
    ready = podspec.pod_status(
        policy="Always",
        containers=[running(True)],
        pod_ip="127.1.0.9",
        host_ip="127.0.0.1",
        start_time="s",
        now="t3",
        previous_conditions=first["conditions"],
    )
    ready_conds = {c["type"]: c for c in ready["conditions"]}
    assert ready_conds["Ready"] == {
        "type": "Ready",
        "status": "True",
        "lastProbeTime": None,
        "lastTransitionTime": "t3",
    }
    assert ready_conds["PodScheduled"]["lastTransitionTime"] == "t1"


def test_waiting_status_carries_reason_and_message() -> None:
    c = ContainerState(name="c", image="nginx", state="waiting", reason="ImageNotRunnable", message="why")
    status = podspec.pod_status(
        policy="Always", containers=[c], pod_ip="127.1.0.9", host_ip="127.0.0.1", start_time="s", now="t"
    )
    assert status["containerStatuses"][0]["state"] == {"waiting": {"reason": "ImageNotRunnable", "message": "why"}}


def test_a_condition_another_writer_overwrote_is_seen_and_timestamps_alone_are_not() -> None:
    ready = [ContainerState(name="c", image="i", state="running", ready=True)]
    kwargs = {"policy": "Always", "pod_ip": "198.18.0.2", "host_ip": "127.0.0.1", "start_time": "t0"}
    written = podspec.pod_status(containers=ready, now="t1", **kwargs)
    later = podspec.pod_status(containers=ready, now="t2", **kwargs)
    assert not podspec.conditions_overwritten(later, written)
    marked = {
        **written,
        "conditions": [{**c, "status": "False"} if c["type"] == "Ready" else c for c in written["conditions"]],
    }
    assert podspec.conditions_overwritten(marked, written)
    assert podspec.conditions_overwritten({}, written)  # conditions gone
