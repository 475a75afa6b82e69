"""The kustomize base is the chart's default render: same objects, same content, less Helm's labels;
an overlay's image reaches the routers too."""

from __future__ import annotations

from typing import Any

from specpilot.controller.main import OPERATOR_CONTAINER
from specpilot.testing.helm import ROOT, kustomize, template

HELM_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by")


def keyed(objects: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in objects}


def test_kustomize_base_equals_the_charts_default_render() -> None:
    base = keyed(kustomize(ROOT / "manifests/base"))
    chart = template(crds=True)
    for obj in chart:
        for key in HELM_LABELS:
            obj["metadata"].get("labels", {}).pop(key, None)
    chart_keyed = keyed(chart)
    assert sorted(base) == sorted(chart_keyed), "run `make manifests` to regenerate manifests/base"
    for key, obj in chart_keyed.items():
        assert base[key] == obj, f"{key} differs from the chart's render; run `make manifests`"


def test_the_registry_overlay_moves_the_routers_image_with_the_operators() -> None:
    # The routers run the image the operator's own pod runs (it reads its pod, POD_NAMESPACE and POD_ID):
    # no variable in the base names the image again, so `images:` alone moves both.
    (deployment,) = [o for o in kustomize(ROOT / "manifests/overlays/registry") if o["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.example.com/specpilot/specpilot:0.1.0"
    env = {e["name"]: e for e in container["env"]}
    assert "SPECPILOT_ROUTER_IMAGE" not in env
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert env["POD_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert container["name"] == OPERATOR_CONTAINER
