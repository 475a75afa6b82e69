"""`make test` runs the cluster tier in one pytest and the unit and component tiers in another beside it
(Makefile). The cluster tier's first tests are its quiet ones (API validation, the chart, the plugin):
they load the machine little while the other tiers still run."""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
# The cluster tests that neither load the mock engines nor measure time.
QUIET = ("api", "test_local_cluster.py", "test_pod_template_admission.py", "test_chart", "test_plugin.py")


def _quiet(item: pytest.Item) -> bool:
    try:
        parts = item.path.resolve().relative_to(TESTS).parts
    except ValueError:
        return False
    return parts[:1] == ("cluster",) and parts[1].startswith(QUIET)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: not _quiet(item))  # stable: the rest keep their order
