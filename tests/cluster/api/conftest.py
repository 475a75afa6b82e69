"""Cluster tier for the SpeculationPilot API: the CRD applied from crds/ once, a namespace for dry runs."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.cluster.local import Cluster

from specpilot.api import GROUP, PLURAL
from specpilot.testing.waiting import wait_until

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def api(cluster: Cluster) -> Cluster:
    """The cluster with `kubectl apply -f crds/` done and the SpeculationPilot CRD established."""
    cluster.kubectl("apply", "-f", str(ROOT / "crds"))
    # Right after an apply that creates or changes it, a CRD may briefly show no conditions at all, which
    # `kubectl wait` reports as an error rather than waiting on: ask again until it is Established.
    wait_until(
        "the SpeculationPilot CRD established",
        lambda: (
            cluster.kubectl(
                "wait", "--for=condition=Established", f"crd/{PLURAL}.{GROUP}", "--timeout=10s", check=False
            ).returncode
            == 0
        ),
        timeout=60,
        every=1,
    )
    return cluster


@pytest.fixture(scope="module")
def dry_run_namespace(api: Cluster) -> Iterator[str]:
    """One namespace shared by a module's server-side dry runs (they create nothing in it)."""
    name = f"t-api-{uuid.uuid4().hex[:8]}"
    api.kubectl("create", "namespace", name)
    yield name
    api.kubectl("delete", "namespace", name, "--wait=false", check=False)
