"""The router on the local cluster: it watches its table and its arms' EndpointSlices, moves a
scope within a second of a ConfigMap change, and falls back to baseline when every speculative
pod goes, without failing requests that were not already in flight."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

import pytest

from specpilot.testing.waiting import wait_until
from tests.cluster.local import Cluster
from tests.cluster.router_pilot import Pilot, deploy, routes_configmap, scope

pytestmark = pytest.mark.cluster


@dataclass(frozen=True)
class Sent:
    started: float
    ended: float
    arm: str
    ok: bool


def send(pilot: Pilot, *, stream: bool, max_tokens: int) -> Sent:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": stream, "max_tokens": max_tokens}
    request = urllib.request.Request(
        f"{pilot.url}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "X-Specpilot-Scope": "code"},
    )
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            text = resp.read()
            arm = resp.headers.get("X-Specpilot-Arm", "")
            ok = resp.status == 200 and (not stream or (text.rstrip().endswith(b"[DONE]") and b'"error"' not in text))
    except (urllib.error.URLError, OSError):
        arm, ok = "", False
    return Sent(started, time.monotonic(), arm, ok)


class Traffic:
    """Clients sending requests back to back in threads until stopped."""

    def __init__(self, pilot: Pilot, *, clients: int, stream: bool, max_tokens: int) -> None:
        self.sent: list[Sent] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(pilot, stream, max_tokens), daemon=True) for _ in range(clients)
        ]

    def _run(self, pilot: Pilot, stream: bool, max_tokens: int) -> None:
        while not self._stop.is_set():
            self.sent.append(send(pilot, stream=stream, max_tokens=max_tokens))

    def __enter__(self) -> Traffic:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)


def test_a_configmap_change_moves_new_requests_within_one_second(cluster: Cluster, namespace: str) -> None:
    pilot = deploy(cluster, namespace, scope("code", spec=0))
    with Traffic(pilot, clients=1, stream=False, max_tokens=1) as traffic:
        wait_until("requests answered before the change", lambda: len(traffic.sent) >= 5, timeout=30, every=0.05)
        changed = time.monotonic()  # before kubectl even starts: the second includes its own run
        pilot.apply(routes_configmap(scope("code", spec=100), generation=2))
        wait_until(
            "more than ten requests sent over a second after the change",
            lambda: len([s for s in traffic.sent if s.started >= changed + 1.0]) > 10,
            timeout=30,
            every=0.05,
        )
    sent = traffic.sent
    assert all(s.ok for s in sent)
    assert {s.arm for s in sent if s.started < changed} == {"baseline"}
    late = [s for s in sent if s.started >= changed + 1.0]
    assert len(late) > 10 and {s.arm for s in late} == {"speculative"}
    first = min(s.started for s in sent if s.arm == "speculative") - changed
    print(f"first request on the speculative arm {first * 1000:.0f} ms after the change began")
    assert pilot.routes()["generation"] == 2


def test_deleting_every_speculative_pod_sends_the_scope_to_baseline_without_failures(
    cluster: Cluster, namespace: str
) -> None:
    pilot = deploy(cluster, namespace, scope("code", spec=100), speculative_replicas=2)
    with Traffic(pilot, clients=4, stream=True, max_tokens=40) as traffic:
        wait_until("streams answered before the deletion", lambda: len(traffic.sent) >= 8, timeout=30, every=0.05)
        deleting = time.monotonic()
        cluster.kubectl("scale", "-n", namespace, "deployment/p1-speculative", "--replicas=0")
        wait_until(
            "the router to lose every speculative endpoint",
            lambda: not pilot.routes()["endpoints"]["speculative"],
            timeout=30,
            every=0.05,
        )
        gone = time.monotonic()
        wait_until(
            "more than ten streams sent after the arm was gone",
            lambda: len([s for s in traffic.sent if s.started >= gone]) > 10,
            timeout=30,
            every=0.05,
        )
    sent = traffic.sent
    before = [s for s in sent if s.ended < deleting]
    assert before and {s.arm for s in before} == {"speculative"} and all(s.ok for s in before)
    failed = [s for s in sent if not s.ok]
    assert all(s.started < gone for s in failed), "a request failed that started after the arm was gone"
    in_flight = [s for s in sent if s.started < deleting < s.ended]
    assert len(failed) <= len(in_flight), f"{len(failed)} failed, only {len(in_flight)} were in flight"
    after = [s for s in sent if s.started >= gone]
    assert len(after) > 10 and all(s.ok and s.arm == "baseline" for s in after)
    routes = pilot.routes()
    assert routes["scopes"]["code"]["fallbacks"] == ["speculative_unavailable"]
    assert routes["scopes"]["code"]["weights"]["baseline"] == 100
    samples = pilot.samples()
    assert samples[-1]["arm"] == "baseline" and samples[-1]["fallback"] == "speculative_unavailable"
    assert 'specpilot_router_fallback{reason="speculative_unavailable",scope="code"} 1.0' in pilot.metrics()
