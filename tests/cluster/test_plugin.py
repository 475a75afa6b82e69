"""`kubectl specpilot` as kubectl runs it (a plugin found on PATH) against a pilot the operator runs:
get and --watch, promote, abort, resume, decide and report, kubectl's kubeconfig conventions, and
clear errors for an unknown pilot, scope or context."""

from __future__ import annotations

import json
import os
import selectors
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specpilot.testing.waiting import wait_until
from tests.cluster.local import Cluster
from tests.cluster.operator_process import Operator, pilot, running_operator, wait_ready
from tests.cluster.pilots import judged_pilot

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def operator(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    with running_operator(cluster, tmp_path_factory.mktemp("plugin") / "operator.log") as running:
        yield running


def env(cluster: Cluster, **changes: str | None) -> dict[str, str]:
    """The cluster's environment with this checkout's console scripts on PATH, as an install puts them."""
    out = cluster.env()
    out["PATH"] = f"{Path(sys.executable).parent}:{out['PATH']}"
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def plugin(cluster: Cluster, *args: str, **changes: str | None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", "specpilot", *args],
        check=False,
        capture_output=True,
        text=True,
        env=env(cluster, **changes),
        timeout=60,
    )


def scope(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    return next(s for s in pilot(cluster, namespace).get("status", {}).get("scopes", []) if s["name"] == name)


@pytest.fixture()
def piloting(cluster: Cluster, operator: Operator, namespace: str) -> str:
    """A pilot whose scopes pilot a long first stage, without traffic."""
    doc = judged_pilot()
    for entry in doc["spec"]["scopes"]:
        entry["stages"] = [{"weight": 10, "minRequests": 10, "minDuration": "10m"}, *entry["stages"]]
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(doc))
    wait_ready(cluster, operator, namespace)
    # without traffic, its first inconclusive window holds it there
    wait_until(
        "chat piloting its first stage",
        lambda: scope(cluster, namespace, "chat").get("state") in ("Piloting", "Held"),
    )
    return namespace


def test_get_promote_abort_resume_and_decide(cluster: Cluster, piloting: str) -> None:
    ns = piloting
    table = plugin(cluster, "get", "-n", ns)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].startswith(f"{ns}/demo  phase Progressing  decision not stated")
    rows = {line.split()[0]: line.split() for line in lines[2:]}
    assert set(rows) == {"chat", "code", "batch"}
    assert rows["chat"][1] in ("Piloting", "Held") and rows["chat"][2:4] == ["1", "10%"]

    done = plugin(cluster, "promote", "chat", "-n", ns)  # the namespace's only pilot
    assert (
        done.returncode == 0
        and done.stdout.strip() == "speculationpilot.specpilot.io/demo promote requested for scope chat"
    )
    wait_until("chat promoted", lambda: scope(cluster, ns, "chat")["stage"] == 1, timeout=30)
    assert scope(cluster, ns, "code")["stage"] == 0

    assert plugin(cluster, "abort", "chat", "--pilot", "demo", "-n", ns).returncode == 0
    wait_until("chat aborted", lambda: scope(cluster, ns, "chat")["state"] == "RolledBack", timeout=30)
    assert plugin(cluster, "resume", "chat", "-n", ns).returncode == 0
    wait_until("chat resumed", lambda: scope(cluster, ns, "chat")["state"] in ("Piloting", "Held"), timeout=30)
    assert scope(cluster, ns, "chat")["stage"] == 0

    assert plugin(cluster, "abort", "-n", ns).returncode == 0  # every scope
    wait_until(
        "every scope aborted",
        lambda: all(s["state"] == "RolledBack" for s in pilot(cluster, ns)["status"]["scopes"]),
        timeout=30,
    )
    records = [(r["scope"], r["reason"]) for r in pilot(cluster, ns)["status"]["fallbacks"]]
    assert records == [
        ("chat", "ManualAbort"),
        ("chat", "ManualAbort"),
        ("code", "ManualAbort"),
        ("batch", "ManualAbort"),
    ]

    # every scope rolled back: the decision is stated by itself, and shown
    decision = wait_until("the decision stated", lambda: pilot(cluster, ns)["status"].get("decision"), timeout=30)
    assert decision["outcome"] == "Defer" and decision["statedBecause"] == "EveryScopeSettled"
    assert decision["deferReason"] == "InsufficientEvidence"
    shown = plugin(cluster, "get", "demo", "-n", ns).stdout.splitlines()
    assert "decision Defer" in shown[0]
    assert all("Defer(InsufficientEvidence)" in line for line in shown[2:]), shown


def test_decide_on_request_and_watch(cluster: Cluster, piloting: str) -> None:
    ns = piloting
    watch = subprocess.Popen(
        ["kubectl", "specpilot", "get", "demo", "-n", ns, "--watch"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(cluster),
    )
    assert watch.stdout is not None
    reader = selectors.DefaultSelector()
    reader.register(watch.stdout, selectors.EVENT_READ)
    printed: list[str] = []

    def shows(text: str) -> bool:
        while reader.select(timeout=0.2):
            line = watch.stdout.readline()  # type: ignore[union-attr]
            if not line:
                break
            printed.append(line)
        return any(text in line for line in printed)

    try:
        wait_until("the first table", lambda: shows("decision not stated"), timeout=30)
        assert plugin(cluster, "decide", "-n", ns).returncode == 0
        wait_until("the watch showing the decision", lambda: shows("decision Defer"), timeout=30)
    finally:
        watch.terminate()
        watch.wait(timeout=10)
    decision = pilot(cluster, ns)["status"]["decision"]
    assert decision["statedBecause"] == "Requested"
    assert all(s.get("decision") for s in pilot(cluster, ns)["status"]["scopes"])


def test_kubeconfig_conventions_and_clear_errors(cluster: Cluster, piloting: str, tmp_path: Path) -> None:
    ns = piloting
    # the context's namespace when -n is not given, from --kubeconfig without KUBECONFIG
    config = tmp_path / "kubeconfig"
    shutil.copy(cluster.kubeconfig, config)
    cluster.kubectl("config", "set-context", "--current", f"--namespace={ns}", f"--kubeconfig={config}")
    found = plugin(cluster, "get", "--kubeconfig", str(config), KUBECONFIG=None)
    assert found.returncode == 0 and found.stdout.startswith(f"{ns}/demo"), found.stderr
    # KUBECONFIG as a list of files, the first missing
    listed = plugin(cluster, "get", KUBECONFIG=f"{tmp_path / 'missing'}{os.pathsep}{config}")
    assert listed.returncode == 0 and listed.stdout.startswith(f"{ns}/demo"), listed.stderr

    cases = [
        (("get", "nope", "-n", ns), f"error: speculationpilot 'nope' not found in namespace '{ns}'"),
        (("promote", "nosuch", "-n", ns), "error: pilot 'demo' has no scope 'nosuch' (its scopes: chat, code, batch)"),
        (
            ("resume", "chat", "--pilot", "other", "-n", ns),
            f"error: speculationpilot 'other' not found in namespace '{ns}'",
        ),
        (
            ("get", "-n", ns, "--context", "elsewhere"),
            "error: context 'elsewhere' not in the kubeconfig (contexts: specpilot-local)",
        ),
        (("promote", "chat", "-n", "default"), "error: namespace 'default' has 0 pilots (none): name one with --pilot"),
    ]
    for args, message in cases:
        failed = plugin(cluster, *args)
        assert (failed.returncode, failed.stderr.strip()) == (1, message), args
    missing = plugin(cluster, "get", KUBECONFIG=str(tmp_path / "nothing"))
    assert missing.returncode == 1 and "no kubeconfig at" in missing.stderr


def test_report_through_the_plugin(cluster: Cluster, piloting: str, tmp_path: Path) -> None:
    out = tmp_path / "pkg"
    done = plugin(cluster, "report", "demo", "-n", piloting, "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "demo: no decision stated yet (provisional in the report)",
        f"report written to {out / 'report.md'}",
    ]
    body = json.loads((out / "report.json").read_text())
    assert body["decisionStated"] is False and body["decision"]["outcome"] == "Defer"
    assert [s["name"] for s in body["scopes"]] == ["chat", "code", "batch"]
    assert sorted(p.name for p in (out / "plots").iterdir()) == [
        "acceptance.png",
        "decode_share.png",
        "kv_cache.png",
        "load.png",
    ]
    assert (out / "replay" / "pilot.yaml").read_text().startswith("apiVersion: specpilot.io/v1alpha1")


def test_flags_in_kubectls_places_list_and_a_forbidden_user(cluster: Cluster, piloting: str, tmp_path: Path) -> None:
    ns = piloting
    before = plugin(cluster, "-n", ns, "get", "demo")
    assert before.returncode == 0 and before.stdout.startswith(f"{ns}/demo"), before.stderr
    listed = plugin(cluster, "list", "-A")
    assert listed.returncode == 0, listed.stderr
    head, *rows = listed.stdout.splitlines()
    assert head.split()[:5] == ["NAMESPACE", "NAME", "PHASE", "SPECULATIVE", "DECISION"]
    assert any(row.split()[:2] == [ns, "demo"] for row in rows), listed.stdout
    # A user the API server knows but lets read nothing: its refusal, on one line.
    cluster.kubectl("create", "serviceaccount", "nobody", "-n", ns)
    token = cluster.kubectl("create", "token", "nobody", "-n", ns).stdout.strip()
    config = tmp_path / "nobody"
    shutil.copy(cluster.kubeconfig, config)
    cluster.kubectl("config", "set-credentials", "nobody", f"--token={token}", f"--kubeconfig={config}")
    cluster.kubectl("config", "set-context", "--current", "--user=nobody", f"--kubeconfig={config}")
    refused = plugin(cluster, "get", "demo", "-n", ns, "--kubeconfig", str(config), KUBECONFIG=None)
    assert refused.returncode == 1, refused.stdout
    assert refused.stderr.startswith("error: speculationpilot 'demo': Forbidden: "), refused.stderr
    assert f"system:serviceaccount:{ns}:nobody" in refused.stderr and refused.stderr.count("\n") == 1
