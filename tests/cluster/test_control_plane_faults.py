"""Faults of the control plane under the demo's load: the API server stopped for 60 s, etcd
restarted, and a router the operator cannot reach while it serves.

Each case pilots the judged pilot (chat drafts well, code badly) with loadgen sending chat and code
through the router, injects its fault mid-pilot, and then holds the pilot to the outcome a run
without the fault reaches: chat adopted, code flipped back, one fallback record per flip and each
transition announced once. What users saw comes from the router's own samples: requests that failed,
and how each scope's traffic was split while the fault lasted. The API server's outage outlives the
routing table's `--max-table-age` (three analysis intervals, at least 30 s), so it also shows the
routers' fail-safe: everything to the baseline once the table is stale, and back to the table's
split once the operator writes it again.

Opt-in (`-m long`, about 12 minutes); each case prints its figures:

    .venv/bin/python -m pytest tests/cluster/test_control_plane_faults.py -m long -s
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from specpilot.testing.waiting import wait_until
from specpilot.wire.names import ROUTER_ADMIN_PORT
from specpilot.wire.samples import Fallback, RequestSample
from tests.cluster.faults import wait_for_a_pass
from tests.cluster.local import CLUSTER_SH, ROOT, Cluster
from tests.cluster.operator_process import Operator, events, pilot, running_operator, wait_ready
from tests.cluster.pilots import judged_pilot, router_ip, router_samples, scopes

pytestmark = [pytest.mark.cluster, pytest.mark.long]

LOAD_SECONDS = 600  # ended early: on SIGINT loadgen writes what it sent
OPERATOR_GROUP = 4242  # the operator runs under a group id of its own: the firewall rule matches it alone
MAX_TABLE_AGE = 30.0  # the judged pilot's: an analysis interval of 5 s, and never under 30 s


@dataclass
class Run:
    cluster: Cluster
    operator: Operator
    namespace: str
    router: str
    load: subprocess.Popen[bytes]
    summary: Path

    def states(self) -> dict[str, str]:
        return {name: s["state"] for name, s in scopes(self.cluster, self.namespace).items()}

    def settle(self, timeout: float = 300) -> None:
        """Until chat is adopted and code flipped back, as without a fault."""
        try:
            wait_until(
                "chat adopted and code flipped back",
                lambda: self.states().get("chat") == "Speculative" and self.states().get("code") == "RolledBack",
                timeout=timeout,
                every=1,
            )
        except AssertionError as error:
            raise AssertionError(f"{error}: {self.states()}\n{self.operator.tail(80)}") from None

    def samples(self) -> list[RequestSample]:
        """Every request the router has served, oldest first."""
        return router_samples(self.router)

    def finish(self) -> dict[str, Any]:
        """Stop the load; loadgen's own summary (what its clients saw)."""
        self.load.send_signal(signal.SIGINT)  # loadgen ends the load and writes its result
        self.load.wait(timeout=60)
        text = self.summary.read_text() if self.summary.exists() else ""
        return json.loads(text) if text else {}


@contextmanager
def piloting(cluster: Cluster, namespace: str, tmp_path: Path) -> Iterator[Run]:
    with running_operator(cluster, tmp_path / "operator.log", group=OPERATOR_GROUP) as operator:
        cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(judged_pilot()))
        wait_ready(cluster, operator, namespace)
        router = router_ip(cluster, namespace)
        summary = tmp_path / "loadgen.json"
        argv = [sys.executable, "-m", "specpilot.cli", "loadgen", "--url", f"http://{router}:8080"]
        argv += ["--mix", str(ROOT / "manifests/workloads/chat-code.yaml"), "--arrivals", "poisson", "--rate", "10"]
        argv += ["--duration", str(LOAD_SECONDS), "--timeout", "30", "--no-progress", "--output", str(summary)]
        load = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=cluster.env())
        run = Run(cluster, operator, namespace, router, load, summary)
        try:
            yield run
        finally:
            if load.poll() is None:
                load.kill()


def cluster_sh(*args: str) -> None:
    done = subprocess.run([str(CLUSTER_SH), *args], check=False, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"cluster.sh {' '.join(args)} failed ({done.returncode}): {done.stderr[-2000:]}"


def split(samples: list[RequestSample], start: float, end: float) -> dict[str, dict[str, int]]:
    """Requests started in [start, end), by scope and arm."""
    out: dict[str, Counter[str]] = {}
    for s in samples:
        if start <= s.at < end:
            out.setdefault(s.scope, Counter())[str(s.arm)] += 1
    return {scope: dict(sorted(arms.items())) for scope, arms in sorted(out.items())}


def client_view(seen: dict[str, Any]) -> dict[str, Any]:
    overall = seen.get("overall", {})
    return {k: overall.get(k) for k in ("requests", "ok", "timeouts", "rejections", "errors")}


def failed(samples: list[RequestSample]) -> list[RequestSample]:
    return [s for s in samples if str(s.outcome) != "ok"]


def held_to_the_outcome(run: Run) -> None:
    """One fallback record per flip, each transition announced once, the operator still running."""
    status = pilot(run.cluster, run.namespace)["status"]
    assert [(r["scope"], r["reason"]) for r in status["fallbacks"]] == [("code", "ThresholdExceeded")]
    reasons = Counter(e["reason"] for e in events(run.cluster, run.namespace))
    once = {"PilotCreated", "ScopeRolledBack", "ScopeSpeculative", "RoutesTaken"}
    assert {reason: reasons[reason] for reason in once} == dict.fromkeys(once, 1), reasons
    assert run.operator.proc is not None and run.operator.proc.poll() is None, run.operator.tail(80)


def report(title: str, figures: dict[str, Any]) -> None:
    print(f"\n{title}")
    for key, value in figures.items():
        print(f"  {key}: {value}")


def test_the_api_server_stopped_for_a_minute_loses_no_request_and_the_tables_age_to_the_baseline(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    with piloting(cluster, namespace, tmp_path) as run:
        wait_for_a_pass(run.cluster, run.operator, run.namespace, timeout=120)
        before = run.states()
        stopped = time.time()
        cluster_sh("stop", "kube-apiserver")
        time.sleep(60)  # a minute with the API server down
        restarted = time.time()
        cluster_sh("up")
        ready = time.time()
        run.settle()
        samples, seen = run.samples(), run.finish()
        held_to_the_outcome(run)

    stale_from = stopped + MAX_TABLE_AGE + 1  # the last table was written before the stop
    stale = [s for s in samples if stale_from <= s.at < restarted]
    fresh = next((s.at for s in samples if s.at >= ready and s.arm != "baseline"), None)
    report(
        "API server stopped for 60 s",
        {
            "states when stopped": before,
            "down (s)": f"{ready - stopped:.1f} ({restarted - stopped:.1f} stopped, {ready - restarted:.1f} to Ready)",
            "requests (router)": len(samples),
            "failed (router)": len(failed(samples)),
            "loadgen": client_view(seen),
            "split before the stop (30 s)": split(samples, stopped - 30, stopped),
            f"split while down, table fresh (first {MAX_TABLE_AGE:.0f} s)": split(samples, stopped, stale_from),
            "split while down, table stale": split(samples, stale_from, restarted),
            "split after Ready": split(samples, ready, time.time()),
            "first non-baseline request after Ready (s)": None if fresh is None else f"{fresh - ready:.1f}",
        },
    )
    assert not failed(samples), [(s.scope, s.arm, s.status, s.outcome) for s in failed(samples)][:20]
    assert seen["overall"]["requests"] and seen["overall"]["requests"] == seen["overall"]["ok"], seen["overall"]
    # The fail-safe: once the table is older than --max-table-age, every scope goes to the baseline ...
    # (A request the table sent to the baseline anyway carries no fallback.)
    redirected = Counter((str(s.arm), s.fallback) for s in stale)
    assert set(redirected) <= {("baseline", None), ("baseline", Fallback.TABLE_STALE)}, redirected
    assert redirected[("baseline", Fallback.TABLE_STALE)] > 0, redirected
    # ... and back to the table's split when the operator writes it again.
    assert fresh is not None and fresh - ready < 30


def test_an_etcd_restart_loses_no_request_and_repeats_nothing(cluster: Cluster, namespace: str, tmp_path: Path) -> None:
    with piloting(cluster, namespace, tmp_path) as run:
        wait_for_a_pass(run.cluster, run.operator, run.namespace, timeout=120)
        before = run.states()
        stopped = time.time()
        cluster_sh("stop", "etcd")
        cluster_sh("up")  # etcd again with its data, and the API server reconnects
        ready = time.time()
        run.settle()
        samples, seen = run.samples(), run.finish()
        held_to_the_outcome(run)
    report(
        "etcd restarted",
        {
            "states when stopped": before,
            "etcd down until the API server was Ready (s)": f"{ready - stopped:.1f}",
            "requests (router)": len(samples),
            "failed (router)": len(failed(samples)),
            "loadgen": client_view(seen),
            "split while down": split(samples, stopped, ready),
        },
    )
    assert not failed(samples), [(s.scope, s.arm, s.status, s.outcome) for s in failed(samples)][:20]
    assert seen["overall"]["requests"] and seen["overall"]["requests"] == seen["overall"]["ok"], seen["overall"]


@contextmanager
def unreachable(address: str, port: int) -> Iterator[None]:
    """The operator's connections to `address:port` refused, while everything else (clients, the
    node's readiness probes) reaches it."""
    rule = ["OUTPUT", "-d", address, "-p", "tcp", "--dport", str(port), "-m", "owner", "--gid-owner"]
    rule += [str(OPERATOR_GROUP), "-j", "REJECT", "--reject-with", "tcp-reset"]
    subprocess.run(["iptables", "-I", *rule], check=True)
    try:
        yield
    finally:
        subprocess.run(["iptables", "-D", *rule], check=True)


@pytest.mark.skipif(shutil.which("iptables") is None, reason="needs iptables (apt-get install iptables) and root")
def test_a_router_the_operator_cannot_reach_still_takes_a_flip_and_no_scope_moves_on_what_it_cannot_read(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    with piloting(cluster, namespace, tmp_path) as run:
        time.sleep(10)  # a few requests read, no window judged yet
        with unreachable(run.router, ROUTER_ADMIN_PORT):
            blocked = time.time()
            time.sleep(20)  # past a window: what the operator last read is now out of date
            held = scopes(run.cluster, run.namespace)
            run.cluster.kubectl(
                "annotate", "-n", namespace, "speculationpilot/demo", "specpilot.io/abort=chat", "--overwrite"
            )
            wait_until(
                "chat aborted",
                lambda: scopes(run.cluster, run.namespace)["chat"]["state"] == "RolledBack",
                timeout=60,
                every=1,
            )
            aborted = time.time()
            time.sleep(40)  # still unreachable after the abort: nothing may move on what it cannot read
            during = scopes(run.cluster, run.namespace)
            unblocked = time.time()
        # Unreadable evidence moves nothing; once readable again, code's own evidence flips it.
        wait_until(
            "code flipped back",
            lambda: scopes(run.cluster, run.namespace)["code"]["state"] == "RolledBack",
            timeout=240,
            every=1,
        )
        samples, seen = run.samples(), run.finish()
        status = pilot(cluster, namespace)["status"]
        reasons = Counter(e["reason"] for e in events(cluster, namespace))
        warnings = [e["message"] for e in events(cluster, namespace) if e["reason"] == "RoutesUnconfirmed"]

    chat_after = [s for s in samples if s.scope == "chat" and aborted + 1 <= s.at < unblocked]
    report(
        "the router's admin port unreachable from the operator for "
        f"{unblocked - blocked:.0f} s (the abort of chat {aborted - blocked:.0f} s in)",
        {
            "scopes when blocked": {k: (v["state"], v.get("stage")) for k, v in held.items()},
            "scopes 40 s after the abort": {k: (v["state"], v.get("stage")) for k, v in during.items()},
            "code's last window while blocked": during["code"].get("lastWindow"),
            "requests (router)": len(samples),
            "failed (router)": len(failed(samples)),
            "loadgen": client_view(seen),
            "split after the abort, while blocked": split(samples, aborted + 1, unblocked),
            "flip Events": {k: reasons[k] for k in ("RoutesTaken", "RoutesUnconfirmed")},
            "unconfirmed": warnings,
        },
    )
    assert not failed(samples), [(s.scope, s.arm, s.status, s.outcome) for s in failed(samples)][:20]
    # The router took the abort from its ConfigMap although the operator never heard it confirm.
    assert chat_after and all(s.arm == "baseline" for s in chat_after), Counter(str(s.arm) for s in chat_after)
    assert reasons["RoutesUnconfirmed"] == 1 and run.router in warnings[0], reasons
    # No scope moved on evidence the operator could not read.
    assert held["code"]["state"] in ("Piloting", "Held"), held
    assert during["code"]["state"] in ("Piloting", "Held") and during["code"].get("stage") == held["code"].get("stage")
    assert during["code"]["lastWindow"]["verdict"] == "Inconclusive", during["code"]
    assert sorted((r["scope"], r["reason"]) for r in status["fallbacks"]) == [
        ("chat", "ManualAbort"),
        ("code", "ThresholdExceeded"),
    ]
