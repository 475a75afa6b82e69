"""Two operator replicas sharing a Kopf peering object: one works, the other stands by, and takes
over when the working one is SIGKILLed."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from specpilot.testing.waiting import wait_until
from tests.cluster.local import ROOT, Cluster
from tests.cluster.operator_process import pilot, running_operator, wait_ready

pytestmark = pytest.mark.cluster

PEERING = ROOT / "manifests" / "operator"


def reconciles(metrics: str) -> float:
    """Successful reconciles so far (the series appears with the first one)."""
    prefix = 'specpilot_operator_reconciles_total{result="ok"}'
    return sum(float(line.split()[-1]) for line in metrics.splitlines() if line.startswith(prefix))


def test_standby_replica_takes_over_from_a_killed_one(cluster: Cluster, namespace: str, tmp_path: Path) -> None:
    cluster.kubectl("apply", "-f", str(PEERING / "kopf-peering-crds.yaml"))
    cluster.kubectl("wait", "--for=condition=Established", "crd/clusterkopfpeerings.kopf.dev", "--timeout=30s")
    cluster.kubectl("apply", "-f", str(PEERING / "kopf-peering.yaml"))
    peering = ("--peering", "specpilot")
    with (
        running_operator(cluster, tmp_path / "active.log", *peering, "--priority", "20") as active,
        running_operator(cluster, tmp_path / "standby.log", *peering, "--priority", "10") as standby,
    ):
        cluster.kubectl("apply", "-n", namespace, "-f", str(ROOT / "manifests/examples/local-demo.yaml"))
        wait_ready(cluster, active, namespace)
        # A replica starts paused until peering says it may work; the standby never may.
        assert reconciles(standby.metrics()) == 0, "a standby does not reconcile"
        assert "Resuming operations" not in standby.tail(400)
        active.kill()
        killed = time.monotonic()
        cluster.kubectl("scale", "-n", namespace, "deployment/demo-speculative", "--replicas=2")
        wait_until(
            "the standby to put the Deployment back",
            lambda: cluster.get_json("deployment", "demo-speculative", "-n", namespace)["spec"]["replicas"] == 1,
            timeout=90,
        )
        took_over = time.monotonic() - killed
        assert "Resuming operations" in standby.tail(400)
        assert took_over < 30 + 15, f"took over after {took_over:.0f} s (peering lifetime 30 s)"
        assert pilot(cluster, namespace)["status"]["observedGeneration"] == 1
        cluster.kubectl("delete", "-n", namespace, "speculationpilot/demo", "--timeout=90s")
