"""e2e/kind cannot run here (no Docker); what keeps it faithful to the cluster tier is checked instead:
it runs the same scenario files, its load reaches the demo router by the names the operator gives it,
and its workflow drives the kind cluster its config describes."""

from __future__ import annotations

import yaml

from specpilot.testing.helm import ROOT, kustomize
from specpilot.wire.names import ROUTER_PORT, router_name

KIND = ROOT / "e2e" / "kind"
DEMO = ROOT / "manifests" / "demo"


def test_run_sh_and_the_cluster_tier_share_the_scenario() -> None:
    script = (KIND / "run.sh").read_text()
    cluster_test = (ROOT / "tests" / "cluster" / "test_chart.py").read_text()
    for used in (
        '"$DEMO/pilot.yaml"',
        'apply -k "$DEMO"',
        '"$DEMO/outcomes.txt"',
        "operator/Dockerfile",
        "charts/specpilot",
    ):
        assert used in script, used
    assert "{.status.phase}'=Healthy" in script
    for used in ('DEMO / "pilot.yaml"', "kustomize(DEMO)", '"outcomes.txt"', "{.status.phase}=Healthy"):
        assert used in cluster_test, used


def test_demo_load_targets_the_demo_router_with_the_demo_mix() -> None:
    docs = {d["kind"]: d for d in kustomize(DEMO)}
    pilot = yaml.safe_load((DEMO / "pilot.yaml").read_text())
    assert docs["ConfigMap"]["data"]["mix.yaml"] == (DEMO / "mix.yaml").read_text()
    (container,) = docs["Job"]["spec"]["template"]["spec"]["containers"]
    assert container["image"] == pilot["spec"]["engine"]["image"]
    env = {e["name"]: e for e in container["env"]}
    assert env["ROUTER_URL"]["value"] == f"http://{router_name(pilot['metadata']['name'])}:{ROUTER_PORT}"
    assert env["MIX"]["valueFrom"]["configMapKeyRef"] == {
        "name": docs["ConfigMap"]["metadata"]["name"],
        "key": "mix.yaml",
    }
    mix_scopes = {s["name"] for s in yaml.safe_load((DEMO / "mix.yaml").read_text())["scopes"]}
    lines = [line.split() for line in (DEMO / "outcomes.txt").read_text().splitlines() if line and line[0] != "#"]
    assert {scope for scope, _ in lines} == {s["name"] for s in pilot["spec"]["scopes"]}
    assert mix_scopes == {scope for scope, _ in lines}, "the load reaches every scope"


def test_workflow_runs_run_sh_on_the_configured_kind_cluster() -> None:
    config = yaml.safe_load((KIND / "kind-config.yaml").read_text())
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "e2e-kind.yaml").read_text())
    steps = workflow["jobs"]["kind"]["steps"]
    (kind,) = [s for s in steps if s.get("uses", "").startswith("helm/kind-action")]
    assert kind["with"] == {"cluster_name": config["name"], "config": "e2e/kind/kind-config.yaml"}
    assert any(s.get("run") == "e2e/kind/run.sh" and s["env"]["KIND_CLUSTER"] == config["name"] for s in steps)
