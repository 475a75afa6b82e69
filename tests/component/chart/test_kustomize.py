"""The kustomize base is the chart's default render: same objects, same content, less Helm's labels."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml
from tests.helm import ROOT, template

HELM_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by")


def kubectl() -> str:
    """The cluster tier's own kubectl (built and cached by e2e/local/build.sh), which has kustomize built in."""
    out = subprocess.run([str(ROOT / "e2e/local/build.sh")], capture_output=True, text=True, check=True, timeout=1800)
    return str(Path(out.stdout.strip().splitlines()[-1]) / "kubectl")


def keyed(objects: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in objects}


def test_kustomize_base_equals_the_charts_default_render() -> None:
    out = subprocess.run(
        [kubectl(), "kustomize", str(ROOT / "manifests/base")], capture_output=True, text=True, check=True, timeout=60
    )
    base = keyed([doc for doc in yaml.safe_load_all(out.stdout) if doc])
    chart = template(crds=True)
    for obj in chart:
        for key in HELM_LABELS:
            obj["metadata"].get("labels", {}).pop(key, None)
    chart_keyed = keyed(chart)
    assert sorted(base) == sorted(chart_keyed), "run `make manifests` to regenerate manifests/base"
    for key, obj in chart_keyed.items():
        assert base[key] == obj, f"{key} differs from the chart's render; run `make manifests`"
