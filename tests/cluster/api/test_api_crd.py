"""The installed CRD: documentation for `kubectl explain`, status subresource, printer columns, names."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from tests.cluster.local import Cluster

from specpilot.api import SpeculationPilot, SpeculationPilotStatus
from specpilot.api.reasons import FallbackReason, MetricName
from specpilot.api.status import (
    Condition,
    ConditionStatus,
    ConditionType,
    Decision,
    DecisionOutcome,
    FallbackRecord,
    Phase,
    Window,
)
from specpilot.testing.waiting import wait_until

pytestmark = pytest.mark.cluster

MINIMAL = Path(__file__).resolve().parents[3] / "manifests" / "examples" / "minimal.yaml"


def _explain(api: Cluster, field: str) -> str:
    """`kubectl explain`, retried while the API server publishes the new schema."""

    def explained() -> str | None:
        result = api.kubectl("explain", field, check=False)
        return " ".join(result.stdout.split()) if result.returncode == 0 else None

    return str(wait_until(f"kubectl explain {field}", explained, timeout=30, every=1))


def test_explain_documents_the_analysis(api: Cluster) -> None:
    text = _explain(api, "speculationpilot.spec.analysis")
    assert "How windows are judged." in text
    assert "interval <string> How often each scope's window is closed and judged. Defaults to 1m." in text
    for field in ("window", "minSamples", "failureLimit", "confidence", "thresholds"):
        assert f"{field} <" in text


def test_explain_reaches_nested_fields(api: Cluster) -> None:
    text = _explain(api, "sp.spec.analysis.thresholds.kvCacheUsage.sustainedFor")
    assert "How long usage above max is tolerated; at most analysis.window. Defaults to 2m." in text


def _status(now: datetime) -> SpeculationPilotStatus:
    window = Window(start=now - timedelta(minutes=15), end=now - timedelta(minutes=10))
    return SpeculationPilotStatus(
        observed_generation=1,
        phase=Phase.HEALTHY,
        conditions=[
            Condition(
                type=ConditionType.READY,
                status=ConditionStatus.TRUE,
                reason="ScopesSettled",
                last_transition_time=now,
                observed_generation=1,
            ),
        ],
        speculative_scopes="1/1",
        fallbacks=[
            FallbackRecord(
                scope="chat",
                at=now - timedelta(hours=3),
                reason=FallbackReason.THRESHOLD_EXCEEDED,
                metric=MetricName.TTFT_RATIO,
                observed=1.4,
                threshold=1.2,
                window=window,
            ),
            FallbackRecord(
                scope="chat",
                at=now - timedelta(minutes=10),
                reason=FallbackReason.KV_CACHE_PRESSURE,
                metric=MetricName.KV_CACHE_USAGE,
                observed=0.99,
                threshold=0.95,
                window=window,
            ),
        ],
        decision=Decision(outcome=DecisionOutcome.ADOPT_WITHIN_ENVELOPE, decided_at=now, reasons=["faster"]),
    )


def test_status_subresource_and_printer_columns(api: Cluster, namespace: str) -> None:
    pilot = SpeculationPilot.from_wire(yaml.safe_load(MINIMAL.read_text()))
    name = pilot.metadata["name"]
    api.kubectl("apply", "-n", namespace, "-f", str(MINIMAL))
    status = _status(datetime.now(UTC).replace(microsecond=0))
    api.kubectl(
        "patch",
        "speculationpilot",
        name,
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": status.to_wire()}),
    )

    stored = json.loads(api.kubectl("get", "sp", name, "-n", namespace, "-o", "json").stdout)
    assert SpeculationPilotStatus.from_wire(stored["status"]) == status, "the schema pruned status fields"
    header, row = api.kubectl("get", "spilot", name, "-n", namespace, "-o", "wide").stdout.splitlines()
    assert header.split() == ["NAME", "PHASE", "SPECULATIVE", "LAST-FALLBACK", "DECISION", "MODEL", "AGE"]
    assert row.split()[:6] == [name, "Healthy", "1/1", "10m", "AdoptWithinEnvelope", "Qwen/Qwen3-8B"]
    assert name in api.kubectl("get", "specpilot", "-n", namespace).stdout
    api.kubectl("wait", "--for=condition=Ready", f"sp/{name}", "-n", namespace, "--timeout=10s")


def test_spec_updates_leave_status_alone(api: Cluster, namespace: str) -> None:
    """With the status subresource, a status in an applied manifest is dropped."""
    manifest = yaml.safe_load(MINIMAL.read_text())
    manifest["status"] = {"phase": "Healthy"}
    api.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(manifest))
    stored = json.loads(api.kubectl("get", "sp", manifest["metadata"]["name"], "-n", namespace, "-o", "json").stdout)
    assert "status" not in stored
