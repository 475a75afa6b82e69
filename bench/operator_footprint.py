"""The operator's footprint with many pilots: RSS and CPU idle, and CPU per reconcile.

Runs `specpilot operator` as a process against the local cluster (started if needed), applies N
pilots while the node is cordoned, so that no arm or router is scheduled (2 cores cannot run a
hundred routers), waits until every pilot has a status, then measures the operator idle. CPU comes
from /proc (user + system time of the process).

`--client` picks the operator's Kubernetes client: its own (`specpilot.controller.kube`), the
official client's `kubernetes.aio` in its place (`bench/kube_aio.py`), or both, one after the
other on the same cluster, each run from an empty namespace, with the figures side by side and
their ratio (library / own).

    .venv/bin/python bench/operator_footprint.py [--pilots 100] [--idle-seconds 60]
                                                 [--client own|kubernetes.aio|both]
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "bench-operator"
NODE = os.environ.get("SPECPILOT_NODE_NAME", "specpilot-local")
TARGET_RSS_MIB, TARGET_IDLE_CORES = 150.0, 0.1
TICKS = os.sysconf("SC_CLK_TCK")
LIVENESS, METRICS_PORT = "127.0.0.1:18481", 18482
LIBRARY = "kubernetes.aio"
CLIENTS = ("own", LIBRARY)


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


def metrics(metrics_port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as resp:
        text: str = resp.read().decode()
    return text


def reconciles(metrics_port: int) -> float:
    text = metrics(metrics_port)
    return sum(float(v) for v in re.findall(r'^specpilot_operator_reconciles_total\{result="ok"\} (\S+)$', text, re.M))


def applies(metrics_port: int) -> tuple[float, float]:
    """(count, seconds) of the operator's server-side applies so far, every kind."""
    text = metrics(metrics_port)
    total = sum(float(v) for v in re.findall(r"^specpilot_operator_apply_seconds_count\{[^}]*\} (\S+)$", text, re.M))
    spent = sum(float(v) for v in re.findall(r"^specpilot_operator_apply_seconds_sum\{[^}]*\} (\S+)$", text, re.M))
    return total, spent


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


def remove_namespace(timeout: int = 300) -> None:
    """Delete the bench namespace and wait until it is gone, so that a run starts from nothing."""
    subprocess.run(
        ["kubectl", "delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true", f"--timeout={timeout}s"],
        capture_output=True,
        check=False,
    )
    if kubectl("get", "namespace", NAMESPACE, "--ignore-not-found", "-o", "name").strip():
        raise SystemExit(f"namespace {NAMESPACE} is still there after {timeout} s (a pilot's finalizer left behind?)")


def operator_command(client: str) -> list[str]:
    """`specpilot operator` on its own client, or through bench/kube_aio.py on the library's."""
    entry = [str(ROOT / "bench/kube_aio.py")] if client == LIBRARY else ["-m", "specpilot.cli"]
    flags = ("--namespace", NAMESPACE, "--liveness", LIVENESS, "--metrics", f"127.0.0.1:{METRICS_PORT}")
    return [sys.executable, *entry, "operator", *flags, "--log-level", "WARNING"]


@dataclass(frozen=True)
class Figures:
    empty_rss: float  # MiB
    empty_cores: float
    idle_rss: float  # MiB, N pilots
    idle_cores: float
    reconciles: float  # to the first status of every pilot
    first_pass_cpu: float  # seconds, from the pilots' apply to every pod created
    applies: float  # server-side applies in that time
    apply_ms: float  # mean apply latency, ms
    settle: float  # seconds to every pilot's status
    idle_reconciles: float  # per second

    @property
    def cpu_per_reconcile(self) -> float:
        """ms of CPU per reconcile, first pass."""
        return 1000 * self.first_pass_cpu / max(self.reconciles, 1)


def measure(client: str, args: argparse.Namespace) -> Figures:
    """One run: the operator on `client` from an empty namespace to N pilots reconciled, then idle."""
    remove_namespace()  # a previous run's, or one left behind
    kubectl("create", "namespace", NAMESPACE)
    kubectl("cordon", NODE)
    operator = subprocess.Popen(operator_command(client), stdout=subprocess.DEVNULL)
    try:
        time.sleep(5)
        idle_empty = window(operator.pid, 20)
        started, cpu, before = time.monotonic(), cpu_seconds(operator.pid), reconciles(METRICS_PORT)
        applied = applies(METRICS_PORT)
        kubectl("apply", "-f", "-", input=pilots(args.pilots))
        while statuses(args.pilots) < args.pilots:
            if time.monotonic() - started > 600:
                raise SystemExit(f"{client}: pilots were not all reconciled within 10 minutes")
            time.sleep(2)
        settle = time.monotonic() - started
        wait_for_pods(4 * args.pilots)  # every arm's and router's pod created, and Pending
        spent, done = cpu_seconds(operator.pid) - cpu, reconciles(METRICS_PORT) - before
        count, seconds = applies(METRICS_PORT)
        count, seconds = count - applied[0], seconds - applied[1]
        idle_cores, idle_rss = window(operator.pid, args.idle_seconds)
        idle_reconciles = reconciles(METRICS_PORT) - before - done
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
    return Figures(
        empty_rss=idle_empty[1],
        empty_cores=idle_empty[0],
        idle_rss=idle_rss,
        idle_cores=idle_cores,
        reconciles=done,
        first_pass_cpu=spent,
        applies=count,
        apply_ms=1000 * seconds / max(count, 1),
        settle=settle,
        idle_reconciles=idle_reconciles / args.idle_seconds,
    )


# (label, figure, format, target): the table's rows.
ROWS: tuple[tuple[str, str, str, float | None], ...] = (
    ("RSS, no pilots (MiB)", "empty_rss", ".1f", None),
    ("CPU idle, no pilots (cores)", "empty_cores", ".4f", None),
    ("RSS idle, N pilots (MiB)", "idle_rss", ".1f", TARGET_RSS_MIB),
    ("CPU idle, N pilots (cores)", "idle_cores", ".4f", TARGET_IDLE_CORES),
    ("reconciles to first status", "reconciles", ".0f", None),
    ("CPU, first pass (s)", "first_pass_cpu", ".2f", None),
    ("CPU per reconcile, first pass (ms)", "cpu_per_reconcile", ".2f", None),
    ("server-side applies, first pass", "applies", ".0f", None),
    ("apply latency, mean (ms)", "apply_ms", ".2f", None),
    ("time to all statuses (s)", "settle", ".1f", None),
    ("reconciles while idle (per s)", "idle_reconciles", ".2f", None),
)


def figure(figures: Figures, name: str) -> float:
    value: float = getattr(figures, name)
    return value


def table(results: dict[str, Figures], pilots: int) -> list[str]:
    """The figures of each client side by side, the library's over the operator's own, and the targets."""
    both = len(results) == len(CLIENTS)
    head = f"  {'':<34}" + "".join(f" {client:>14}" for client in results)
    head += f" {'library/own':>12}" if both else ""
    head += f" {'target':>8}" + "".join(f" {client + '/target':>22}" for client in results)
    lines = [f"operator with {pilots} pilots (pods unschedulable), one process, measured from /proc", head]
    for label, name, fmt, target in ROWS:
        values = [figure(figures, name) for figures in results.values()]
        line = f"  {label:<34}" + "".join(f" {value:>14{fmt}}" for value in values)
        if both:
            own, library = values
            line += f" {library / own:>12.2f}" if own else f" {'-':>12}"
        if target is not None:
            line += f" {target:>8g}" + "".join(f" {value / target:>22.2f}" for value in values)
        lines.append(line.rstrip())
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pilots", type=int, default=100)
    parser.add_argument("--idle-seconds", type=float, default=60.0)
    parser.add_argument(
        "--client",
        choices=(*CLIENTS, "both"),
        default="both",
        help="the operator's Kubernetes client: its own, kubernetes.aio (bench/kube_aio.py), or both in turn",
    )
    args = parser.parse_args()

    bin_dir = script(str(ROOT / "e2e/local/build.sh"))
    os.environ["KUBECONFIG"] = script(str(ROOT / "e2e/local/cluster.sh"), "up")
    os.environ["PATH"] = f"{bin_dir}:{os.environ['PATH']}"
    kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
    results: dict[str, Figures] = {}
    for client in CLIENTS if args.client == "both" else (args.client,):
        print(f"measuring the operator on {client} ...", file=sys.stderr, flush=True)
        results[client] = measure(client, args)

    print()
    print("\n".join(table(results, args.pilots)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
