"""The operator on a real apiserver, with pods as processes: a pilot applied with kubectl becomes arms,
a router and a status; drift is put back; a bad spec deploys nothing; a draft change rolls one arm;
a SIGKILLed operator resumes without a rollout or a repeated Event; deletion removes everything."""

from __future__ import annotations

import copy
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from specpilot.testing.waiting import wait_until
from tests.cluster.local import ROOT, Cluster
from tests.cluster.operator_process import (
    Operator,
    children,
    condition,
    events,
    pilot,
    running_operator,
    wait_ready,
)
from tests.cluster.pilots import router_ip

pytestmark = pytest.mark.cluster

DEMO = yaml.safe_load((ROOT / "manifests" / "examples" / "local-demo.yaml").read_text())
# These tests are about reconciling, not judging: the scopes wait for a warm-up they never reach.
DEMO["spec"]["analysis"]["warmup"] = "1h"
ARMS = ("baseline", "speculative", "control", "alternative")


@pytest.fixture(scope="module")
def operator(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    with running_operator(cluster, tmp_path_factory.mktemp("operator") / "operator.log") as running:
        yield running


def apply(cluster: Cluster, namespace: str, doc: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(doc))


def demo(**spec_changes: Any) -> dict[str, Any]:
    doc = copy.deepcopy(DEMO)
    doc["spec"].update(spec_changes)
    return doc


def generations(cluster: Cluster, namespace: str) -> dict[str, int]:
    items = cluster.get_json("deployments", "-n", namespace, "-l", "specpilot.io/pilot")["items"]
    return {d["metadata"]["name"]: d["metadata"]["generation"] for d in items}


def pod_uids(cluster: Cluster, namespace: str, arm: str) -> set[str]:
    items = cluster.get_json("pods", "-n", namespace, "-l", f"specpilot.io/arm={arm}")["items"]
    return {p["metadata"]["uid"] for p in items if not p["metadata"].get("deletionTimestamp")}


def chat(ip: str, task: str = "chat", max_tokens: int = 8, timeout: float = 30) -> dict[str, Any]:
    body = {"model": "demo", "messages": [{"role": "user", "content": "hello"}], "max_tokens": max_tokens}
    request = urllib.request.Request(
        f"http://{ip}:8080/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "x-task": task},
    )
    with urllib.request.urlopen(request, timeout=timeout) as resp:
        result: dict[str, Any] = json.loads(resp.read())
    return result


def test_applied_pilot_gets_arms_router_and_a_ready_status(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    apply(cluster, namespace, demo())
    proc = cluster.kubectl(
        "wait", "-n", namespace, "--for=condition=Ready", "speculationpilot/demo", "--timeout=120s", check=False
    )
    assert proc.returncode == 0, f"{proc.stderr}\n{cluster.pods_report(namespace)}\n{operator.tail()}"
    body = pilot(cluster, namespace)
    status = body["status"]
    assert status["phase"] == "Progressing"  # every scope still waits to pilot
    assert condition(body, "Progressing")["reason"] == "ScopesPiloting"  # type: ignore[index]
    assert status["observedGeneration"] == body["metadata"]["generation"]
    assert condition(body, "ArmsReady")["status"] == "True"  # type: ignore[index]
    assert condition(body, "InvalidSpec")["status"] == "False"  # type: ignore[index]
    hashes = {arm: status["arms"][arm]["configHash"] for arm in ARMS}
    assert len(set(hashes.values())) == 3, "the three engines are rendered differently"
    assert hashes["control"] == hashes["baseline"], "the control arm runs exactly the baseline's engine"
    for arm in ARMS:
        assert (status["arms"][arm]["readyReplicas"], status["arms"][arm]["gpus"]) == (1, 1)
        deployment = cluster.get_json("deployment", f"demo-{arm}", "-n", namespace)
        template = deployment["spec"]["template"]
        assert template["metadata"]["annotations"]["specpilot.io/config-hash"] == hashes[arm]
        assert deployment["metadata"]["ownerReferences"][0]["uid"] == body["metadata"]["uid"]
    assert [s["name"] for s in status["scopes"]] == ["chat", "code"]
    assert all(s["state"] == "Ordinary" and s["weight"] == 0 for s in status["scopes"])
    assert status["speculativeScopes"] == "0/2"
    # the router answers OpenAI requests on its pod IP, through the arms
    answer = chat(router_ip(cluster, namespace))
    assert answer["usage"]["completion_tokens"] == 8
    routes = json.loads(cluster.get_json("configmap", "demo-routes", "-n", namespace)["data"]["routes.json"])
    assert routes["generation"] == status["routes"]["generation"]
    reasons = [e["reason"] for e in events(cluster, namespace)]
    assert reasons.count("PilotCreated") == 1 and reasons.count("PilotReady") == 1, reasons
    assert "Synced" not in reasons
    metrics = operator.metrics()
    assert 'specpilot_operator_reconciles_total{result="ok"}' in metrics
    assert 'specpilot_operator_apply_seconds_count{kind="Deployment"}' in metrics


def test_edited_child_is_reverted_and_deleted_one_comes_back(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    apply(cluster, namespace, demo(analysis={**DEMO["spec"]["analysis"], "interval": "10s"}))
    wait_ready(cluster, operator, namespace)
    cluster.kubectl("scale", "-n", namespace, "deployment/demo-speculative", "--replicas=2")
    original = cluster.get_json("service", "demo-baseline", "-n", namespace)["spec"]["selector"]
    cluster.kubectl(
        "patch",
        "-n",
        namespace,
        "service/demo-baseline",
        "--type=merge",
        "-p",
        '{"spec":{"selector":{"specpilot.io/arm":"speculative"}}}',
    )
    cluster.kubectl("delete", "-n", namespace, "deployment/demo-alternative", "--wait=false")
    started = time.monotonic()

    def restored() -> bool:
        objects = children(cluster, namespace)
        alternative = objects.get("Deployment/demo-alternative")
        return (
            objects["Deployment/demo-speculative"]["spec"]["replicas"] == 1
            and objects["Service/demo-baseline"]["spec"]["selector"] == original
            and alternative is not None
            and not alternative["metadata"].get("deletionTimestamp")
        )

    wait_until("the operator to put its children back", restored, timeout=20)
    assert time.monotonic() - started < 10 + 5, "drift is corrected within one interval"
    wait_ready(cluster, operator, namespace)
    restorations = [e["message"] for e in events(cluster, namespace) if e["reason"] == "ChildRestored"]
    assert any("demo-speculative" in m for m in restorations), restorations
    assert any("demo-alternative" in m for m in restorations), restorations


def test_spec_only_the_operator_can_reject_gets_invalid_spec_and_no_children(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    scopes = copy.deepcopy(DEMO["spec"]["scopes"])
    scopes[0]["match"]["headers"][0] = {"name": "x-task", "type": "RegularExpression", "value": "chat(?P<broken"}
    apply(cluster, namespace, demo(scopes=scopes))  # the API server accepts it: CEL cannot compile Python regexes

    def invalid() -> dict[str, Any] | None:
        found = condition(pilot(cluster, namespace), "InvalidSpec")
        return found if found is not None and found["status"] == "True" else None

    found = wait_until("InvalidSpec", invalid, timeout=30)
    assert "spec.scopes[0].match.headers[0].value" in found["message"]
    assert "not a valid regular expression" in found["message"]
    assert pilot(cluster, namespace)["status"]["phase"] == "Degraded"
    operator.wait_reconciles(2)  # a few reconciles later, still nothing
    assert children(cluster, namespace) == {}
    assert [e["reason"] for e in events(cluster, namespace)] == ["SpecInvalid"]


def test_invalid_change_keeps_what_runs_as_it_was(cluster: Cluster, operator: Operator, namespace: str) -> None:
    apply(cluster, namespace, demo())
    wait_ready(cluster, operator, namespace)
    before = generations(cluster, namespace)
    scopes = copy.deepcopy(DEMO["spec"]["scopes"])
    scopes[1]["match"] = copy.deepcopy(scopes[0]["match"])  # repeats the earlier scope's match
    apply(cluster, namespace, demo(scopes=scopes, speculative={"draft": {"model": "mock/draft-2b"}}))
    wait_until(
        "InvalidSpec", lambda: (condition(pilot(cluster, namespace), "InvalidSpec") or {}).get("status") == "True"
    )
    message = condition(pilot(cluster, namespace), "InvalidSpec")["message"]  # type: ignore[index]
    assert "spec.scopes[1].match" in message
    operator.wait_reconciles(2)
    assert generations(cluster, namespace) == before, "nothing new is deployed"
    assert chat(router_ip(cluster, namespace))["usage"]["completion_tokens"] == 8, "what ran keeps serving"


def test_draft_change_rolls_the_speculative_arm_alone(cluster: Cluster, operator: Operator, namespace: str) -> None:
    apply(cluster, namespace, demo())
    wait_ready(cluster, operator, namespace)
    before, hashes = generations(cluster, namespace), pilot(cluster, namespace)["status"]["arms"]
    pods = {arm: pod_uids(cluster, namespace, arm) for arm in ("baseline", "alternative")}
    draft = {**DEMO["spec"]["speculative"]["draft"], "numSpeculativeTokens": 2}
    apply(cluster, namespace, demo(speculative={"draft": draft}))
    wait_until(
        "the new generation observed",
        lambda: pilot(cluster, namespace)["status"]["observedGeneration"] == 2,
        timeout=30,
    )
    wait_ready(cluster, operator, namespace)
    after = generations(cluster, namespace)
    assert after["demo-speculative"] == before["demo-speculative"] + 1
    assert {k: v for k, v in after.items() if k != "demo-speculative"} == {
        k: v for k, v in before.items() if k != "demo-speculative"
    }
    assert {arm: pod_uids(cluster, namespace, arm) for arm in pods} == pods, "other arms' pods untouched"
    status = pilot(cluster, namespace)["status"]
    assert status["arms"]["speculative"]["configHash"] != hashes["speculative"]["configHash"]
    assert status["arms"]["baseline"]["configHash"] == hashes["baseline"]["configHash"]
    args = cluster.get_json("deployment", "demo-speculative", "-n", namespace)["spec"]["template"]["spec"][
        "containers"
    ][0]["args"]
    assert json.loads(args[args.index("--speculative-config") + 1])["num_speculative_tokens"] == 2
    assert "DraftChanged" in [e["reason"] for e in events(cluster, namespace)]


def test_engine_image_the_nodes_cannot_run_is_degraded_naming_the_field(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    apply(cluster, namespace, demo(engine={**DEMO["spec"]["engine"], "image": "vllm/vllm-openai:v0.33.0"}))

    def degraded() -> dict[str, Any] | None:
        found = condition(pilot(cluster, namespace), "Degraded")
        return found if found is not None and found["status"] == "True" else None

    found = wait_until("Degraded", degraded, timeout=60)
    assert "spec.engine.image" in found["message"] and "ImageNotRunnable" in found["message"]
    assert pilot(cluster, namespace)["status"]["phase"] == "Degraded"
    assert "ArmUnavailable" in [e["reason"] for e in events(cluster, namespace)]


def test_operator_killed_and_restarted_changes_nothing(cluster: Cluster, operator: Operator, namespace: str) -> None:
    apply(cluster, namespace, demo())
    wait_ready(cluster, operator, namespace)
    routes = "ConfigMap/demo-routes"  # rewritten every interval on purpose (updatedAt)

    def written() -> tuple[dict[str, str], dict[str, Any], int]:
        versions = {key: obj["metadata"]["resourceVersion"] for key, obj in children(cluster, namespace).items()}
        return (
            {k: v for k, v in versions.items() if k != routes},
            pilot(cluster, namespace)["status"],
            len(events(cluster, namespace)),
        )

    def settled() -> bool:
        before = written()
        operator.wait_reconciles(1)
        return written() == before

    # the last status write and Events have landed: a whole reconcile changes nothing
    wait_until("the pilot's children, status and Events unchanged over a reconcile", settled, timeout=120, every=0)
    versions = {key: obj["metadata"]["resourceVersion"] for key, obj in children(cluster, namespace).items()}
    status, seen = pilot(cluster, namespace)["status"], len(events(cluster, namespace))
    operator.kill()
    operator.start()
    operator.wait_reconciles(2, since=0)  # several reconciles of the restarted operator
    after = {key: obj["metadata"]["resourceVersion"] for key, obj in children(cluster, namespace).items()}
    assert {k: v for k, v in after.items() if k != routes} == {k: v for k, v in versions.items() if k != routes}
    assert pilot(cluster, namespace)["status"] == status
    assert len(events(cluster, namespace)) == seen, [e["reason"] for e in events(cluster, namespace)]


class Load:
    """Clients streaming through the router back to back; a refused connection was never accepted."""

    def __init__(self, ip: str, clients: int = 4) -> None:
        self.ip = ip
        self.ok = 0
        self.refused = 0
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(clients)]
        for thread in self._threads:
            thread.start()

    def _run(self) -> None:
        body = {"model": "demo", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16, "stream": True}
        while not self._stop.is_set():
            request = urllib.request.Request(
                f"http://{self.ip}:8080/v1/chat/completions",
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json", "x-task": "chat"},
            )
            try:
                with urllib.request.urlopen(request, timeout=30) as resp:
                    text = resp.read()
                if resp.status == 200 and text.rstrip().endswith(b"[DONE]") and b'"error"' not in text:
                    self.ok += 1
                else:
                    self.failed.append(f"{resp.status}: {text[-200:]!r}")
            except urllib.error.URLError as error:
                if isinstance(error.reason, ConnectionRefusedError):
                    self.refused += 1
                    self._stop.wait(0.05)  # a moment before the next connection, unless the load stops
                else:
                    self.failed.append(repr(error))
            except OSError as error:
                self.failed.append(repr(error))

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=40)


def test_deleting_the_pilot_under_load_removes_everything_in_order(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    apply(cluster, namespace, demo())
    wait_ready(cluster, operator, namespace)
    load = Load(router_ip(cluster, namespace))
    wait_until("four requests answered through the router", lambda: load.ok >= 4 or load.failed, timeout=30)
    cluster.kubectl("delete", "-n", namespace, "speculationpilot/demo", "--wait=false")
    seen: list[set[str]] = []

    def gone() -> bool:
        pods = cluster.get_json("pods", "-n", namespace, "-l", "specpilot.io/pilot")["items"]
        seen.append({p["metadata"]["labels"].get("specpilot.io/arm", "router") for p in pods})
        return not pods and not children(cluster, namespace)

    wait_until("every object of the pilot to go", gone, timeout=90, every=0.3)
    load.stop()
    assert cluster.kubectl("get", "speculationpilot/demo", "-n", namespace, check=False).returncode != 0
    assert load.ok > 0
    assert load.failed == [], f"requests accepted by the router failed: {load.failed[:5]}"
    # the baseline served until the router was gone: no moment had a router but no baseline
    assert not any("router" in present and "baseline" not in present for present in seen), seen
    assert "Teardown" not in [e["reason"] for e in events(cluster, namespace)]  # nothing was speculative
