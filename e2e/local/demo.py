"""The local demo: one pilot's data plane on the local cluster, driven through two stages.

What the operator will automate is done here step by step, in the open: deploy the arms and the
router, write the routing table, send mixed traffic, read per-scope truth from the router and
engine truth from each arm's /metrics, then promote one scope and flip the other back to
ordinary decoding, and show that new requests follow within a second.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from specpilot.wire.names import routes_name
from specpilot.wire.routes import ArmWeights, RoutingTable, ScopeMatch, ScopeRoute, render_routes

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = os.environ.get("SPECPILOT_DEMO_NAMESPACE", "specpilot-demo")
PILOT = "demo"
PHASE_SECONDS = float(os.environ.get("SPECPILOT_DEMO_SECONDS", "25"))
RATE = os.environ.get("SPECPILOT_DEMO_RATE", "6")


def say(text: str) -> None:
    print(f"\n== {text}", flush=True)


def kubectl(*args: str, input: str | None = None) -> str:
    out = subprocess.run(["kubectl", "-n", NAMESPACE, *args], input=input, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        sys.exit(f"kubectl {' '.join(args)} failed: {out.stderr.strip()}")
    return out.stdout


def rollout(deployment: str) -> None:
    """Wait for a Deployment; when it does not come up, show its pods and where their output is."""
    argv = ["kubectl", "-n", NAMESPACE, "rollout", "status", f"deployment/{deployment}", "--timeout=120s"]
    out = subprocess.run(argv, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        print(kubectl("get", "pods", "-o", "wide"))
        logs = Path(os.environ.get("SPECPILOT_CLUSTER_DIR", ROOT / ".cluster")) / "node" / "pods"
        sys.exit(f"{deployment} did not roll out: {out.stderr.strip()}; container output: {logs}/{NAMESPACE}_*/")


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


def write_routes(generation: int, chat: int, code: int) -> None:
    """The routing table an operator would write: percent of each scope on the speculative arm."""

    def route(name: str, spec: int, deadline: float) -> ScopeRoute:
        weights = ArmWeights(baseline=100 - spec, speculative=spec)
        return ScopeRoute(name=name, weights=weights, deadline_seconds=deadline, match=ScopeMatch())

    table = RoutingTable(
        pilot=PILOT,
        generation=generation,
        updated_at=datetime.now(UTC),
        default_scope="chat",
        scopes=(route("chat", chat, 8), route("code", code, 10)),
    )
    doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": routes_name(PILOT)}}
    kubectl("apply", "-f", "-", input=json.dumps({**doc, "data": render_routes(table)}))


def pod_ips(selector: str) -> list[str]:
    pods = json.loads(kubectl("get", "pods", "-l", selector, "-o", "json"))["items"]
    return [p["status"]["podIP"] for p in pods if p.get("status", {}).get("podIP")]


def engine_counters(ip: str) -> dict[str, float]:
    """The vLLM counters that time per committed token and acceptance length are made of."""
    with urllib.request.urlopen(f"http://{ip}:8000/metrics", timeout=10) as resp:
        text = resp.read().decode()
    wanted = {
        "vllm:request_decode_time_seconds_sum": "decode",
        "vllm:request_decode_time_seconds_count": "finished",
        "vllm:generation_tokens_total": "tokens",
        "vllm:spec_decode_num_drafts_total": "drafts",
        "vllm:spec_decode_num_accepted_tokens_total": "accepted",
    }
    values = dict.fromkeys(wanted.values(), 0.0)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in wanted:
                values[wanted[sample.name]] += sample.value
    return values


def engine_line(arm: str, before: dict[str, float], after: dict[str, float]) -> str:
    d = {k: after[k] - before[k] for k in after}
    committed = d["tokens"] - d["finished"]
    if committed <= 0:
        return f"  {arm:<12} no finished requests in this window: inconclusive"
    line = f"  {arm:<12} {1000 * d['decode'] / committed:7.2f} ms per committed token"
    if d["drafts"] > 0:
        line += f", mean acceptance length {1 + d['accepted'] / d['drafts']:.2f}"
    return line


def quantile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1] if len(values) > 1 else values[0]


def scope_table(samples: list[dict[str, Any]]) -> None:
    print(f"  {'scope':<6} {'arm':<12} {'req':>4} {'ok':>4} {'late':>4} {'ttft p50':>9} {'e2e p95':>8} {'ms/token':>9}")
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for s in samples:
        groups.setdefault((s["scope"], s["arm"]), []).append(s)
    for (scope, arm), group in sorted(groups.items()):
        ok = [s for s in group if s["outcome"] == "ok"]
        late = sum(1 for s in group if s["deadlineMet"] is False)
        ttft = [s["ttftSeconds"] for s in ok if s["ttftSeconds"] is not None]
        e2e = [s["e2eSeconds"] for s in ok]
        tpot = [s["tpotSeconds"] for s in ok if s["tpotSeconds"] is not None]
        cells = (
            f"{1000 * quantile(ttft, 0.5):7.0f}ms" if ttft else "      n/a",
            f"{quantile(e2e, 0.95):7.2f}s" if e2e else "     n/a",
            f"{1000 * statistics.fmean(tpot):9.2f}" if tpot else "      n/a",
        )
        print(f"  {scope:<6} {arm:<12} {len(group):>4} {len(ok):>4} {late:>4} {cells[0]} {cells[1]} {cells[2]}")


def phase(title: str, router_ip: str, cursor: int) -> int:
    """Send one phase of mixed traffic through the router; print what router and engines measured."""
    say(title)
    arms = {arm: pod_ips(f"specpilot.io/pilot={PILOT},specpilot.io/arm={arm}") for arm in ("baseline", "speculative")}
    before = {arm: engine_counters(ips[0]) for arm, ips in arms.items()}
    with tempfile.NamedTemporaryFile(suffix=".json") as result:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "specpilot.cli",
                "loadgen",
                "--url",
                f"http://{router_ip}:8080",
                "--mix",
                str(ROOT / "manifests/demo/mix.yaml"),
                "--arrivals",
                "poisson",
                "--rate",
                RATE,
                "--duration",
                str(PHASE_SECONDS),
                "--timeout",
                "60",
                "--scope-header",
                "X-Specpilot-Scope",
                "--output",
                result.name,
            ],
            check=True,
        )
        client = json.loads(Path(result.name).read_text())
    page = get_json(f"http://{router_ip}:9090/samples?since={cursor}")
    print("\n  router, per scope and arm (every request counted, failures included):")
    scope_table(page["samples"])
    print("\n  engines, from each arm's /metrics over the phase:")
    for arm, ips in arms.items():
        print(engine_line(arm, before[arm], engine_counters(ips[0])))
    overall = client.get("overall", client)
    print(f"\n  client side (loadgen): {overall.get('requests')} requests, {overall.get('ok')} ok")
    return int(page["next"])


def main() -> int:
    say(f"SpeculationPilot API: CRD and the local-demo pilot in namespace {NAMESPACE}")
    subprocess.run(["kubectl", "apply", "-f", str(ROOT / "crds")], check=True, capture_output=True)
    subprocess.run(["kubectl", "create", "namespace", NAMESPACE], capture_output=True, check=False)
    kubectl("apply", "-f", str(ROOT / "manifests/examples/local-demo.yaml"))
    print(kubectl("get", "speculationpilots"))
    print("  (the operator that reconciles it is not built yet; below, its steps are done by hand)")

    say("Data plane: baseline and speculative arms (mock vLLM pods) and the router")
    write_routes(1, chat=25, code=25)
    kubectl("apply", "-f", str(ROOT / "manifests/demo/arms.yaml"), "-f", str(ROOT / "manifests/demo/router.yaml"))
    for name in ("demo-baseline", "demo-speculative", "demo-router"):
        rollout(name)
    print(kubectl("get", "pods,endpointslices", "-o", "wide"))
    (router_ip,) = pod_ips(f"specpilot.io/pilot={PILOT},app.kubernetes.io/component=router")

    cursor = phase("Stage 1: 25% of chat and of code on the speculative arm", router_ip, 0)

    say("Decision by hand: chat drafts well -> promote to 50%; code is slower speculatively -> flip back")
    changed = time.monotonic()
    write_routes(2, chat=50, code=0)
    while get_json(f"http://{router_ip}:9090/routes").get("generation") != 2:
        time.sleep(0.05)
    print(f"  the router applied the new table {time.monotonic() - changed:.2f} s after the ConfigMap write")

    phase("Stage 2: chat 50% speculative, code on ordinary decoding", router_ip, cursor)
    say("Done. The cluster keeps running:")
    print(f"  export KUBECONFIG={os.environ.get('KUBECONFIG')}")
    print(f"  kubectl -n {NAMESPACE} get speculationpilots,pods,endpointslices")
    print(f"  curl http://{router_ip}:9090/routes ; curl http://{router_ip}:9090/metrics")
    print("  make cluster-down   # stop it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
