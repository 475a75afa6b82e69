"""From a fault in the speculative arm to the router sending that scope to the baseline, timed.

Runs the operator as a process on the local cluster (started if needed) with a one-scope pilot of
mock vLLM arms (analysis interval 5 s, failureLimit 2) under steady chat traffic. Each trial waits
for a passing window, posts a fault to the speculative pod's fault endpoint, polls the router's
/routes until the scope's speculative weight is 0, then clears the fault and resumes the scope by
annotation. Two kinds: an error fault (a hard limit: target interval + 2 s) and a latency fault
(ratio checks, failureLimit failing windows: target failureLimit x interval + 2 s).

    .venv/bin/python bench/flip.py [--trials 20]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "bench-flip"
ADMIN_PORT = 8001
INTERVAL_S, FAILURE_LIMIT, WINDOW_S = 5.0, 2, 15.0  # WINDOW_S as in manifests/demo/pilot.yaml
FAULTS = {
    "errors (hard limit)": ({"kind": "errors", "rate": 0.5, "status": 500}, INTERVAL_S + 2),
    "latency (ratio checks)": ({"kind": "latency", "factor": 1.0, "extra_s": 0.5}, FAILURE_LIMIT * INTERVAL_S + 2),
}


def script(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]


def kubectl(*args: str, input: str | None = None) -> str:
    argv = ["kubectl", "-n", NAMESPACE, *args]
    return subprocess.run(argv, check=True, capture_output=True, text=True, input=input).stdout


def http(method: str, url: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=5) as resp:
        return json.loads(resp.read() or b"null")


def until(what: str, check: Callable[[], Any], timeout: float, every: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")


def pilot() -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "manifests/demo/pilot.yaml").read_text())
    spec = doc["spec"]
    spec["engine"]["extraArgs"] = [f"--admin-port={ADMIN_PORT}"]
    spec["scopes"] = [{"name": "chat", "stages": [{"weight": 50, "minRequests": 10, "minDuration": "1h"}]}]
    spec["analysis"]["interval"], spec["analysis"]["failureLimit"] = f"{INTERVAL_S:g}s", FAILURE_LIMIT
    return dict(doc)


def pod_ip(selector: str) -> str:
    pods = json.loads(kubectl("get", "pods", "-l", selector, "-o", "json"))["items"]
    return str(next(p["status"]["podIP"] for p in pods if not p["metadata"].get("deletionTimestamp")))


def chat() -> dict[str, Any]:
    status = json.loads(kubectl("get", "speculationpilot", "demo", "-o", "json")).get("status", {})
    return next((s for s in status.get("scopes", []) if s["name"] == "chat"), {})


def trial(fault: dict[str, Any], speculative: str, router: str) -> float:
    until("a passing window", lambda: chat().get("lastWindow", {}).get("verdict") == "Pass", timeout=120, every=0.5)
    http("POST", f"http://{speculative}:{ADMIN_PORT}/faults", fault)
    injected = time.monotonic()

    def router_on_baseline() -> bool:
        weights = http("GET", f"http://{router}:9090/routes")["scopes"]["chat"]["weights"]
        return bool(weights["speculative"] == 0)

    until("the router to send chat to the baseline", router_on_baseline, timeout=90)
    took = time.monotonic() - injected
    http("DELETE", f"http://{speculative}:{ADMIN_PORT}/faults")
    until("chat rolled back in status", lambda: chat().get("state") == "RolledBack", timeout=30, every=0.2)
    time.sleep(WINDOW_S + INTERVAL_S)  # the fault's requests leave the window before the scope pilots again
    kubectl("annotate", "speculationpilot/demo", "specpilot.io/resume=chat", "--overwrite")
    until("chat piloting again", lambda: chat().get("state") in ("Piloting", "Held"), timeout=30, every=0.2)
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    args = parser.parse_args()
    bin_dir = script(str(ROOT / "e2e/local/build.sh"))
    os.environ["KUBECONFIG"] = script(str(ROOT / "e2e/local/cluster.sh"), "up")
    os.environ["PATH"] = f"{bin_dir}:{os.environ['PATH']}"
    subprocess.run(["kubectl", "apply", "--server-side", "-f", str(ROOT / "crds")], check=True, capture_output=True)
    # The operator starts first: a previous run's pilot, if any, needs it to finish its teardown.
    operator = subprocess.Popen(
        [
            # Every namespace: one that terminates before a namespaced operator starts is never watched.
            *(sys.executable, "-m", "specpilot.cli", "operator", "--all-namespaces"),
            *(
                "--router-image",
                "specpilot/specpilot:dev",
                "--liveness",
                "127.0.0.1:18681",
                "--metrics",
                "127.0.0.1:18682",
            ),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    load = None
    results: dict[str, list[float]] = {}
    try:
        subprocess.run(
            ["kubectl", "delete", "namespace", NAMESPACE, "--timeout=180s"], capture_output=True, check=False
        )
        subprocess.run(["kubectl", "create", "namespace", NAMESPACE], capture_output=True, check=True)
        kubectl("apply", "-f", "-", input=json.dumps(pilot()))
        kubectl("wait", "--for=condition=Ready", "speculationpilot/demo", "--timeout=180s")
        router, speculative = pod_ip("app.kubernetes.io/component=router"), pod_ip("specpilot.io/arm=speculative")
        load = subprocess.Popen(
            [
                *(sys.executable, "-m", "specpilot.cli", "loadgen", "--url", f"http://{router}:8080"),
                *("--mix", str(ROOT / "manifests/workloads/chat-code.yaml"), "--arrivals", "poisson", "--rate", "10"),
                *("--duration", "3600", "--timeout", "30", "--no-progress"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for name, (fault, _) in FAULTS.items():
            results[name] = []
            for index in range(args.trials):
                results[name].append(trial(fault, speculative, router))
                print(f"  {name} trial {index + 1}: {results[name][-1]:.2f} s", flush=True)
    finally:
        if load is not None:
            load.terminate()
            load.wait(timeout=30)
        subprocess.run(
            ["kubectl", "-n", NAMESPACE, "delete", "speculationpilot", "demo", "--timeout=120s"], check=False
        )
        operator.terminate()
        operator.wait(timeout=30)
        subprocess.run(["kubectl", "delete", "namespace", NAMESPACE, "--wait=false"], capture_output=True, check=False)

    print(f"\nfault -> router sends the scope to baseline; interval {INTERVAL_S:g} s, failureLimit {FAILURE_LIMIT}")
    print(f"  {'fault':<24} {'trials':>6} {'median s':>9} {'max s':>7} {'target s':>9} {'max/target':>10}")
    for name, (_, target) in FAULTS.items():
        times = results.get(name, [])
        if times:
            median, worst = statistics.median(times), max(times)
            print(f"  {name:<24} {len(times):>6} {median:>9.2f} {worst:>7.2f} {target:>9.1f} {worst / target:>10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
