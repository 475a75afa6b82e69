"""Two workers for `make test` (pytest-xdist, `--dist loadgroup`): the cluster tier runs in one, in order,
on the one local control plane it owns; the component tier in the other, in its own group, so that no two
of its real servers (Prometheus, the mock, the router) start at once beside the cluster's load; the unit
tier fills in where a worker is free. The cluster tier's first tests are its quiet ones (API validation,
the chart, the plugin), which load the machine little while the component tier still runs."""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
# The cluster tests that neither load the mock engines nor measure time run first.
QUIET = ("api", "test_local_cluster.py", "test_pod_template_admission.py", "test_chart", "test_plugin.py")


def _tier(item: pytest.Item) -> tuple[str, ...]:
    try:
        return item.path.resolve().relative_to(TESTS).parts
    except ValueError:
        return ()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def quiet_first(item: pytest.Item) -> int:
        parts = _tier(item)
        return 0 if parts[:1] == ("cluster",) and any(p.startswith(QUIET) for p in parts[1:2]) else 1

    items.sort(key=quiet_first)  # stable: the rest keep their order
    for item in items:
        parts = _tier(item)
        if parts[:1] in (("cluster",), ("component",)):
            item.add_marker(pytest.mark.xdist_group(parts[0]))
