"""Cluster tier for the SpeculationPilot API: the CRD applied from crds/ once, a namespace for dry runs."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.cluster.conftest import Cluster

from specpilot.api import GROUP, PLURAL

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def api(cluster: Cluster) -> Cluster:
    """The cluster with `kubectl apply -f crds/` done and the SpeculationPilot CRD established."""
    cluster.kubectl("apply", "-f", str(ROOT / "crds"))
    cluster.kubectl("wait", "--for=condition=Established", f"crd/{PLURAL}.{GROUP}", "--timeout=60s")
    return cluster


@pytest.fixture(scope="module")
def dry_run_namespace(api: Cluster) -> Iterator[str]:
    """One namespace shared by a module's server-side dry runs (they create nothing in it)."""
    name = f"t-api-{uuid.uuid4().hex[:8]}"
    api.kubectl("create", "namespace", name)
    yield name
    api.kubectl("delete", "namespace", name, "--wait=false", check=False)
