"""The operator as a real process against the local cluster, started, killed and restarted by tests."""

from __future__ import annotations

import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from specpilot.testing.waiting import wait_until
from tests.cluster.local import ROOT, Cluster

ROUTER_IMAGE = "specpilot/specpilot:dev"
CRDS = ROOT / "crds"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Operator:
    """`specpilot operator --all-namespaces` with its own liveness and metrics ports and log file."""

    def __init__(self, cluster: Cluster, log: Path, *extra: str, group: int | None = None) -> None:
        self.cluster = cluster
        self.log = log
        self.extra = extra
        self.group = group  # a group id of its own, for a firewall rule that matches only its connections
        self.liveness, self.metrics_port = free_port(), free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        argv = [
            *(sys.executable, "-m", "specpilot.cli", "operator", "--all-namespaces"),
            *("--router-image", ROUTER_IMAGE),
            *("--liveness", f"127.0.0.1:{self.liveness}", "--metrics", f"127.0.0.1:{self.metrics_port}"),
            "--allow-address=127.0.0.0/8",  # the local cluster's pods run on loopback, which no real one's do
            *self.extra,
        ]
        with self.log.open("ab") as out:
            env = {**self.cluster.env(), "PYTHONUNBUFFERED": "1"}
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, group=self.group)
        wait_until("the operator's liveness endpoint", self._alive, timeout=30)

    def _alive(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"operator exited with {self.proc.returncode}:\n{self.tail()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.liveness}/healthz", timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL: no cleanup, as when a node dies."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as resp:
            text: bytes = resp.read()
        return text.decode()

    def reconciles(self) -> float:
        """Reconciles this process has finished, of any pilot and whatever their result
        (`specpilot_operator_reconciles_total` on its metrics port)."""
        return sum(
            sample.value
            for family in text_string_to_metric_families(self.metrics())
            if family.name == "specpilot_operator_reconciles"
            for sample in family.samples
            if sample.name == "specpilot_operator_reconciles_total"
        )

    def wait_reconciles(self, count: int, *, since: float | None = None, timeout: float = 60) -> None:
        """Until this process has finished `count` reconciles after `since` (a `reconciles()` reading;
        by default, now): proof that it had its chances to act."""
        start = self.reconciles() if since is None else since
        wait_until(
            f"{count} more reconciles of the operator (from {start:.0f})",
            lambda: self.reconciles() >= start + count,
            timeout=timeout,
            every=0.5,
        )

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:]) if self.log.exists() else ""


def apply_crd(cluster: Cluster) -> None:
    """The SpeculationPilot CRD applied as checked in, and Established. The cluster tier owns it: a chart
    release that applied it before gives its fields up here."""
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRDS))
    # Right after an apply that changes it, a CRD may briefly show no conditions at all, which `kubectl
    # wait` reports as an error rather than waiting on: ask again until it is Established.
    wait_until(
        "the SpeculationPilot CRD established",
        lambda: (
            cluster.kubectl(
                "wait",
                "--for=condition=Established",
                "crd/speculationpilots.specpilot.io",
                "--timeout=10s",
                check=False,
            ).returncode
            == 0
        ),
        timeout=60,
        every=1,
    )


@contextmanager
def running_operator(cluster: Cluster, log: Path, *extra: str, group: int | None = None) -> Iterator[Operator]:
    apply_crd(cluster)
    operator = Operator(cluster, log, *extra, group=group)
    operator.start()
    try:
        yield operator
    finally:
        operator.stop()


def pilot(cluster: Cluster, namespace: str, name: str = "demo") -> dict[str, Any]:
    result: dict[str, Any] = cluster.get_json("speculationpilot", name, "-n", namespace)
    return result


def condition(body: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in body.get("status", {}).get("conditions", []) if c["type"] == type_), None)


def events(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    """Events on the namespace's pilots, oldest first."""
    items: list[dict[str, Any]] = cluster.get_json(
        "events", "-n", namespace, "--field-selector", "involvedObject.kind=SpeculationPilot"
    )["items"]
    return sorted(items, key=lambda e: (e.get("firstTimestamp") or "", e["metadata"]["creationTimestamp"]))


def children(cluster: Cluster, namespace: str) -> dict[str, dict[str, Any]]:
    """Every object labelled as a pilot's, by `kind/name`."""
    kinds = "deployments,services,configmaps,serviceaccounts,roles,rolebindings"
    items = cluster.get_json(kinds, "-n", namespace, "-l", "specpilot.io/pilot")["items"]
    return {f"{item['kind']}/{item['metadata']['name']}": item for item in items}


def wait_ready(cluster: Cluster, operator: Operator, namespace: str, name: str = "demo", timeout: float = 120) -> None:
    def ready() -> bool:
        found = condition(pilot(cluster, namespace, name), "Ready")
        return found is not None and found["status"] == "True"

    try:
        wait_until(f"pilot {namespace}/{name} Ready", ready, timeout=timeout, every=0.5)
    except AssertionError as error:
        raise AssertionError(
            f"{error}: {pilot(cluster, namespace, name).get('status')}\n"
            f"{cluster.pods_report(namespace)}\noperator log:\n{operator.tail()}"
        ) from None


def start_load(cluster: Cluster, router: str, *, seconds: int) -> subprocess.Popen[bytes]:
    """loadgen sending chat and code (10 requests/s, Poisson) through the router at `router`."""
    argv = [sys.executable, "-m", "specpilot.cli", "loadgen", "--url", f"http://{router}:8080"]
    argv += ["--mix", str(ROOT / "manifests/workloads/chat-code.yaml"), "--arrivals", "poisson", "--rate", "10"]
    argv += ["--duration", str(seconds), "--timeout", "30", "--no-progress"]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=cluster.env())


def restart(cluster: Cluster, operator: Operator, namespace: str) -> None:
    """SIGKILL the operator, start it again, and wait until it has reconciled the pilot."""
    operator.kill()
    operator.start()
    generation = pilot(cluster, namespace)["metadata"]["generation"]
    wait_until(
        "the restarted operator reconciling the pilot",
        lambda: (
            'result="ok"' in operator.metrics()
            and pilot(cluster, namespace)["status"]["observedGeneration"] == generation
        ),
        timeout=60,
    )
