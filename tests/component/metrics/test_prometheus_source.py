"""The Prometheus source against direct scraping, on the same run: a real Prometheus (the Debian
package) scrapes mock vLLM processes every second while the operator's collector scrapes them itself;
windows closed at the same instants give the same engine figures within the noise of the scrape
times, and the judge gives the same verdicts. What Prometheus cannot vouch for (a restart, a pod it
failed to scrape, labels that match nothing, a server that does not answer) is inconclusive.

The pods are `specpilot mock-vllm` processes on loopback addresses of their own, at the engine
port, and a `specpilot router` process with static endpoints spreads loadgen's chat and code mix
(manifests/workloads/chat-code.yaml) over them; Prometheus knows them by the `namespace` and `pod`
labels Kubernetes discovery would give.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from tests.prometheus_server import Prometheus, running_prometheus, skip_reason, static_job

from specpilot.analysis.checks import Verdict
from specpilot.analysis.judge import judge_window
from specpilot.analysis.window import ArmEngine, ScopeWindow
from specpilot.api.spec import Analysis, MetricsSource, Quality
from specpilot.controller.collect import Collector
from specpilot.controller.core.measurements import cadence
from specpilot.fetch.outbound import allowing_loopback
from specpilot.fetch.scrape import scrape_session
from specpilot.mockvllm.metrics import BUCKETS
from specpilot.testing.waiting import eventually, wait_http
from specpilot.wire.names import ENGINE_PORT, ROUTER_ADMIN_PORT, ROUTER_PORT, Arm
from specpilot.wire.routes import ROUTES_KEY, ArmWeights, RoutingTable, ScopeMatch, ScopeRoute, render_routes

pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")

ROOT = Path(__file__).resolve().parents[3]
CLI = [sys.executable, "-m", "specpilot.cli"]
NAMESPACE, PILOT = "team-a", "demo"
K = 3
SCOPES = ("chat", "code")
PROFILE = {
    "cost": {"step_time_s": 0.02, "draft_cost_ratio": 0.3},
    "acceptance": {"default": 0.7, "scopes": {"chat": 0.9, "code": 0.1}},
}
ANALYSIS: dict[str, Any] = {
    "interval": "5s",
    "window": "15s",
    "warmup": "0s",
    "minSamples": 10,
    "failureLimit": 2,
    "thresholds": {
        "kvCacheUsage": {"max": 0.95, "sustainedFor": "10s"},
        "ttft": {"quantile": 0.99, "maxRatio": 10.0},
        "endToEnd": {"quantile": 0.95, "maxRatio": 10.0},
        # This profile's inter-token-latency ratio sits near the default 2x: a point comparison of two
        # quantiles that lands on either side by chance, between two direct windows as well.
        "interTokenLatency": {"quantile": 0.99, "maxRatio": 10.0},
        # The arm's acceptance length over chat and code together sits near 1.5; the sources agree on
        # the figure within the scrape times' noise, so a limit there would split them by chance.
        "minAcceptanceLength": 1.2,
    },
}


@dataclass
class Pod:
    name: str
    ip: str
    argv: list[str]
    log: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {**os.environ, "SPECPILOT_MOCK_PROFILE_JSON": json.dumps(PROFILE)}
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, env=env)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)


@dataclass
class Pilot:
    """The running pods by arm, the router, and the Prometheus that scrapes them."""

    arms: dict[Arm, list[Pod]]
    router: Pod
    prometheus: Prometheus
    tmp: Path

    def ready(self) -> dict[Arm, list[tuple[str, str]]]:
        return {arm: [(pod.name, pod.ip) for pod in pods] for arm, pods in self.arms.items()}


def _loopback_block() -> str:
    """A 127.x.y.0/24 whose engine and router ports nobody listens on (the machine is shared)."""
    for _ in range(50):
        base = f"127.{random.randint(64, 250)}.{random.randint(1, 250)}"
        try:
            for host, port in ((f"{base}.11", ENGINE_PORT), (f"{base}.31", ROUTER_ADMIN_PORT)):
                with socket.socket() as sock:
                    sock.bind((host, port))
        except OSError:
            continue
        return base
    raise AssertionError("no free loopback block")


def engine_pod(tmp: Path, name: str, ip: str, *, speculative: bool) -> Pod:
    argv = [*CLI, "mock-vllm", "test-model", "--host", ip, "--port", str(ENGINE_PORT)]
    if speculative:
        argv += ["--speculative-config", json.dumps({"model": "org/draft", "num_speculative_tokens": K})]
    return Pod(name, ip, argv, tmp / f"{name}.log")


@pytest.fixture
def pilot(tmp_path: Path) -> Iterator[Pilot]:
    base = _loopback_block()
    arms = {
        Arm.BASELINE: [engine_pod(tmp_path, "demo-baseline-6c7f9-x2k4q", f"{base}.11", speculative=False)],
        Arm.SPECULATIVE: [
            engine_pod(tmp_path, "demo-speculative-5d8b7-p9m3z", f"{base}.21", speculative=True),
            engine_pod(tmp_path, "demo-speculative-5d8b7-h4t6w", f"{base}.22", speculative=True),
        ],
    }
    weights = ArmWeights(baseline=50, speculative=50, alternative=0)
    table = RoutingTable(
        pilot=PILOT,
        generation=1,
        updated_at=datetime.now(UTC),
        default_scope=None,
        scopes=tuple(
            ScopeRoute(name=n, weights=weights, deadline_seconds=None, match=ScopeMatch()) for n in ("chat", "code")
        ),
    )
    routes = tmp_path / "routes.json"
    routes.write_text(render_routes(table)[ROUTES_KEY])
    router_ip = f"{base}.31"
    router_argv = [*CLI, "router", "--pilot", PILOT, "--listen", f"{router_ip}:{ROUTER_PORT}"]
    router_argv += ["--admin-listen", f"{router_ip}:{ROUTER_ADMIN_PORT}", "--static-routes", str(routes)]
    router_argv += ["--max-table-age", "0"]
    for arm, pods in arms.items():
        router_argv += ["--static-endpoints", f"{arm.value}=" + ",".join(f"{p.ip}:{ENGINE_PORT}" for p in pods)]
    router = Pod("demo-router-7f6d5-q8w2e", router_ip, router_argv, tmp_path / "router.log")
    everything = [*arms[Arm.BASELINE], *arms[Arm.SPECULATIVE], router]
    engines = [
        (f"{p.ip}:{ENGINE_PORT}", {"namespace": NAMESPACE, "pod": p.name}) for pods in arms.values() for p in pods
    ]
    jobs = [
        static_job("vllm", engines),
        static_job("router", [(f"{router_ip}:{ROUTER_ADMIN_PORT}", {"namespace": NAMESPACE, "pod": router.name})]),
    ]
    try:
        for pod in everything:
            pod.start()
        for pod in everything[:-1]:
            wait_http(f"http://{pod.ip}:{ENGINE_PORT}/health")
        wait_http(f"http://{router_ip}:{ROUTER_ADMIN_PORT}/readyz")
        with running_prometheus(tmp_path / "prometheus", jobs) as prometheus:
            prometheus.wait_until_up(len(everything))
            yield Pilot(arms, router, prometheus, tmp_path)
    finally:
        for pod in everything:
            pod.stop()


def analysis(source: MetricsSource | None = None) -> Analysis:
    body = {**ANALYSIS, **({"metricsSource": source.to_wire()} if source is not None else {})}
    return Analysis.from_wire(body)


def prometheus_source(pilot: Pilot, **fields: Any) -> MetricsSource:
    return MetricsSource.from_wire({"prometheus": {"url": pilot.prometheus.url, **fields}})


def load(pilot: Pilot, seconds: int) -> subprocess.Popen[bytes]:
    argv = [
        *CLI,
        "loadgen",
        "--url",
        f"http://{pilot.router.ip}:{ROUTER_PORT}",
        "--mix",
        str(ROOT / "manifests/workloads/chat-code.yaml"),
    ]
    argv += ["--arrivals", "poisson", "--rate", "6", "--duration", str(seconds), "--timeout", "30", "--no-progress"]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def collect_both(
    pilot: Pilot,
    sources: dict[str, Analysis],
    *,
    seconds: float,
    closes: int,
    collected: list[float] | None = None,
) -> list[dict[str, dict[str, ScopeWindow]]]:
    """Collect as the operator does, every `cadence` (2 s here), with each analysis (direct and
    Prometheus, at the same instants); close
    both scopes' windows at the last collection of each of the last `closes` intervals, with direct
    scraping's windows one cycle earlier and one cycle later beside them (the noise of the scrape times).
    Each collection's start, in seconds since the first, is appended to `collected` once it is done."""
    routers = [(pilot.router.name, pilot.router.ip)]
    closed: list[dict[str, dict[str, ScopeWindow]]] = []
    interval, every = 5.0, cadence(sources["direct"])
    last_close: float | None = None
    previous: datetime | None = None
    awaiting: dict[str, dict[str, ScopeWindow]] | None = None  # the last closed, until a cycle later
    started = time.monotonic()
    async with scrape_session(addresses=allowing_loopback()) as session:
        collectors = {name: Collector.over_http(session) for name in sources}
        while (elapsed := time.monotonic() - started) < seconds:
            now = datetime.now(UTC)
            measured = await asyncio.gather(
                *(
                    collector.collect(
                        arms=pilot.ready(),
                        routers=routers,
                        analysis=sources[name],
                        pilot=(NAMESPACE, PILOT),
                        now=now,
                    )
                    for name, collector in collectors.items()
                )
            )
            direct = measured[list(collectors).index("direct")]
            if awaiting is not None:
                awaiting["later"] = {
                    sc: direct.window(sc, analysis=sources["direct"], end=now, compared=Arm.BASELINE) for sc in SCOPES
                }
                awaiting = None
            due = last_close is None or elapsed - last_close >= interval - 0.5
            if elapsed >= seconds - closes * interval and due and previous is not None:
                last_close = elapsed
                windows = {
                    name: {
                        sc: measurements.window(sc, analysis=sources[name], end=now, compared=Arm.BASELINE)
                        for sc in SCOPES
                    }
                    for name, measurements in zip(collectors, measured, strict=True)
                }
                # The noise of the scrape times, measured: direct scraping against itself, one cycle earlier
                # (and, at the next collection, one cycle later).
                windows["earlier"] = {
                    sc: direct.window(sc, analysis=sources["direct"], end=previous, compared=Arm.BASELINE)
                    for sc in SCOPES
                }
                closed.append(windows)
                awaiting = windows
            previous = now
            if collected is not None:
                collected.append(elapsed)
            rest = every - (time.monotonic() - started - elapsed)
            await asyncio.sleep(max(0.0, rest))  # the rest of the cadence (2 s) to the next collection
    return closed[-closes:]


FIGURES = ("time_per_committed_token", "acceptance_rate", "acceptance_length")
ITL_BUCKETS = BUCKETS["inter_token_latency"]  # vLLM 0.33's, as the mock serves them


def differences(a: ArmEngine, b: ArmEngine) -> dict[str, float]:
    """Figure by figure: relative differences of the ratios, how many histogram buckets apart the
    inter-token-latency quantiles are, absolute differences of the mean running and waiting requests
    and of the highest KV-cache usage."""

    def relative(x: float | None, y: float | None) -> float:
        assert x is not None and y is not None, (x, y)
        return abs(x - y) / abs(x)

    out = {name: relative(getattr(a, name), getattr(b, name)) for name in FIGURES if getattr(a, name) is not None}
    assert a.inter_token_latency is not None and b.inter_token_latency is not None
    buckets = (bisect.bisect_left(ITL_BUCKETS, q.value) for q in (a.inter_token_latency, b.inter_token_latency))
    out["inter-token latency (buckets apart)"] = abs(next(buckets) - next(buckets))
    for i, (x, y) in enumerate(zip(a.per_position_acceptance, b.per_position_acceptance, strict=True)):
        out[f"acceptance at position {i}"] = relative(x, y)
    assert a.running is not None and b.running is not None and a.waiting is not None and b.waiting is not None
    out["running (requests)"] = abs(a.running - b.running)
    out["waiting (requests)"] = abs(a.waiting - b.waiting)
    out["kv usage max"] = abs(max(v for _, v in a.kv_usage) - max(v for _, v in b.kv_usage))
    out["preemptions"] = abs(a.preemptions - b.preemptions)
    return out


def test_prometheus_source_agrees_with_direct_scraping(pilot: Pilot) -> None:
    sources = {"direct": analysis(), "prometheus": analysis(prometheus_source(pilot))}
    traffic = load(pilot, 40)
    try:
        closed = asyncio.run(collect_both(pilot, sources, seconds=35, closes=3))
    finally:
        traffic.terminate()
        traffic.wait(timeout=30)
    assert len(closed) == 3
    judged = sources["prometheus"]
    worst: dict[str, list[float]] = {}  # figure -> [against Prometheus, against direct a cycle earlier or later]
    means: dict[str, float] = {}  # the highest mean of running and waiting requests, direct
    kv_max: dict[str, float] = {}  # the highest KV-cache usage seen, either way
    decided: list[Verdict] = []
    for windows in closed:
        for scope in SCOPES:
            direct, prom = windows["direct"][scope], windows["prometheus"][scope]
            assert (direct.start, direct.end) == (prom.start, prom.end)
            shifted = [windows[name][scope] for name in ("earlier", "later") if name in windows]
            for arm in ("compared", "speculative"):
                d, p = (getattr(w, f"{arm}_engine") for w in (direct, prom))
                assert d.inconclusive is None and p.inconclusive is None, (arm, d.inconclusive, p.inconclusive)
                assert d.time_per_committed_token is not None and d.inter_token_latency is not None
                assert d.running is not None and d.waiting is not None
                means[f"{arm} running (requests)"] = max(means.get(f"{arm} running (requests)", 0.0), d.running)
                means[f"{arm} waiting (requests)"] = max(means.get(f"{arm} waiting (requests)", 0.0), d.waiting)
                for figure, difference in differences(d, p).items():
                    noise = max(differences(d, getattr(w, f"{arm}_engine"))[figure] for w in shifted)
                    seen = worst.setdefault(f"{arm} {figure}", [0.0, 0.0])
                    seen[:] = [max(seen[0], difference), max(seen[1], noise)]
            verdicts = [
                judge_window(w, analysis=judged, quality=Quality(), draft_tokens=K, state={}) for w in (direct, prom)
            ]
            checks = [[(c.metric.value, c.verdict.value, c.observed, c.reason) for c in v.checks] for v in verdicts]
            differing = [(a, b) for a, b in zip(*checks, strict=True) if a[:2] != b[:2]]
            assert verdicts[0].verdict == verdicts[1].verdict and not differing, (scope, differing)
            decided.append(verdicts[0].verdict)
            for arm in ("compared", "speculative"):
                kv = [max(v for _, v in getattr(w, f"{arm}_engine").kv_usage) for w in (direct, prom)]
                kv_max[arm] = max(kv_max.get(arm, 0.0), *kv)
    print("\nworst over 3 windows x 2 scopes: direct against Prometheus | against itself a cycle earlier or later")
    for name, (against, noise) in sorted(worst.items()):
        print(f"  {name:45s} {against:8.4f} | {noise:8.4f}")
    print(f"  highest KV-cache usage: {kv_max}")
    # Within the noise of the scrape times. Ratios of counter increases (time per committed token,
    # acceptance) move no further from direct scraping than twice what moving the window's edges by
    # one cycle, either way, moves direct scraping itself, give or take 2%. The p99 inter-token latency is known
    # only to its histogram bucket, and rests on the ten-odd slowest steps (a stall of the machine
    # at an edge is in one window and not the other): the same bucket or the next. KV usage within
    # 0.02, preemptions within one.
    # Running and waiting requests (diagnostics, never judged) are means of gauges sampled at other
    # instants, about 15 samples each: within one request and 15% of the mean.
    for name, (against, noise) in worst.items():
        if name.endswith("(requests)"):
            assert against <= 1.0 + 0.15 * means[name], (name, against, means[name])
        elif name.endswith("(buckets apart)"):
            assert against <= 1, (name, against)
        elif name.endswith("kv usage max"):
            assert against <= 0.02, (name, against)
        elif name.endswith("preemptions"):
            assert against <= 1, (name, against)
        else:
            assert against <= 2 * noise + 0.02, (name, against, noise)
    # and the verdicts agreed on were decisions, not a shared shrug
    assert all(verdict.value in ("Pass", "Fail") for verdict in decided), decided
    print(f"  verdicts, the same both ways: {[v.value for v in decided]}")


def test_what_prometheus_cannot_vouch_for_is_inconclusive(pilot: Pilot) -> None:
    """A speculative pod restarted mid-window, a baseline pod serving garbage as /metrics, labels that
    match nothing, and a server that does not answer."""
    ip = pilot.arms[Arm.BASELINE][0].ip.rsplit(".", 1)[0] + ".12"
    www = pilot.tmp / "www"
    serve = [sys.executable, "-m", "http.server", "--bind", ip, str(ENGINE_PORT), "--directory", str(www)]
    garbage = Pod("demo-baseline-6c7f9-g4rb4", ip, serve, pilot.tmp / "garbage.log")
    www.mkdir()
    (www / "metrics").write_text('vllm:generation_tokens_total{engine="0" 12\n<html>oops</html>\n')
    garbage.start()
    wait_http(f"http://{garbage.ip}:{ENGINE_PORT}/metrics")
    pilot.arms[Arm.BASELINE].append(garbage)
    targets = [
        (f"{p.ip}:{ENGINE_PORT}", {"namespace": NAMESPACE, "pod": p.name}) for ps in pilot.arms.values() for p in ps
    ]
    pilot.prometheus.reconfigure([static_job("vllm", targets)])
    pilot.prometheus.wait_until_scraped(len(targets))  # the window below starts 4 s later, clear of the reload
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        nowhere = f"http://127.0.0.1:{sock.getsockname()[1]}"
    sources = {
        "direct": analysis(),
        "prometheus": analysis(prometheus_source(pilot)),
        "elsewhere": analysis(prometheus_source(pilot, labels={"cluster": "elsewhere"})),
        "down": analysis(MetricsSource.from_wire({"prometheus": {"url": nowhere, "timeout": "1s"}})),
    }

    async def run() -> list[dict[str, dict[str, ScopeWindow]]]:
        collected: list[float] = []
        collecting = asyncio.create_task(collect_both(pilot, sources, seconds=24, closes=1, collected=collected))
        # The window closes 20 s in and spans 15 s: restart once the collections 6 and 8 s in have
        # scraped the pod inside it.
        await eventually(
            "the collection 8 s into the run",
            lambda: collecting.done() or (collected and collected[-1] >= 8),
            within=30,
            every=0.05,
        )
        restarted = pilot.arms[Arm.SPECULATIVE][1]
        restarted.stop()
        restarted.start()
        return await collecting

    traffic = load(pilot, 26)
    try:
        (windows,) = asyncio.run(run())
    finally:
        traffic.terminate()
        traffic.wait(timeout=30)
        garbage.stop()
    reasons = {name: windows[name]["chat"].speculative_engine.inconclusive for name in sources}
    restarted = pilot.arms[Arm.SPECULATIVE][1].name
    assert reasons["direct"] is not None and restarted in reasons["direct"]
    prom = reasons["prometheus"]
    assert prom is not None and f"{restarted}: restarted within the window" in prom, prom
    assert pilot.arms[Arm.SPECULATIVE][0].name not in prom  # the pod that kept running is not blamed
    baseline = {name: windows[name]["chat"].compared_engine.inconclusive or "" for name in ("direct", "prometheus")}
    assert f"{garbage.name} at " in baseline["direct"], baseline
    assert f"{garbage.name}: no successful scrape at the window's end" in baseline["prometheus"], baseline
    assert pilot.arms[Arm.BASELINE][0].name not in baseline["prometheus"]
    assert "Prometheus holds no up series of the speculative arm" in (reasons["elsewhere"] or "")
    assert f"POST {nowhere}/api/v1/query: ClientConnectorError" in (reasons["down"] or ""), reasons["down"]
    for name in ("prometheus", "elsewhere", "down"):
        verdict = judge_window(
            windows[name]["chat"], analysis=sources[name], quality=Quality(), draft_tokens=K, state={}
        )
        assert verdict.verdict.value == "Inconclusive", (name, verdict)
