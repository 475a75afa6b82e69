"""Cluster tier: a real local control plane (e2e/local), brought up once per test session.

`make cluster-up` leaves one running that these tests reuse; otherwise the session starts it.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.local import BUILD_SH, CLUSTER_SH, Cluster, fresh_namespace


def _script(*args: str) -> str:
    out = subprocess.run([*args], check=False, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{out.stdout}\n{out.stderr}")
    return out.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """The running cluster (left running), or one started for this session (stopped afterwards)."""
    was_running = (
        "stopped" not in subprocess.run([str(CLUSTER_SH), "status"], capture_output=True, text=True, check=True).stdout
    )
    bin_dir = Path(_script(str(BUILD_SH)))
    kubeconfig = Path(_script(str(CLUSTER_SH), "up"))
    yield Cluster(kubeconfig=kubeconfig, bin_dir=bin_dir)
    if not was_running:
        subprocess.run([str(CLUSTER_SH), "down"], check=False, timeout=120)
        leftovers = _pod_processes(kubeconfig.parent / "node" / "pods")
        for pid in leftovers:
            os.kill(pid, signal.SIGKILL)
        assert not leftovers, f"pod processes outlived cluster-down: {leftovers}"


def _pod_processes(pods_dir: Path) -> list[int]:
    """PIDs of processes still running in a pod directory of the node agent."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and Path(os.readlink(proc / "cwd")).is_relative_to(pods_dir):
                found.append(int(proc.name))
        except OSError:
            continue
    return found


@pytest.fixture()
def namespace(cluster: Cluster) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards (without waiting)."""
    with fresh_namespace(cluster) as name:
        yield name
