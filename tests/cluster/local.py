"""The local cluster the cluster tier runs on (e2e/local): a handle on it that runs kubectl and explains a
failed rollout, fresh namespaces, and work done in the background while a test waits on it."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specpilot.testing.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
CLUSTER_SH = ROOT / "e2e" / "local" / "cluster.sh"
BUILD_SH = ROOT / "e2e" / "local" / "build.sh"


@contextmanager
def in_background(work: Callable[[threading.Event], None]) -> Iterator[None]:
    """`work` in a thread while the block runs; it returns once the event it is given is set."""
    stop = threading.Event()
    thread = threading.Thread(target=work, args=(stop,), daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=60)


@dataclass(frozen=True)
class Cluster:
    """Handle on the running local cluster."""

    kubeconfig: Path
    bin_dir: Path

    def env(self) -> dict[str, str]:
        """Environment for clients of the cluster: its kubeconfig, and its own kubectl first on PATH."""
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig), "PATH": f"{self.bin_dir}:{os.environ['PATH']}"}

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against the cluster; raises with stderr when `check` and it fails."""
        proc = subprocess.run(
            ["kubectl", *args],
            check=False,
            input=input,
            capture_output=True,
            text=True,
            env=self.env(),
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
        return proc

    def get_json(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def rollout(self, namespace: str, deployment: str, timeout: int = 120) -> None:
        """Wait for a Deployment's rollout; on failure, say what its pods were doing and printed."""
        proc = self.kubectl(
            "rollout",
            "status",
            "-n",
            namespace,
            f"deployment/{deployment}",
            f"--timeout={timeout}s",
            check=False,
            timeout=timeout + 10,
        )
        if proc.returncode != 0:
            raise AssertionError(
                f"deployment {namespace}/{deployment} not rolled out: {proc.stderr}\n{self.pods_report(namespace)}"
            )

    def pods_report(self, namespace: str, log_lines: int = 15) -> str:
        """Each pod of `namespace`: IP, conditions, container states and the tail of each container's log."""
        lines = []
        for pod in self.get_json("pods", "-n", namespace)["items"]:
            meta, status = pod["metadata"], pod.get("status", {})
            conditions = {c["type"]: c["status"] for c in status.get("conditions", [])}
            lines.append(f"pod {meta['name']} ip={status.get('podIP')} phase={status.get('phase')} {conditions}")
            for container in status.get("containerStatuses", []):
                lines.append(
                    f"  {container['name']}: {container.get('state')} restarts={container.get('restartCount')}"
                )
            for log in sorted(self.kubeconfig.parent.glob(f"node/pods/{namespace}_{meta['name']}_*/*.log")):
                tail = log.read_text(errors="replace").splitlines()[-log_lines:]
                lines += [f"  | {log.name}: {line}" for line in tail]
        return "\n".join(lines)


@contextmanager
def fresh_namespace(cluster: Cluster, *, wait_gone: bool = False) -> Iterator[str]:
    """A new namespace whose default ServiceAccount exists, deleted afterwards (`wait_gone`: until it is gone)."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", name)
    # Pods run as the namespace's default ServiceAccount, which the controller-manager creates a
    # moment after the namespace; a pod scheduled before it gets no token from the node agent.
    wait_until(
        f"the default ServiceAccount of {name}",
        lambda: cluster.kubectl("get", "serviceaccount", "default", "-n", name, check=False).returncode == 0,
        timeout=30,
    )
    try:
        yield name
    finally:
        cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)
        if wait_gone:
            wait_until(
                f"namespace {name} gone",
                lambda: cluster.kubectl("get", "namespace", name, check=False).returncode != 0,
                timeout=180,
                every=1,
            )
