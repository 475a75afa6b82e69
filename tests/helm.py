"""The chart as helm renders it, for the component and cluster tiers, and the tools that read it.

helm is built from the Go module proxy and cached by `e2e/tools.sh`, kubectl (which has kustomize
built in) by `e2e/local/build.sh`; the first call builds what is absent.
"""

from __future__ import annotations

import functools
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "specpilot"
TOOLS = ROOT / "e2e" / "tools.sh"
RELEASE = "specpilot"
NAMESPACE = "specpilot-system"


@functools.cache
def tool(name: str) -> str:
    """Path of a delivery tool (helm, actionlint), built when absent."""
    out = subprocess.run([str(TOOLS), name], capture_output=True, text=True, check=False, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"e2e/tools.sh {name} failed:\n{out.stderr}")
    return out.stdout.strip().splitlines()[-1]


@functools.cache
def kubectl() -> str:
    """The cluster tier's own kubectl."""
    out = subprocess.run([str(ROOT / "e2e/local/build.sh")], capture_output=True, text=True, check=True, timeout=1800)
    return str(Path(out.stdout.strip().splitlines()[-1]) / "kubectl")


def kustomize(directory: Path) -> list[dict[str, Any]]:
    """`kubectl kustomize DIRECTORY`, parsed."""
    out = subprocess.run(
        [kubectl(), "kustomize", str(directory)], capture_output=True, text=True, check=True, timeout=60
    )
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def helm(*args: str, env: Mapping[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    out = subprocess.run([tool("helm"), *args], capture_output=True, text=True, check=False, env=env, timeout=300)
    if check and out.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return out


def set_args(values: Mapping[str, str]) -> list[str]:
    return [arg for key, value in values.items() for arg in ("--set", f"{key}={value}")]


def template_text(
    values: Mapping[str, str] | None = None,
    *,
    crds: bool = False,
    namespace: str = NAMESPACE,
    release: str = RELEASE,
) -> str:
    """`helm template` of the chart with `--set` values (and its CRDs when `crds`)."""
    args = ["template", release, str(CHART), "--namespace", namespace, *set_args(values or {})]
    return helm(*args, *(["--include-crds"] if crds else [])).stdout


def template(values: Mapping[str, str] | None = None, **kwargs: Any) -> list[dict[str, Any]]:
    """The rendered objects, in order."""
    return [doc for doc in yaml.safe_load_all(template_text(values, **kwargs)) if doc]


def by_kind(objects: Sequence[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [obj for obj in objects if obj["kind"] == kind]
