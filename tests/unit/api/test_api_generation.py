"""The generated CRD: current with the models, structural, documented, bounded for CEL cost."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from specpilot.api import SpeculationPilotSpec, crd
from specpilot.api.spec.pilot_spec import SPEC_RULES

ROOT = Path(__file__).resolve().parents[3]
CHECKED_IN = ROOT / "crds" / crd.FILE_NAME
MINIMAL = yaml.safe_load((ROOT / "manifests" / "examples" / "minimal.yaml").read_text())
ALLOWED = {
    "description",
    "type",
    "format",
    "enum",
    "default",
    "minimum",
    "exclusiveMinimum",
    "maximum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "maxProperties",
    "required",
    "properties",
    "items",
    "additionalProperties",
    "x-kubernetes-int-or-string",
    "anyOf",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-validations",
    "x-kubernetes-preserve-unknown-fields",  # a Kubernetes object passed through (an affinity, a volume)
}


def _schema() -> dict[str, Any]:
    return crd.openapi_schema()


def _nodes(node: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, prop in node.get("properties", {}).items():
        yield from _nodes(prop, f"{path}.{name}")
    if "items" in node:
        yield from _nodes(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _nodes(node["additionalProperties"], f"{path}{{}}")


def _api_nodes() -> Iterator[tuple[str, dict[str, Any]]]:
    for part in ("spec", "status"):
        yield from _nodes(_schema()["properties"][part], part)


def test_checked_in_crd_is_current() -> None:
    assert CHECKED_IN.read_text() == crd.render(), (
        f"{CHECKED_IN.relative_to(ROOT)} is stale: run `specpilot crd --output crds/{crd.FILE_NAME}`"
    )


def test_cli_prints_the_crd(capsys: pytest.CaptureFixture[str]) -> None:
    assert crd.main([]) == 0
    assert capsys.readouterr().out == crd.render()


def test_cli_writes_the_crd(tmp_path: Path) -> None:
    assert crd.main(["--output", str(tmp_path / "crd.yaml")]) == 0
    assert (tmp_path / "crd.yaml").read_text() == crd.render()


def test_identity_subresources_and_columns() -> None:
    definition = crd.definition()
    names = definition["spec"]["names"]
    version = definition["spec"]["versions"][0]
    assert definition["metadata"]["name"] == "speculationpilots.specpilot.io"
    assert (names["kind"], names["plural"], names["shortNames"], names["categories"]) == (
        "SpeculationPilot",
        "speculationpilots",
        ["sp", "spilot"],
        ["specpilot"],
    )
    assert version["subresources"] == {"status": {}}
    columns = [column["name"] for column in version["additionalPrinterColumns"]]
    assert columns == ["Phase", "Speculative", "Last-Fallback", "Decision", "Model", "Age"]


def test_schema_uses_only_structural_keywords() -> None:
    for path, node in _api_nodes():
        assert set(node) <= ALLOWED, f"{path}: {set(node) - ALLOWED}"
        assert "type" in node or node.get("x-kubernetes-int-or-string"), f"{path} has no type"
        if "anyOf" in node:
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path


def test_every_field_is_documented() -> None:
    for path, node in _api_nodes():
        for name, prop in node.get("properties", {}).items():
            assert prop.get("description"), f"{path}.{name} has no description"


def test_collections_and_strings_are_bounded_for_cel_cost() -> None:
    for path, node in _api_nodes():
        if node.get("type") == "array":
            assert "maxItems" in node, path
        if node.get("type") == "object" and "additionalProperties" in node:
            assert "maxProperties" in node, path
        if node.get("type") == "string" or node.get("x-kubernetes-int-or-string"):
            assert {"maxLength", "enum", "format"} & set(node), path


def test_cross_field_rules_sit_on_the_spec() -> None:
    rules = _schema()["properties"]["spec"]["x-kubernetes-validations"]
    assert rules == [rule.to_schema() for rule in SPEC_RULES]


def test_unique_names_are_list_map_keys() -> None:
    spec = _schema()["properties"]["spec"]["properties"]
    for node in (spec["scopes"], spec["quality"]["properties"]["webhooks"]):
        assert (node["x-kubernetes-list-type"], node["x-kubernetes-list-map-keys"]) == ("map", ["name"])


def _apply_defaults(value: Any, node: dict[str, Any]) -> Any:
    """Structural defaulting as the API server does it (defaults of absent fields, recursively)."""
    if isinstance(value, dict) and "properties" in node:
        out = dict(value)
        for name, prop in node["properties"].items():
            if name not in out and "default" in prop:
                out[name] = prop["default"]
            if name in out:
                out[name] = _apply_defaults(out[name], prop)
        return out
    if isinstance(value, list) and "items" in node:
        return [_apply_defaults(item, node["items"]) for item in value]
    return value


def _without_empty(value: Any) -> Any:
    if isinstance(value, list):
        return [_without_empty(item) for item in value]
    if isinstance(value, dict):
        pruned = {key: _without_empty(item) for key, item in value.items()}
        return {key: item for key, item in pruned.items() if item not in ({}, [])}
    return value


def test_schema_defaults_are_the_model_defaults() -> None:
    defaulted = _apply_defaults(MINIMAL["spec"], _schema()["properties"]["spec"])
    assert defaulted == _without_empty(SpeculationPilotSpec.from_wire(MINIMAL["spec"]).to_wire())


def test_descriptions_state_scalar_defaults() -> None:
    interval = _schema()["properties"]["spec"]["properties"]["analysis"]["properties"]["interval"]
    assert interval["description"].endswith("Defaults to 1m.")
