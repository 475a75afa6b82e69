"""The chart in namespaced mode: the operator serves the namespaces it is given with a Role in each,
and can do nothing in any other."""

from __future__ import annotations

import uuid

import pytest

from specpilot.testing.helm import CHART, helm, set_args
from specpilot.testing.waiting import wait_until
from tests.cluster.local import ROOT, Cluster
from tests.cluster.operator_process import apply_crd
from tests.cluster.releases import NO_CRD, Release, can_i, helm_env

pytestmark = pytest.mark.cluster


def test_namespaced_operator_runs_a_pilot_in_its_namespace_and_nothing_elsewhere(
    cluster: Cluster, namespace: str
) -> None:
    name = f"spn-{uuid.uuid4().hex[:6]}"
    values = {"image.tag": "dev", "peering.name": name, "watchNamespaces": f"{{{namespace}}}", **NO_CRD}
    apply_crd(cluster)
    install = ("install", name, str(CHART), "--namespace", name, "--create-namespace", "--wait", "--timeout", "120s")
    out = helm(*install, *set_args(values), env=helm_env(cluster), check=False)
    assert out.returncode == 0, f"{out.stdout}\n{out.stderr}\n{cluster.pods_report(name)}"
    release = Release(name=name, namespace=name, account=f"{name}-specpilot", values=values)
    try:
        assert f"serves SpeculationPilots in: {namespace}" in out.stdout
        cluster.kubectl("apply", "-n", namespace, "-f", str(ROOT / "manifests/examples/local-demo.yaml"))
        ready = cluster.kubectl(
            "wait", "-n", namespace, "--for=condition=Ready", "speculationpilot/demo", "--timeout=150s", check=False
        )
        assert ready.returncode == 0, f"{ready.stderr}\n{cluster.pods_report(namespace)}\n{cluster.pods_report(name)}"
        (pod,) = release.pods(cluster)
        log = release.log(cluster, pod["metadata"]["name"])
        # Kopf says so when a permission it uses is missing; with the chart's RBAC it never does.
        for complaint in ("Not enough permissions", "Forbidden", "forbidden"):
            assert complaint not in log, log[-3000:]
        assert can_i(cluster, release, "create", "deployments.apps", "-n", namespace) == "yes"
        for elsewhere in ("default", name):
            assert can_i(cluster, release, "create", "deployments.apps", "-n", elsewhere) == "no"
            assert can_i(cluster, release, "list", "speculationpilots.specpilot.io", "-n", elsewhere) == "no"
        assert can_i(cluster, release, "list", "secrets", "-n", namespace) == "no"
        cluster.kubectl("delete", "-n", namespace, "speculationpilot/demo", "--timeout=120s", timeout=130)
        wait_until(
            "the pilot's children gone",
            lambda: not cluster.get_json("deployments", "-n", namespace, "-l", "specpilot.io/pilot")["items"],
            timeout=60,
        )
    finally:
        cluster.kubectl("delete", "speculationpilots", "--all", "-n", namespace, "--timeout=60s", check=False)
        helm("uninstall", name, "--namespace", name, "--wait", env=helm_env(cluster), check=False)
        cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)
