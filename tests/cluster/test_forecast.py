"""A pilot with a forecast on the local cluster: each scope's forecast crossover in status and in the
report once its windows measured the acceptance per position, and a calibration ConfigMap that is not
there yet named in status and in one Event, then fitted once `kubectl specpilot calibrate` would have
written it (the measurements of the 8B target and the 1B draft, as the plugin writes them)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specpilot.testing.waiting import wait_until
from tests.cluster.local import ROOT, Cluster
from tests.cluster.operator_process import Operator, events, pilot, running_operator, start_load, wait_ready
from tests.cluster.pilots import judged_pilot, router_ip, scopes

pytestmark = pytest.mark.cluster

MEASURED = ROOT / "operator/specpilot/mockvllm/profiles/h200-stepcost.json"


@pytest.fixture(scope="module")
def operator(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    with running_operator(cluster, tmp_path_factory.mktemp("forecast") / "operator.log") as running:
        yield running


def forecast_pilot(**forecast: str) -> dict[str, Any]:
    doc = judged_pilot()
    doc["spec"]["analysis"]["forecast"] = forecast
    return doc


def chat_forecast(cluster: Cluster, operator: Operator, namespace: str, timeout: float) -> dict[str, Any]:
    """chat's forecast once it is in status, with load on the router meanwhile."""
    load = start_load(cluster, router_ip(cluster, namespace), seconds=int(timeout))
    try:
        found: dict[str, Any] = wait_until(
            "chat's forecast in status",
            lambda: scopes(cluster, namespace).get("chat", {}).get("forecast"),
            timeout=timeout,
            every=1,
        )
    except AssertionError as error:
        raise AssertionError(f"{error}: {scopes(cluster, namespace)}\n{operator.tail(60)}") from None
    finally:
        load.terminate()
        load.wait(timeout=30)
    return found


@pytest.mark.long
def test_each_scopes_forecast_is_in_status_and_beside_its_bands_in_the_report(
    cluster: Cluster, operator: Operator, namespace: str, tmp_path: Path
) -> None:
    cluster.kubectl(
        "apply", "-n", namespace, "-f", "-", input=json.dumps(forecast_pilot(profile="h200-llama-3.1-8b-eagle"))
    )
    wait_ready(cluster, operator, namespace)
    found = chat_forecast(cluster, operator, namespace, timeout=120)
    assert found["profile"] == "h200-llama-3.1-8b-eagle" and found["windows"] >= 3, found
    assert found["reach"] > 0 and found["maxBatch"] == 256 and found["committed"] > 1, found
    assert "forecast from h200-llama-3.1-8b-eagle" in found["message"]
    argv = [sys.executable, "-m", "specpilot.cli", "report", "demo", "-n", namespace, "-o", str(tmp_path)]
    subprocess.run(argv, check=True, capture_output=True, text=True, env=cluster.env(), timeout=120)
    report = json.loads((tmp_path / "report.json").read_text())
    chat = next(scope for scope in report["scopes"] if scope["name"] == "chat")
    assert chat["forecast"]["profile"] == "h200-llama-3.1-8b-eagle"
    assert "Forecast from h200-llama-3.1-8b-eagle" in (tmp_path / "report.md").read_text()


@pytest.mark.long
def test_a_missing_calibration_is_named_once_and_fitted_once_written(
    cluster: Cluster, operator: Operator, namespace: str, tmp_path: Path
) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(forecast_pilot(configMap="calibration")))
    wait_ready(cluster, operator, namespace)
    problem = wait_until(
        "the missing ConfigMap named in status",
        lambda: pilot(cluster, namespace).get("status", {}).get("forecastProblem"),
        timeout=30,
        every=1,
    )
    assert "ConfigMap calibration not found" in problem and "kubectl specpilot calibrate calibration" in problem
    data = json.loads(MEASURED.read_text())
    pair = {"llama-3.1-8b", "llama-3.2-1b"}
    rows = [row for row in data["rows"] if row["model"] in pair]
    measured = tmp_path / "stepcost.json"
    measured.write_text(json.dumps({**data, "params": {m: data["params"][m] for m in pair}, "rows": rows}))
    cluster.kubectl("create", "configmap", "calibration", "-n", namespace, f"--from-file=stepcost.json={measured}")
    found = chat_forecast(cluster, operator, namespace, timeout=120)
    assert found["profile"] == "configmap/calibration"
    assert "forecastProblem" not in pilot(cluster, namespace)["status"]
    reasons = [event["reason"] for event in events(cluster, namespace)]
    assert reasons.count("ForecastProfileUnavailable") == 1, reasons
