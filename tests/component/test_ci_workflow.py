"""The forge's CI runs what .ci/run runs, on every pull request, with the built tools cached."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_pull_requests_run_ci_run_with_the_tools_cached_and_the_pod_route() -> None:
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yaml").read_text())
    triggers = workflow[True]  # YAML 1.1 reads the key `on` as true
    assert "pull_request" in triggers and triggers["push"]["branches"] == ["main"]
    (job,) = workflow["jobs"].values()
    runs = [step["run"] for step in job["steps"] if "run" in step]
    assert runs[-1] == ".ci/run", runs
    assert any("ip route add local 198.18.0.0/16 dev lo" in run for run in runs)
    (cache,) = [step for step in job["steps"] if str(step.get("uses", "")).startswith("actions/cache@")]
    assert cache["with"]["path"] == "~/.cache/specpilot"
    assert "e2e/local/build.sh" in cache["with"]["key"] and "e2e/tools.sh" in cache["with"]["key"]
    ci_run = (ROOT / ".ci" / "run").read_text()
    assert "make lint" in ci_run and "make test" in ci_run
