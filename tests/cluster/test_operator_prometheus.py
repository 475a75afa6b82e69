"""The operator judging from a real Prometheus (the Debian package) instead of scraping the engines
itself: the same pilot run twice on the local cluster, once with direct scraping and once with
`analysis.metricsSource.prometheus`, reaches the same outcome per scope, with the same fallback
record; on the Prometheus run, the engine figures the operator recorded agree with what direct
scraping of the same pods measures over the same window; and KV-cache pressure, which only the
engines show, flips a scope as it does with direct scraping.

Prometheus scrapes the arms' engines and the routers every second, at the addresses of the cluster's
EndpointSlices (Debian's Prometheus is built without Kubernetes discovery, so the test keeps file_sd
targets from them), labelling each series with `namespace` and `pod` as the usual Kubernetes
relabelling does; the pilot names nothing but the URL."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from specpilot.api.spec import Analysis
from specpilot.controller.collect import Collector
from specpilot.controller.core.measurements import Measurements
from specpilot.fetch.outbound import allowing_loopback
from specpilot.fetch.scrape import scrape_session
from specpilot.testing.waiting import wait_until
from specpilot.wire.names import (
    ARM_LABEL,
    COMPONENT_LABEL,
    ENGINE_PORT,
    PILOT_LABEL,
    ROUTER_ADMIN_PORT,
    ROUTER_COMPONENT,
    Arm,
)
from tests.cluster.faults import CASES, chat, fault_pilot, inject, wait_for_a_pass
from tests.cluster.local import Cluster, fresh_namespace
from tests.cluster.operator_process import Operator, pilot, running_operator, start_load, wait_ready
from tests.cluster.pilots import judged_pilot, router_ip, scopes
from tests.prometheus_server import Prometheus, running_prometheus, skip_reason

pytestmark = [pytest.mark.cluster, pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")]


class SliceTargets:
    """Prometheus' targets from the cluster's EndpointSlices, as service discovery would keep them: a
    thread rewrites one file_sd file per job (engines at the engine port, routers at their admin port),
    each target labelled with its namespace and pod; Prometheus reloads a file when it changes."""

    def __init__(self, cluster: Cluster, directory: Path) -> None:
        self.cluster = cluster
        self.files = {job: directory / f"{job}.json" for job in ("vllm", "router")}
        for path in self.files.values():
            path.write_text("[]")
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def jobs(self) -> list[dict[str, Any]]:
        return [
            {"job_name": job, "file_sd_configs": [{"files": [str(path)], "refresh_interval": "5s"}]}
            for job, path in self.files.items()
        ]

    def _run(self) -> None:
        while not self.stopping.wait(1):
            slices = self.cluster.get_json("endpointslices", "-A", "-l", PILOT_LABEL)["items"]
            targets: dict[str, list[dict[str, Any]]] = {job: [] for job in self.files}
            for item in slices:
                labels = item["metadata"].get("labels", {})
                job, port = (
                    ("router", ROUTER_ADMIN_PORT)
                    if labels.get(COMPONENT_LABEL) == ROUTER_COMPONENT
                    else ("vllm", ENGINE_PORT)
                )
                for endpoint in item.get("endpoints") or []:
                    ref = endpoint.get("targetRef") or {}
                    targets[job] += [
                        {
                            "targets": [f"{address}:{port}"],
                            "labels": {"namespace": item["metadata"]["namespace"], "pod": ref.get("name", "")},
                        }
                        for address in endpoint.get("addresses", [])
                    ]
            for job, path in self.files.items():
                text = json.dumps(sorted(targets[job], key=json.dumps))
                if text != path.read_text():
                    path.with_suffix(".tmp").write_text(text)
                    path.with_suffix(".tmp").rename(path)

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=15)


@pytest.fixture(scope="module")
def prometheus(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    directory = tmp_path_factory.mktemp("prometheus")
    targets = SliceTargets(cluster, directory)
    try:
        with running_prometheus(directory / "server", targets.jobs()) as server:
            yield server
    finally:
        targets.stop()


@pytest.fixture(scope="module")
def operator(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    log = tmp_path_factory.mktemp("prometheus-judging") / "operator.log"
    # The test's Prometheus listens on loopback, which the operator calls only when allowed to.
    with running_operator(cluster, log, "--allow-outbound", "127.0.0.1:*") as running:
        yield running


class DirectBeside:
    """Direct scraping of a pilot's pods in a thread beside the operator: windows closed at any end."""

    def __init__(self, cluster: Cluster, namespace: str, analysis: Analysis) -> None:
        pods = cluster.get_json("pods", "-n", namespace, "-l", PILOT_LABEL)["items"]

        def ready(selector: tuple[str, str]) -> list[tuple[str, str]]:
            key, value = selector
            return [
                (p["metadata"]["name"], p["status"]["podIP"])
                for p in pods
                if p["metadata"]["labels"].get(key) == value and p["status"].get("podIP")
            ]

        self.arms = {arm: ready((ARM_LABEL, arm.value)) for arm in (Arm.BASELINE, Arm.SPECULATIVE, Arm.CONTROL)}
        self.routers = ready((COMPONENT_LABEL, ROUTER_COMPONENT))
        self.namespace, self.analysis = namespace, analysis
        self.measurements = Measurements()  # the last collection's, replaced whole by the next
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self.thread.start()

    async def _run(self) -> None:
        async with scrape_session(addresses=allowing_loopback()) as session:
            collector = Collector.over_http(session)
            while not self.stopping.is_set():
                self.measurements = await collector.collect(
                    arms=self.arms,
                    routers=self.routers,
                    analysis=self.analysis,
                    pilot=(self.namespace, "demo"),
                    now=datetime.now(UTC),
                )
                await asyncio.sleep(1)  # a collection every second, as the operator's cadence

    def acceptance_length(self, end: datetime) -> float | None:
        window = self.measurements.window("chat", analysis=self.analysis, end=end, compared=Arm.CONTROL)
        assert window.speculative_engine.inconclusive is None, window.speculative_engine.inconclusive
        return window.speculative_engine.acceptance_length

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=15)


def run(
    cluster: Cluster, operator: Operator, namespace: str, doc: dict[str, Any], *, beside: bool = False
) -> tuple[dict[str, dict[str, Any]], dict[str, Any], float | None]:
    """Apply the pilot, drive the demo's load until chat is adopted and code flipped back; the final
    scopes, the status, and (with `beside`) chat's last acceptance length as direct scraping measures it."""
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(doc))
    wait_ready(cluster, operator, namespace)
    direct = (
        DirectBeside(cluster, namespace, Analysis.from_wire(judged_pilot()["spec"]["analysis"])) if beside else None
    )
    load = start_load(cluster, router_ip(cluster, namespace), seconds=150)
    try:

        def settled() -> dict[str, dict[str, Any]] | None:
            now = scopes(cluster, namespace)
            chat, code = now.get("chat", {}), now.get("code", {})
            return now if chat.get("state") == "Speculative" and code.get("state") == "RolledBack" else None

        try:
            final = wait_until(f"chat adopted and code flipped back in {namespace}", settled, timeout=150, every=1)
        except AssertionError as error:
            raise AssertionError(f"{error}: {scopes(cluster, namespace)}\n{operator.tail(80)}") from None
        measured = None
        if direct is not None:  # chat is still judged once speculative: its next window, measured both ways
            before = final["chat"]["lastWindow"]["end"]

            def next_window() -> dict[str, dict[str, Any]] | None:
                now = scopes(cluster, namespace)
                return now if now["chat"]["lastWindow"]["end"] != before else None

            final = wait_until("chat's next window", next_window, timeout=30)
            measured = direct.acceptance_length(datetime.fromisoformat(final["chat"]["lastWindow"]["end"]))
    finally:
        load.terminate()
        load.wait(timeout=30)
        if direct is not None:
            direct.stop()
    return final, pilot(cluster, namespace)["status"], measured


def scenario() -> dict[str, Any]:
    """The judging scenario with a loose inter-token-latency limit: this profile's ratio sits near the
    default 2x (a point comparison of two arm-wide histogram quantiles), so two separate runs would
    land on either side of it by chance, as two direct runs do."""
    doc = judged_pilot()
    doc["spec"]["analysis"]["thresholds"]["interTokenLatency"] = {"quantile": 0.99, "maxRatio": 10.0}
    return doc


# Two whole judged runs one after the other (about 170 s): in `make test`, the Prometheus source is held to direct
# scraping by tests/component/metrics/test_prometheus_source.py and flips a scope below.
@pytest.mark.long
def test_prometheus_source_gives_direct_scrapings_outcomes(
    cluster: Cluster, operator: Operator, prometheus: Prometheus
) -> None:
    outcomes = {}
    with fresh_namespace(cluster, wait_gone=True) as namespace:
        outcomes["direct"] = run(cluster, operator, namespace, scenario())
    doc = scenario()
    doc["spec"]["analysis"]["metricsSource"] = {"prometheus": {"url": prometheus.url, "timeout": "5s"}}
    with fresh_namespace(cluster, wait_gone=True) as namespace:
        outcomes["prometheus"] = run(cluster, operator, namespace, doc, beside=True)
        jobs = {t["labels"]["job"] for t in prometheus.healthy_targets() if t["labels"]["namespace"] == namespace}
        assert jobs == {"vllm", "router"}, prometheus.api("/api/v1/targets")

    def outcome(final: dict[str, dict[str, Any]], status: dict[str, Any]) -> dict[str, Any]:
        records = [(r["scope"], r["reason"], r["metric"]) for r in status["fallbacks"]]
        per_scope = {
            n: (sc["state"], sc["stage"], sc["weight"], sc["lastWindow"]["verdict"]) for n, sc in final.items()
        }
        held = final["batch"]["lastWindow"]["reason"]
        return {"scopes": per_scope, "fallbacks": records, "batch held": "fewer than minSamples" in held}

    direct, prom = (outcome(final, status) for final, status, _ in outcomes.values())
    print(f"\ndirect:     {direct}\nprometheus: {prom}")
    assert prom == direct
    assert direct["scopes"]["chat"][:3] == ("Speculative", 1, 50) and direct["scopes"]["code"][2] == 0
    assert direct["fallbacks"] == [("code", "ThresholdExceeded", "timePerCommittedTokenRatio")]
    # on the Prometheus run, chat's last window: the engines' acceptance length the operator recorded
    # from Prometheus against direct scraping of the same pods over the same window
    final, _, measured = outcomes["prometheus"]
    recorded = final["chat"]["lastWindow"]["acceptanceLength"]
    print(f"chat acceptance length: from Prometheus {recorded:.4f}, direct {measured:.4f}")
    assert measured is not None and abs(recorded - measured) / measured <= 0.05


def test_kv_pressure_seen_through_prometheus_flips_the_scope(
    cluster: Cluster, operator: Operator, prometheus: Prometheus
) -> None:
    """A hard limit only the engines can show: KV-cache pressure injected into the speculative pod flips
    chat back with the same fallback record as direct scraping gives (test_operator_faults)."""
    case = CASES["kv-pressure"]
    doc = fault_pilot(probes=False)
    doc["spec"]["analysis"]["metricsSource"] = {"prometheus": {"url": prometheus.url}}
    with fresh_namespace(cluster, wait_gone=True) as namespace:
        cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(doc))
        wait_ready(cluster, operator, namespace)
        load = start_load(cluster, router_ip(cluster, namespace), seconds=120)
        try:
            wait_for_a_pass(cluster, operator, namespace)
            inject(cluster, namespace, case.fault)
            try:
                wait_until(
                    "chat flipped back", lambda: chat(cluster, namespace).get("state") == "RolledBack", timeout=60
                )
            except AssertionError as error:
                raise AssertionError(f"{error}: {chat(cluster, namespace)}\n{operator.tail(40)}") from None
        finally:
            load.terminate()
            load.wait(timeout=30)
        (record,) = pilot(cluster, namespace)["status"]["fallbacks"]
    assert record["scope"] == "chat" and record["reason"] == case.reason and record["metric"] in case.metrics, record
    assert record["observed"] > record["threshold"] == 0.95
