"""What the router measures per scope and arm agrees with what the load generator saw on the
client side: the same requests, outcomes and tokens, and latencies just below the client's."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.cluster.local import Cluster
from tests.cluster.router_pilot import TIME_SCALE, deploy, scope

pytestmark = pytest.mark.cluster

SPECPILOT = str(Path(sys.executable).with_name("specpilot"))
MIX = {
    "scopes": [
        {"name": "code", "weight": 2, "output_tokens": {"dist": "uniform", "min": 10, "max": 40}, "deadline_s": 8},
        {"name": "chat", "weight": 1, "output_tokens": 12},
    ]
}


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def metric_values(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_samples_and_metrics_agree_with_the_load_generator(cluster: Cluster, namespace: str, tmp_path: Path) -> None:
    # The table's deadline is in wall seconds; the load generator's in the mock's model seconds.
    pilot = deploy(cluster, namespace, scope("code", spec=50, deadline=8 * TIME_SCALE), scope("chat", spec=0))
    result_file = tmp_path / "loadgen.json"
    subprocess.run(
        [SPECPILOT, "loadgen", "--url", pilot.url, "--model", "m", "--rate", "15", "--duration", "20",
         "--time-scale", str(TIME_SCALE), "--mix", json.dumps(MIX), "--seed", "7", "--no-progress",
         "--output", str(result_file)],
        check=True, timeout=120,
    )  # fmt: skip
    client: dict[str, Any] = json.loads(result_file.read_text())
    samples = pilot.samples()
    metrics = metric_values(pilot.metrics())

    assert client["sent"] == len(samples) > 100
    for name in ("code", "chat"):
        seen = client["scopes"][name]
        mine = [s for s in samples if s["scope"] == name]
        outcomes = Counter(s["outcome"] for s in mine)
        assert (seen["requests"], seen["ok"]) == (len(mine), outcomes["ok"])
        assert (seen["timeouts"], seen["rejections"]) == (outcomes["timeout"], outcomes["rejected"])
        assert seen["output_tokens"] == sum(s["outputTokens"] for s in mine)
        arms = {s["arm"] for s in mine}
        assert arms == ({"baseline", "speculative"} if name == "code" else {"baseline"})
        for key, field in (("ttft_s", "ttftSeconds"), ("e2e_s", "e2eSeconds")):
            ours = [s[field] / TIME_SCALE for s in mine if s["outcome"] == "ok"]  # in the mock's model seconds
            # The client's clock also runs over the network hop, the client's parsing and its event loop, and
            # over the router's own accept queue: on two busy cores a stall of tens of milliseconds reaches the
            # tail (70 ms once at p90). Every request's router time is below its client time, so each quantile
            # is too (less 2 ms for the two clocks' rounding).
            for q, label, slack in ((0.5, "p50", 0.05), (0.9, "p90", 0.15)):
                gap = seen[key][label] - quantile(ours, q)
                assert -0.002 / TIME_SCALE <= gap <= slack / TIME_SCALE, (name, key, label, gap)
        if name == "code":
            assert seen["on_time"] == sum(1 for s in mine if s["deadlineMet"])
        for arm in arms:
            per_arm = [s for s in mine if s["arm"] == arm]
            labels = frozenset({("scope", name), ("arm", arm)})
            assert metrics[("specpilot_router_requests_total", labels | {("outcome", "ok")})] == len(per_arm)
            assert metrics[("specpilot_router_output_tokens_total", labels)] == sum(s["outputTokens"] for s in per_arm)
            assert metrics[("specpilot_router_ttft_seconds_count", labels)] == len(per_arm)
            ttft_sum = sum(s["ttftSeconds"] for s in per_arm)
            assert metrics[("specpilot_router_ttft_seconds_sum", labels)] == pytest.approx(ttft_sum, rel=1e-9)
            decode = metrics[("specpilot_router_decode_seconds_sum", labels)]
            assert decode == pytest.approx(sum(s["decodeSeconds"] for s in per_arm if s["tpotSeconds"]), rel=1e-9)
