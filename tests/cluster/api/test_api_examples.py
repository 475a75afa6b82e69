"""The examples are accepted by the API server and defaulted exactly as the models default them; what only
the operator judges passes the API server and is caught by `specpilot.api.validate`."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.cluster.local import Cluster

from specpilot.api import SpeculationPilot, SpeculationPilotSpec, validate

pytestmark = pytest.mark.cluster

EXAMPLES = sorted((Path(__file__).resolve().parents[3] / "manifests" / "examples").glob("*.yaml"))


def _dry_run(api: Cluster, namespace: str, manifest: str) -> dict[str, Any]:
    applied = api.kubectl(
        "apply", "--dry-run=server", "--validate=strict", "-n", namespace, "-f", "-", "-o", "json", input=manifest
    )
    stored: dict[str, Any] = json.loads(applied.stdout)
    return stored


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda path: path.stem)
def test_example_is_accepted_and_defaulted_like_the_models(api: Cluster, dry_run_namespace: str, path: Path) -> None:
    stored = _dry_run(api, dry_run_namespace, path.read_text())
    local = SpeculationPilot.from_wire(yaml.safe_load(path.read_text()))
    assert SpeculationPilotSpec.from_wire(stored["spec"]) == local.spec
    assert validate(stored) == []


def _operator_only() -> list[Any]:
    minimal = yaml.safe_load(next(path for path in EXAMPLES if path.stem == "minimal").read_text())
    regex = copy.deepcopy(minimal)
    regex["spec"]["scopes"] = [
        {"name": "code", "match": {"headers": [{"name": "x-task", "type": "RegularExpression", "value": "code("}]}}
    ]
    twins = copy.deepcopy(minimal)
    twins["spec"]["scopes"] = [{"name": name, "match": {"paths": [{"value": "/v1/chat"}]}} for name in ("a", "b")]
    return [
        pytest.param(regex, "spec.scopes[0].match.headers[0].value", id="regular-expression"),
        pytest.param(twins, "spec.scopes[1].match", id="unreachable-scope"),
    ]


@pytest.mark.parametrize(("manifest", "field"), _operator_only())
def test_operator_only_rules(api: Cluster, dry_run_namespace: str, manifest: dict[str, Any], field: str) -> None:
    stored = _dry_run(api, dry_run_namespace, json.dumps(manifest))
    assert [problem.field for problem in validate(stored)] == [field]
