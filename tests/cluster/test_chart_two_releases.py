"""Two releases of the chart in one cluster, with their defaults but the namespaces they serve: both
install, nothing cluster-scoped collides, and each operator works on its own instead of standing by
for the other (each peering object lists its own release's pod, and only it)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest

from specpilot.testing.helm import CHART, helm, set_args
from specpilot.testing.waiting import wait_until
from tests.cluster.local import Cluster, fresh_namespace
from tests.cluster.operator_process import apply_crd
from tests.cluster.releases import NO_CRD, Release, can_i, helm_env

pytestmark = pytest.mark.cluster


@pytest.fixture
def two_teams(cluster: Cluster) -> Iterator[tuple[str, str]]:
    with fresh_namespace(cluster) as first, fresh_namespace(cluster) as second:
        yield first, second


def peers(cluster: Cluster, release: Release, served: str) -> dict[str, Any]:
    status: dict[str, Any] = cluster.get_json("kopfpeering", release.name + "-specpilot", "-n", served).get("status")
    return status or {}


def test_two_releases_install_side_by_side_and_each_works(cluster: Cluster, two_teams: tuple[str, str]) -> None:
    apply_crd(cluster)  # owned by the cluster tier here: both releases leave it out, as a second release must
    suffix = uuid.uuid4().hex[:6]
    releases = []
    try:
        for name, served in zip((f"blue-{suffix}", f"green-{suffix}"), two_teams, strict=True):
            values = {"image.tag": "dev", "watchNamespaces": f"{{{served}}}", **NO_CRD}
            install = ("install", name, str(CHART), "--namespace", name, "--create-namespace", "--wait")
            out = helm(*install, "--timeout", "120s", *set_args(values), env=helm_env(cluster), check=False)
            releases.append(Release(name=name, namespace=name, account=f"{name}-specpilot", values=values))
            assert out.returncode == 0, f"{name}: {out.stdout}\n{out.stderr}\n{cluster.pods_report(name)}"
        for release, served, other in zip(releases, two_teams, reversed(two_teams), strict=True):
            (pod,) = release.pods(cluster)
            mine = pod["metadata"]["name"]
            # its peering object is its own, named after the release, and it works there alone
            status = wait_until(f"{release.name}'s operator in its peering", partial(peers, cluster, release, served))
            assert list(status) == [mine], status
            assert "Pausing operations" not in release.log(cluster, mine)  # never stood by for the other
            assert can_i(cluster, release, "create", "deployments.apps", "-n", served) == "yes"
            assert can_i(cluster, release, "create", "deployments.apps", "-n", other) == "no"
    finally:
        for release in releases:
            helm("uninstall", release.name, "--namespace", release.name, "--wait", env=helm_env(cluster), check=False)
            cluster.kubectl("delete", "namespace", release.name, "--wait=false", check=False)
