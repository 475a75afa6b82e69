"""The chart installed as a Helm release on the local cluster: the release, the environment helm
runs in, and what the release's operator account may do."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tests.cluster.local import Cluster

OPERATOR_SELECTOR = "app.kubernetes.io/name=specpilot,app.kubernetes.io/component=operator"


@dataclass(frozen=True)
class Release:
    name: str
    namespace: str
    account: str
    values: dict[str, str]

    def pods(self, cluster: Cluster) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = cluster.get_json("pods", "-n", self.namespace, "-l", OPERATOR_SELECTOR)["items"]
        return [p for p in items if not p["metadata"].get("deletionTimestamp")]

    def log(self, cluster: Cluster, pod: str) -> str:
        logs = sorted(cluster.kubeconfig.parent.glob(f"node/pods/{self.namespace}_{pod}_*/operator.log"))
        return "\n".join(p.read_text(errors="replace") for p in logs)


# The cluster tier applies the SpeculationPilot CRD itself (`kubectl apply`), and a CRD has one owner: its
# releases leave it out, the way a second release in any cluster does.
NO_CRD = {"crds.install": "false"}


def helm_env(cluster: Cluster) -> dict[str, str]:
    return {**cluster.env(), "HELM_CACHE_HOME": str(cluster.kubeconfig.parent / "helm")}


def can_i(cluster: Cluster, release: Release, *args: str) -> str:
    account = f"system:serviceaccount:{release.namespace}:{release.account}"
    out = cluster.kubectl("auth", "can-i", *args, f"--as={account}", check=False)
    return out.stdout.strip()
