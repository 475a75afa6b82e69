"""The operator's footprint with many pilots: RSS and CPU idle, and CPU per reconcile.

Runs `specpilot operator` as a process against the local cluster (started if needed), applies N
pilots while the node is cordoned, so that no arm or router is scheduled (2 cores cannot run a
hundred routers), waits until every pilot has a status, then measures the operator idle. CPU comes
from /proc (user + system time of the process).

    .venv/bin/python bench/operator_footprint.py [--pilots 100] [--idle-seconds 60]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "bench-operator"
NODE = os.environ.get("SPECPILOT_NODE_NAME", "specpilot-local")
TARGET_RSS_MIB, TARGET_IDLE_CORES = 150.0, 0.1
TICKS = os.sysconf("SC_CLK_TCK")


def script(*argv: str) -> str:
    out = subprocess.run(argv, check=True, capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1]


def kubectl(*args: str, input: str | None = None) -> str:
    return subprocess.run(["kubectl", *args], check=True, capture_output=True, text=True, input=input).stdout


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def rss_mib(pid: int) -> float:
    match = re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
    return int(match.group(1)) / 1024 if match else float("nan")


def reconciles(metrics_port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return sum(float(v) for v in re.findall(r'^specpilot_operator_reconciles_total\{result="ok"\} (\S+)$', text, re.M))


def pilots(count: int) -> str:
    # Production defaults (an analysis interval of a minute), not the local demo's short clock.
    base = yaml.safe_load((ROOT / "manifests/examples/minimal.yaml").read_text())
    docs = []
    for index in range(count):
        doc = copy.deepcopy(base)
        doc["metadata"] = {"name": f"bench-{index:03d}", "namespace": NAMESPACE}
        docs.append(doc)
    return "\n---\n".join(json.dumps(doc) for doc in docs)


def window(pid: int, seconds: float) -> tuple[float, float]:
    """CPU cores used and RSS at the end, over `seconds` of wall time."""
    cpu, wall = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_seconds(pid) - cpu) / (time.monotonic() - wall), rss_mib(pid)


def statuses(count: int) -> int:
    items: list[dict[str, Any]] = json.loads(kubectl("get", "speculationpilots", "-n", NAMESPACE, "-o", "json"))[
        "items"
    ]
    return sum(1 for item in items if (item.get("status") or {}).get("observedGeneration"))


def wait_for_pods(count: int, timeout: float = 600) -> None:
    """Until `count` pods exist in the namespace and the number has held still for 10 s."""
    deadline, last, since = time.monotonic() + timeout, -1, time.monotonic()
    while time.monotonic() < deadline:
        pods = len(json.loads(kubectl("get", "pods", "-n", NAMESPACE, "-o", "json"))["items"])
        if pods != last:
            last, since = pods, time.monotonic()
        elif pods >= count and time.monotonic() - since >= 10:
            return
        time.sleep(2)
    raise SystemExit(f"pods did not settle at {count} within {timeout} s (last {last})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pilots", type=int, default=100)
    parser.add_argument("--idle-seconds", type=float, default=60.0)
    args = parser.parse_args()

    bin_dir = script(str(ROOT / "e2e/local/build.sh"))
    os.environ["KUBECONFIG"] = script(str(ROOT / "e2e/local/cluster.sh"), "up")
    os.environ["PATH"] = f"{bin_dir}:{os.environ['PATH']}"
    kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
    subprocess.run(["kubectl", "delete", "namespace", NAMESPACE, "--wait=true"], capture_output=True, check=False)
    kubectl("create", "namespace", NAMESPACE)
    kubectl("cordon", NODE)
    metrics_port = 18482
    operator = subprocess.Popen(
        [
            *(sys.executable, "-m", "specpilot.cli", "operator", "--namespace", NAMESPACE),
            *("--liveness", "127.0.0.1:18481", "--metrics", f"127.0.0.1:{metrics_port}", "--log-level", "WARNING"),
        ],
        stdout=subprocess.DEVNULL,
    )
    try:
        time.sleep(5)
        idle_empty = window(operator.pid, 20)
        started, cpu, before = time.monotonic(), cpu_seconds(operator.pid), reconciles(metrics_port)
        kubectl("apply", "-f", "-", input=pilots(args.pilots))
        while statuses(args.pilots) < args.pilots:
            if time.monotonic() - started > 600:
                raise SystemExit("pilots were not all reconciled within 10 minutes")
            time.sleep(2)
        settle = time.monotonic() - started
        wait_for_pods(4 * args.pilots)  # every arm's and router's pod created, and Pending
        spent, done = cpu_seconds(operator.pid) - cpu, reconciles(metrics_port) - before
        idle_cores, idle_rss = window(operator.pid, args.idle_seconds)
        idle_reconciles = reconciles(metrics_port) - before - done
    finally:
        # Pilots go while the operator runs: their teardown finalizer needs it.
        subprocess.run(
            ["kubectl", "delete", "speculationpilots", "--all", "-n", NAMESPACE, "--timeout=120s"],
            capture_output=True,
            check=False,
        )
        operator.terminate()
        operator.wait(timeout=30)
        subprocess.run(["kubectl", "delete", "namespace", NAMESPACE, "--wait=false"], capture_output=True, check=False)
        kubectl("uncordon", NODE)

    print(f"\noperator with {args.pilots} pilots (pods unschedulable), one process, measured from /proc")
    print(f"  {'':<34} {'measured':>12} {'target':>10} {'ratio':>7}")
    print(f"  {'RSS, no pilots (MiB)':<34} {idle_empty[1]:>12.1f}")
    print(f"  {'CPU idle, no pilots (cores)':<34} {idle_empty[0]:>12.4f}")
    rss_ratio = idle_rss / TARGET_RSS_MIB
    print(f"  {'RSS idle, N pilots (MiB)':<34} {idle_rss:>12.1f} {TARGET_RSS_MIB:>10.0f} {rss_ratio:>7.2f}")
    print(
        f"  {'CPU idle, N pilots (cores)':<34} {idle_cores:>12.4f} {TARGET_IDLE_CORES:>10.2f}"
        f" {idle_cores / TARGET_IDLE_CORES:>7.2f}"
    )
    print(f"  {'reconciles to first status':<34} {done:>12.0f}")
    print(f"  {'CPU per reconcile, first pass (ms)':<34} {1000 * spent / max(done, 1):>12.2f}")
    print(f"  {'time to all statuses (s)':<34} {settle:>12.1f}")
    print(f"  {'reconciles while idle (per s)':<34} {idle_reconciles / args.idle_seconds:>12.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
