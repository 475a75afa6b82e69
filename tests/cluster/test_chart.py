"""The Helm chart on the local cluster: its renders pass server-side dry-run, `helm install` runs the
operator as a pod under the chart's own RBAC (no Secrets), that operator runs the demo pilot to its
outcomes under the demo's loadgen Job, and a standby replica takes over from a killed active one.

The scenario is the one e2e/kind/run.sh runs: manifests/demo/pilot.yaml, the load of
manifests/demo (kustomize), and the outcomes of manifests/demo/outcomes.txt.
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from specpilot.api.pilot import GROUP
from specpilot.controller.handlers import FINALIZER
from specpilot.testing.helm import CHART, helm, kustomize, set_args, template_text
from specpilot.testing.waiting import wait_until
from tests.cluster.local import ROOT, Cluster
from tests.cluster.operator_process import apply_crd, events, pilot
from tests.cluster.pilots import router_ip
from tests.cluster.releases import NO_CRD, Release, can_i, helm_env
from tests.operator_annotations import KOPF_ANNOTATIONS

pytestmark = pytest.mark.cluster

DEMO = ROOT / "manifests" / "demo"


def outcomes() -> list[tuple[str, str]]:
    lines = (DEMO / "outcomes.txt").read_text().splitlines()
    return [(scope, state) for scope, state in (line.split() for line in lines if line and not line.startswith("#"))]


@pytest.fixture(scope="module")
def release(cluster: Cluster) -> Iterator[Release]:
    """The chart installed in a namespace of its own, cluster-wide (clusterWide), with the image the local
    node runs."""
    name = f"sp-{uuid.uuid4().hex[:6]}"
    # The peering object is cluster-scoped: a name of its own keeps it apart from other tests'.
    values = {"image.tag": "dev", "peering.name": name, "clusterWide": "true", **NO_CRD}
    apply_crd(cluster)
    out = helm(
        *("install", name, str(CHART), "--namespace", name, "--create-namespace", "--wait", "--timeout", "120s"),
        *set_args(values),
        env=helm_env(cluster),
        check=False,
    )
    assert out.returncode == 0, f"{out.stdout}\n{out.stderr}\n{cluster.pods_report(name)}"
    assert f"kubectl -n {name} rollout status deployment/{name}-specpilot" in out.stdout  # NOTES.txt
    assert "serves SpeculationPilots in every namespace" in out.stdout
    try:
        yield Release(name=name, namespace=name, account=f"{name}-specpilot", values=values)
    finally:
        helm("uninstall", name, "--namespace", name, "--wait", env=helm_env(cluster), check=False)
        cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture()
def pilot_namespace(cluster: Cluster, namespace: str) -> Iterator[str]:
    """The test's namespace; its pilot is deleted while the operator still runs (its finalizer)."""
    yield namespace
    cluster.kubectl("delete", "speculationpilots", "--all", "-n", namespace, "--timeout=120s", check=False, timeout=130)


def test_renders_pass_server_side_dry_run(cluster: Cluster, release: Release) -> None:
    # In both modes, beside the installed release (names of their own), and with the optional monitors off
    # (their CRDs belong to prometheus-operator).
    for mode, values in (
        ("cluster-wide", {"peering.name": "dry-run", "clusterWide": "true"}),
        ("namespaced", {"watchNamespaces": f"{{{release.namespace}}}"}),
    ):
        rendered = template_text(values, namespace=release.namespace, release=f"dry-{mode}")
        out = cluster.kubectl("apply", "--server-side", "--dry-run=server", "-f", "-", input=rendered, check=False)
        assert out.returncode == 0, f"{mode}: {out.stderr}"
        assert "(server dry run)" in out.stdout


def test_operator_account_cannot_touch_secrets(cluster: Cluster, release: Release, pilot_namespace: str) -> None:
    for verb in ("get", "list", "watch", "create", "patch", "delete"):
        assert can_i(cluster, release, verb, "secrets", "-A") == "no", verb
        assert can_i(cluster, release, verb, "secrets", "-n", pilot_namespace) == "no", verb
    # ...while it can do what it must, so these answers can tell the two apart.
    assert can_i(cluster, release, "create", "deployments.apps", "-n", pilot_namespace) == "yes"
    assert can_i(cluster, release, "patch", "speculationpilots.specpilot.io/status", "-n", pilot_namespace) == "yes"
    # it reads a workload's Deployment (get) and server-side applies its own (patch): it never replaces one
    assert can_i(cluster, release, "get", "deployments.apps", "-n", pilot_namespace) == "yes"
    assert can_i(cluster, release, "update", "deployments.apps", "-n", pilot_namespace) == "no"
    listing = can_i(cluster, release, "--list", "-n", pilot_namespace)
    mine = [line for line in listing.splitlines()[1:] if "selfsubject" not in line]
    assert mine and not any("secrets" in line or "[*]" in line for line in mine), listing


def test_a_team_bound_to_edit_may_run_pilots_and_one_bound_to_view_may_read_them(
    cluster: Cluster, release: Release, pilot_namespace: str
) -> None:
    # The release's aggregated ClusterRoles join Kubernetes' own `edit` and `view` (the controller
    # manager aggregates them a moment after the install): no RBAC of the team's own.
    editor, viewer = f"editor-{release.name}", f"viewer-{release.name}"
    for user, role in ((editor, "edit"), (viewer, "view")):
        cluster.kubectl(
            "create", "rolebinding", f"{user}-{role}", f"--clusterrole={role}", f"--user={user}", "-n", pilot_namespace
        )

    def can(user: str, *args: str, namespace: str = pilot_namespace) -> str:
        out = cluster.kubectl("auth", "can-i", *args, "-n", namespace, f"--as={user}", check=False)
        return out.stdout.strip()

    pilots = "speculationpilots.specpilot.io"
    wait_until("edit to take in the release's role", lambda: can(editor, "create", pilots) == "yes", timeout=60)
    for verb in ("get", "list", "watch", "update", "patch", "delete"):
        assert can(editor, verb, pilots) == "yes", verb
    for verb in ("get", "list", "watch"):
        assert can(viewer, verb, pilots) == "yes", verb
    assert can(viewer, "create", pilots) == "no" and can(viewer, "patch", pilots) == "no"
    # the status stays the operator's
    assert can(editor, "patch", pilots, "--subresource=status") == "no"
    assert can(editor, "create", pilots, namespace="default") == "no"  # bound in the team's namespace only


def test_cluster_wide_the_operator_writes_nothing_in_system_namespaces_or_its_own(
    cluster: Cluster, release: Release, pilot_namespace: str
) -> None:
    # RBAC grants it everywhere; the chart's ValidatingAdmissionPolicy refuses it there.
    account = f"system:serviceaccount:{release.namespace}:{release.account}"

    def create_config_map(namespace: str) -> tuple[int, str]:
        out = cluster.kubectl(
            *("create", "configmap", "specpilot-guard-probe", "-n", namespace, "--dry-run=server", f"--as={account}"),
            check=False,
        )
        return out.returncode, out.stderr

    refused = "writes nothing in the system namespaces or its own"
    wait_until("the policy in force", lambda: refused in create_config_map("kube-system")[1], timeout=30, every=1)
    for namespace in ("kube-public", "kube-node-lease", release.namespace):
        code, stderr = create_config_map(namespace)
        assert code != 0 and refused in stderr, (namespace, stderr)
    code, stderr = create_config_map(pilot_namespace)
    assert code == 0, stderr  # where pilots run, it may


def operator_metrics(pod: dict[str, Any]) -> str:
    ip, port = pod["status"]["podIP"], 8082
    with urllib.request.urlopen(f"http://{ip}:{port}/metrics", timeout=5) as resp:
        text: bytes = resp.read()
    return text.decode()


def start_demo_load(cluster: Cluster, namespace: str) -> None:
    """manifests/demo's loadgen Job, pointed at the router pod (no DNS on the local cluster)."""
    docs = kustomize(DEMO)
    (job,) = [d for d in docs if d["kind"] == "Job"]
    (env,) = [e for e in job["spec"]["template"]["spec"]["containers"][0]["env"] if e["name"] == "ROUTER_URL"]
    env["value"] = f"http://{router_ip(cluster, namespace)}:8080"
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(docs))


# A pilot run (about 90 s): a chart-installed operator runs a pilot in `make test` through
# tests/cluster/test_chart_namespaced.py, and the demo pilot's outcome through tests/cluster/test_demo.py.
@pytest.mark.long
def test_chart_installed_operator_runs_the_demo_pilot_to_its_outcome(
    cluster: Cluster, release: Release, pilot_namespace: str
) -> None:
    namespace = pilot_namespace
    cluster.kubectl("apply", "-n", namespace, "-f", str(DEMO / "pilot.yaml"))
    ready = cluster.kubectl(
        "wait",
        "-n",
        namespace,
        "--for=condition=Ready",
        "speculationpilot/demo",
        "--timeout=150s",
        check=False,
        timeout=160,
    )
    assert ready.returncode == 0, (
        f"{ready.stderr}\n{cluster.pods_report(namespace)}\n{cluster.pods_report(release.namespace)}"
    )
    start_demo_load(cluster, namespace)
    for scope, state in outcomes():
        jsonpath = f'jsonpath={{.status.scopes[?(@.name=="{scope}")].state}}={state}'
        out = cluster.kubectl(
            "wait",
            "-n",
            namespace,
            f"--for={jsonpath}",
            "speculationpilot/demo",
            "--timeout=240s",
            check=False,
            timeout=250,
        )
        assert out.returncode == 0, (
            f"scope {scope} not {state}: {out.stderr}\n"
            f"{json.dumps(pilot(cluster, namespace).get('status'), indent=1)}\n"
            f"{cluster.pods_report(release.namespace, log_lines=40)}"
        )
    # Every scope settled, and arms and router ready: Healthy (a pod restarted by its liveness probe on
    # a busy machine may delay it a little).
    healthy = cluster.kubectl(
        "wait",
        "-n",
        namespace,
        "--for=jsonpath={.status.phase}=Healthy",
        "speculationpilot/demo",
        "--timeout=120s",
        check=False,
        timeout=130,
    )
    assert healthy.returncode == 0, f"{json.dumps(pilot(cluster, namespace).get('status'), indent=1)}"
    status = pilot(cluster, namespace)["status"]
    scopes = {s["name"]: s for s in status["scopes"]}
    for name in ("chat", "longform"):
        assert (scopes[name]["stage"], scopes[name]["weight"]) == (1, 50), scopes[name]
        assert scopes[name]["lastWindow"]["ratio"] < 1, scopes[name]
    causes = {r["scope"]: (r["reason"], r["metric"]) for r in status["fallbacks"]}
    # code drafts badly: its net slowdown in time per committed token flips it, and nothing else flips
    assert causes == {"code": ("ThresholdExceeded", "timePerCommittedTokenRatio")}, causes
    reasons = [e["reason"] for e in events(cluster, namespace)]
    assert "ScopePromoted" in reasons and "ScopeRolledBack" in reasons and "RoutesTaken" in reasons, reasons
    # What argocd-cm.yaml's ignoreDifferences leave to the operator is all it writes on the pilot.
    meta = pilot(cluster, namespace)["metadata"]
    assert meta["finalizers"] == [FINALIZER]
    assert {k for k in meta.get("annotations", {}) if k.startswith(f"{GROUP}/")} <= set(KOPF_ANNOTATIONS), meta
    job = cluster.get_json("job", "demo-load", "-n", namespace)
    assert not job["status"].get("failed"), cluster.pods_report(namespace)
    # The chart's operator is the one that worked, and its metrics say so per scope.
    (working,) = release.pods(cluster)
    metrics = operator_metrics(working)
    assert f'specpilot_scope_flips_total{{namespace="{namespace}",pilot="demo",scope="code"}} 1.0' in metrics
    for scope in ("chat", "longform"):
        assert f'specpilot_scope_weight{{namespace="{namespace}",pilot="demo",scope="{scope}"}} 50.0' in metrics
    # An Event cannot be posted in a namespace being deleted (another test's pilot tearing down): that
    # refusal is the API server's, not a missing permission.
    log = "\n".join(
        line
        for line in release.log(cluster, working["metadata"]["name"]).splitlines()
        if "because it is being terminated" not in line
    )
    for complaint in ("Not enough permissions", "Forbidden", "forbidden"):  # Kopf's and the API server's words
        assert complaint not in log, log[-3000:]
    cluster.kubectl("delete", "job", "demo-load", "-n", namespace, "--wait=false")


def reconciled(pod: dict[str, Any]) -> float:
    prefix = 'specpilot_operator_reconciles_total{result="ok"}'
    return sum(float(line.split()[-1]) for line in operator_metrics(pod).splitlines() if line.startswith(prefix))


def two(pods: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    return pods if len(pods) == 2 else None


def peering(cluster: Cluster, release: Release, pods: list[dict[str, Any]]) -> dict[str, Any] | None:
    status = cluster.get_json("clusterkopfpeering", release.values["peering.name"]).get("status") or {}
    return status if all(p["metadata"]["name"] in status for p in pods) else None


# A kill run (about 70 s): the standby's takeover is in `make test` through tests/cluster/test_operator_peering.py.
@pytest.mark.long
def test_standby_replica_takes_over_when_the_active_one_is_killed(
    cluster: Cluster, release: Release, pilot_namespace: str
) -> None:
    namespace = pilot_namespace
    upgrade = ("upgrade", release.name, str(CHART), "--namespace", release.namespace, "--wait", "--timeout", "120s")
    helm(*upgrade, *set_args({**release.values, "replicaCount": "2"}), env=helm_env(cluster))
    cluster.kubectl("apply", "-n", namespace, "-f", str(ROOT / "manifests/examples/local-demo.yaml"))
    cluster.kubectl(
        "wait", "-n", namespace, "--for=condition=Ready", "speculationpilot/demo", "--timeout=150s", timeout=160
    )
    pods = wait_until("two operator replicas", lambda: two(release.pods(cluster)), 60)
    # Kopf's peering object lists each replica (by pod name) with its priority; the highest works.
    peers = wait_until("both replicas in the peering object", lambda: peering(cluster, release, pods), 60)
    active, standby = sorted(pods, key=lambda p: -peers[p["metadata"]["name"]]["priority"])
    standby_log = lambda: release.log(cluster, standby["metadata"]["name"]).count("Resuming operations")  # noqa: E731
    before, resumed_before, worked = reconciled(standby), standby_log(), reconciled(active)
    wait_until("the working replica's next reconcile", lambda: reconciled(active) > worked, 60)
    assert reconciled(standby) == before, "a standby does not reconcile"
    # As when its node dies: SIGKILL, and no replacement scheduled until the standby has taken over.
    cluster.kubectl("cordon", "specpilot-local")
    try:
        pid = int(active["status"]["containerStatuses"][0]["containerID"].removeprefix("local://"))
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        cluster.kubectl(
            "delete", "pod", active["metadata"]["name"], "-n", release.namespace, "--grace-period=0", "--force"
        )
        cluster.kubectl("scale", "-n", namespace, "deployment/demo-speculative", "--replicas=2")
        wait_until(
            "the standby to put the Deployment back",
            lambda: cluster.get_json("deployment", "demo-speculative", "-n", namespace)["spec"]["replicas"] == 1,
            timeout=90,
            every=0.5,
        )
        took_over = time.monotonic() - killed
    finally:
        cluster.kubectl("uncordon", "specpilot-local")
    assert standby_log() > resumed_before
    # The Deployment is put back within a reconcile; the reconcile is counted when it ends.
    wait_until("the standby's reconcile to be counted", lambda: reconciled(standby) > before, 15)
    assert took_over < 30 + 15, f"took over after {took_over:.0f} s (peering lifetime 30 s)"
    helm(*upgrade, *set_args(release.values), env=helm_env(cluster))
