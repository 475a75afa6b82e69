"""`make test` runs the cluster tier in one pytest and the unit and component tiers in another beside it
(Makefile). The cluster tier's first tests are those that judge no speed (API validation, the chart, the
plugin, the operator's lifecycle, policy, peering and takeover): about seven minutes, while the other
tiers load the machine; a climb judged beside them lost its win at its first stage."""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
# The cluster tests that judge no arm's speed and bound no latency tightly.
QUIET = (
    *("api", "test_local_cluster.py", "test_pod_template_admission.py", "test_chart", "test_plugin.py"),
    *("test_operator.py", "test_operator_policy.py", "test_operator_manual.py", "test_operator_peering.py"),
    *("test_takeover.py", "test_mockvllm_pod.py"),
)


def _quiet(item: pytest.Item) -> bool:
    try:
        parts = item.path.resolve().relative_to(TESTS).parts
    except ValueError:
        return False
    return parts[:1] == ("cluster",) and parts[1].startswith(QUIET)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: not _quiet(item))  # stable: the rest keep their order
