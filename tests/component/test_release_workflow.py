"""The release workflow publishes, on a tag of the chart's version, the image the chart runs by default
(and so the routers'), and the chart; its version check runs here as the forge would run it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from specpilot.testing.helm import CHART, by_kind, template

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "release.yaml"


def workflow() -> dict[Any, Any]:
    loaded: dict[Any, Any] = yaml.safe_load(WORKFLOW.read_text())
    return loaded


def step(job: str, name_or_action: str) -> dict[str, Any]:
    found: dict[str, Any]
    (found,) = [
        s
        for s in workflow()["jobs"][job]["steps"]
        if s.get("name") == name_or_action or str(s.get("uses", "")).startswith(name_or_action)
    ]
    return found


def test_a_version_tag_pushes_the_image_the_chart_runs_by_default() -> None:
    triggers = workflow()[True]  # YAML 1.1 reads the key `on` as true
    assert triggers == {"push": {"tags": ["v*"]}}
    assert workflow()["permissions"] == {"contents": "read"}  # packages: write only where a job pushes
    assert workflow()["jobs"]["image"]["permissions"]["packages"] == "write"
    build = step("image", "docker/build-push-action@")["with"]
    assert (build["file"], build["push"]) == ("operator/Dockerfile", True)
    assert build["tags"] == "${{ steps.version.outputs.image }}:${{ steps.version.outputs.version }}"
    # The repository the chart names as its home is the one whose packages the image lands in.
    home = yaml.safe_load((CHART / "Chart.yaml").read_text())["home"]
    (deployment,) = by_kind(template(), "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"ghcr.io/{home.removeprefix('https://github.com/').lower()}:0.1.0"


def run_version_check(tmp_path: Path, tag: str) -> subprocess.CompletedProcess[str]:
    output = tmp_path / "output"
    output.write_text("")
    env = {
        **os.environ,
        "GITHUB_REF_NAME": tag,
        "GITHUB_OUTPUT": str(output),
        "GITHUB_REPOSITORY": "SpecPilot/SpecPilot",
    }
    script = step("image", "The tag names the chart's version and appVersion")["run"]
    return subprocess.run(
        ["bash", "-e", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=30
    )


def test_the_tag_must_name_the_charts_version(tmp_path: Path) -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["version"] == chart["appVersion"]  # one version for both, which the tag names
    ok = run_version_check(tmp_path, f"v{chart['appVersion']}")
    assert ok.returncode == 0, ok.stderr
    outputs = dict(line.split("=", 1) for line in (tmp_path / "output").read_text().splitlines())
    assert outputs == {"version": chart["appVersion"], "image": "ghcr.io/specpilot/specpilot"}


@pytest.mark.parametrize("tag", ["v9.9.9", "v0.1", "0.1.0-rc1"])
def test_a_tag_of_another_version_publishes_nothing(tmp_path: Path, tag: str) -> None:
    refused = run_version_check(tmp_path, tag)
    assert refused.returncode == 1 and "::error::tag" in refused.stdout
    assert (tmp_path / "output").read_text() == ""


def test_the_chart_job_pushes_the_chart_after_the_image() -> None:
    chart = workflow()["jobs"]["chart"]
    assert chart["needs"] == "image" and chart["permissions"]["packages"] == "write"
    script = step("chart", "Package the chart and push it to ghcr.io")["run"]
    assert "helm package charts/specpilot" in script and "oci://ghcr.io/${GITHUB_REPOSITORY_OWNER,,}/charts" in script
