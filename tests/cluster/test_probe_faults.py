"""Faults that break what an application relies on flip the scope whose probe kind sees them, naming
the kind; natural greedy variation at the same rate on both arms flips nothing.

One pilot, five scopes, each probed for one kind: `stops` (a stop case), `tools` (a toolCall case),
`structured` (a JSON-schema case), `cancel` (a stream dropped after a few chunks) and `greedy` (the
pilot-wide greedy prompts). Every mock engine varies its greedy text by itself
(`model.greedy_divergence`: 3% of answers at batch size one, more in a larger batch), so greedy
answers part now and then on either arm. Once every scope has passed a window on loadgen's traffic,
the load stops and four faults go into the speculative pod at once: stop strings ignored, tool-call
arguments that are not JSON, structured answers that break their schema, and dropped streams that
keep their slot. Each of the four scopes flips back with one QualityRegression record that names its
probe kind; `greedy` keeps its weight, with no record, after ROUNDS probe rounds (counted on the
control pod, which the probes compare the speculative pod with)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from specpilot.api.reasons import FallbackReason, MetricName
from specpilot.testing.waiting import wait_until
from specpilot.wire.names import ENGINE_PORT
from tests.cluster.faults import SLOW_STAGES, fault_pilot, inject, speculative_ip
from tests.cluster.local import Cluster
from tests.cluster.operator_process import Operator, pilot, running_operator, wait_ready
from tests.cluster.pilots import PROFILE, TIME_SCALE, router_ip, scopes, use_profile

pytestmark = pytest.mark.cluster

ROUNDS = 6  # probe rounds the greedy scope is judged on without flipping
TOOL_FLAGS = ["--enable-auto-tool-choice", "--tool-call-parser=hermes"]  # toolChoice auto, as vLLM needs it
GREEDY_PROMPTS = ["Count from one to ten.", "List the fields of an invoice."]
RUN_TESTS = {
    "name": "run_tests",
    "parameters": {
        "type": "object",
        "properties": {"package": {"type": "string"}, "verbose": {"type": "boolean"}},
        "required": ["package"],
    },
}
INVOICE = {
    "type": "object",
    "properties": {
        "number": {"type": "string"},
        "total": {"type": "number"},
        "currency": {"type": "string", "enum": ["EUR", "USD", "GBP"]},
    },
    "required": ["number", "total", "currency"],
}


@dataclass(frozen=True)
class Faulted:
    """A scope's probe case, the mock fault that breaks it, and the metric its record names."""

    case: dict[str, Any]
    fault: str
    metric: MetricName


FAULTED = {
    # The mock's text is words from a small vocabulary: a stop on a letter most of them hold ends every
    # answer within a few words, so an answer that runs past its stop shows it, whatever the greedy
    # variation, and both arms stop on the same string.
    "stops": Faulted(
        {"kind": "stop", "prompt": "Write a Python function that adds two numbers.", "stop": ["e"], "maxTokens": 32},
        "stop_overrun",
        MetricName.PROBE_STOP,
    ),
    "tools": Faulted(
        {
            "kind": "toolCall",
            "prompt": "Run the tests with run_tests for the package parser, please.",
            "tools": [RUN_TESTS],
            "maxTokens": 128,
        },
        "tool_json",
        MetricName.PROBE_TOOL_CALL,
    ),
    "structured": Faulted(
        {
            "kind": "structured",
            "prompt": "Extract the invoice's number, total and currency: Invoice 2291, EUR 120.50.",
            "jsonSchema": INVOICE,
            "maxTokens": 128,
        },
        "structured_invalid",
        MetricName.PROBE_STRUCTURED,
    ),
    "cancel": Faulted(
        # an idle pod gives a dropped stream's slot back within milliseconds; a leaking one waits out
        # its settle, so a short one keeps the rounds short
        {
            "kind": "cancel",
            "prompt": "Explain this repository's build in detail.",
            "maxTokens": 1000,
            "afterChunks": 3,
            "settle": "2s",
        },
        "cancel_leak",
        MetricName.PROBE_CANCEL,
    ),
}
GREEDY = "greedy"
SCOPES = [*FAULTED, GREEDY]


def probe_pilot() -> dict[str, Any]:
    """The fault pilot with a scope per probe kind, and natural greedy variation on every engine."""
    doc = fault_pilot()
    spec = doc["spec"]
    spec["engine"]["extraArgs"] += TOOL_FLAGS
    # Every scope drafts well, so speed passes its windows and only a probe can flip it.
    profile = {**PROFILE, "acceptance": {"default": 0.9}, "model": {"greedy_divergence": 0.03}}
    use_profile(spec, profile, time_scale=TIME_SCALE)
    spec["quality"] = {"probes": {"prompts": GREEDY_PROMPTS, "maxTokens": 32, "interval": "10s"}}
    spec["scopes"] = [
        *({"name": name, "stages": SLOW_STAGES, "probes": {"cases": [item.case]}} for name, item in FAULTED.items()),
        {"name": GREEDY, "stages": SLOW_STAGES},
    ]
    return doc


def start_scope_load(cluster: Cluster, router: str, *, seconds: int) -> subprocess.Popen[bytes]:
    """loadgen sending every scope's requests through the router (15 requests/s, Poisson): a dozen
    or more per arm in each scope's window, with short answers."""
    lengths = {"input_tokens": {"dist": "uniform", "min": 60, "max": 200}}
    lengths["output_tokens"] = {"dist": "uniform", "min": 8, "max": 24}
    mix = {"scopes": [{"name": name, "weight": 1, **lengths} for name in SCOPES]}
    argv = [sys.executable, "-m", "specpilot.cli", "loadgen", "--url", f"http://{router}:8080"]
    argv += ["--mix", json.dumps(mix), "--arrivals", "poisson", "--rate", "15"]
    argv += ["--duration", str(seconds), "--timeout", "30", "--no-progress"]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=cluster.env())


def engine_sample(ip: str, name: str, **labels: str) -> float:
    """The sum of an engine pod's samples `name` that carry `labels`, read from its /metrics."""
    with urllib.request.urlopen(f"http://{ip}:{ENGINE_PORT}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and all(sample.labels.get(key) == value for key, value in labels.items())
    )


def probe_rounds(cluster: Cluster, namespace: str) -> int:
    """Probe rounds the control pods have answered: the tool parser's unstreamed runs, which only the
    `tools` case makes (once per round and arm; loadgen offers no tools)."""
    pods = cluster.get_json("pods", "-n", namespace, "-l", "specpilot.io/arm=control")["items"]
    return int(
        sum(
            engine_sample(pod["status"]["podIP"], "vllm:tool_call_parser_invocations_total", mode="non_streaming")
            for pod in pods
            if pod["status"].get("podIP") and not pod["metadata"].get("deletionTimestamp")
        )
    )


@pytest.fixture(scope="module")
def operator(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    with running_operator(cluster, tmp_path_factory.mktemp("probe-faults") / "operator.log") as running:
        yield running


def test_probe_faults_flip_their_scopes_and_natural_variation_flips_none(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(probe_pilot()))
    wait_ready(cluster, operator, namespace)
    seen: list[dict[str, dict[str, Any]]] = []

    def now_seen() -> dict[str, dict[str, Any]]:
        seen.append(scopes(cluster, namespace))
        assert seen[-1].get(GREEDY, {}).get("state") != "RolledBack", f"{seen[-1][GREEDY]}\n{operator.tail(40)}"
        return seen[-1]

    passed: set[str] = set()

    def every_scope_passed() -> bool:
        now = now_seen()
        flipped = [name for name in FAULTED if now.get(name, {}).get("state") == "RolledBack"]
        assert not flipped, f"{flipped} flipped before any fault: {now}\n{operator.tail(40)}"
        passed.update(name for name in SCOPES if now.get(name, {}).get("lastWindow", {}).get("verdict") == "Pass")
        return passed == set(SCOPES)

    load = start_scope_load(cluster, router_ip(cluster, namespace), seconds=120)
    try:
        wait_until("a passing window in every scope", every_scope_passed, timeout=90, every=1)
    except AssertionError as error:
        raise AssertionError(f"{error}: passed {sorted(passed)}; {seen[-1:]}\n{operator.tail(40)}") from None
    finally:
        load.terminate()
        load.wait(timeout=30)
    # The load stops first: a cancel case compares the pod's vllm:num_requests_running before and after
    # its dropped stream, and the pilot's own requests on that pod move the gauge as well (enough to
    # hide one kept slot now and then, which is why the check is a rate against the control pod's).
    speculative = speculative_ip(cluster, namespace)
    wait_until(
        "the speculative pod idle",
        lambda: engine_sample(speculative, "vllm:num_requests_running") == 0,
        timeout=30,
        every=0.5,
    )
    assert not pilot(cluster, namespace)["status"].get("fallbacks"), "a scope flipped before any fault"
    injected_at = datetime.now(UTC)
    inject(cluster, namespace, [{"kind": item.fault, "rate": 1.0} for item in FAULTED.values()])
    injected = time.monotonic()
    flipped: dict[str, float] = {}

    def four_flipped() -> bool:
        now = now_seen()
        for name in FAULTED:
            if name not in flipped and now.get(name, {}).get("state") == "RolledBack":
                flipped[name] = time.monotonic() - injected
        return flipped.keys() == FAULTED.keys()

    try:
        # stop, toolCall and structured: a round after the faults (one every 10 s), then a window judged
        # on it. cancel: the rounds it takes for the speculative arm's kept slots to be shown above the
        # control arm's none, at the probes' spent level (about a dozen after half as many clean ones).
        wait_until("the four faulted scopes flipped back", four_flipped, timeout=240, every=0.5)
        wait_until(
            f"{ROUNDS + 1} probe rounds begun", lambda: probe_rounds(cluster, namespace) > ROUNDS, timeout=90, every=1
        )
        # Round ROUNDS + 1 begins once round ROUNDS is kept: a window that ends later is judged on it.
        counted = datetime.now(UTC)

        def judged_since() -> bool:
            end = now_seen()[GREEDY].get("lastWindow", {}).get("end")
            return end is not None and datetime.fromisoformat(end) > counted

        wait_until(f"a window of {GREEDY} judged on {ROUNDS} rounds", judged_since, timeout=30, every=0.5)
    except AssertionError as error:
        raise AssertionError(f"{error}: flipped {flipped}; {seen[-1:]}\n{operator.tail(40)}") from None

    records = pilot(cluster, namespace)["status"]["fallbacks"]
    assert sorted(r["scope"] for r in records) == sorted(FAULTED), f"one record per faulted scope: {records}"
    for record in records:
        item = FAULTED[record["scope"]]
        assert (record["reason"], record["metric"]) == (FallbackReason.QUALITY_REGRESSION, item.metric), record
        assert datetime.fromisoformat(record["at"]) >= injected_at, record
    final = seen[-1]
    assert all(final[name]["weight"] == 0 for name in FAULTED), final
    assert final[GREEDY]["state"] in ("Piloting", "Held") and final[GREEDY]["weight"] == SLOW_STAGES[0]["weight"]
    table = json.loads(cluster.get_json("configmap", "demo-routes", "-n", namespace)["data"]["routes.json"])
    weights = {route["name"]: route["weights"]["speculative"] for route in table["scopes"]}
    assert weights == {**dict.fromkeys(FAULTED, 0), GREEDY: SLOW_STAGES[0]["weight"]}, weights
    for name, seconds in sorted(flipped.items(), key=lambda item: item[1]):
        print(f"{name}: {FAULTED[name].metric} flipped it {seconds:.1f} s after the faults (probe interval 10 s)")
    print(f"{GREEDY}: still {final[GREEDY]['state']} after {probe_rounds(cluster, namespace)} probe rounds begun")
