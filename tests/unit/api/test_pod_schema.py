"""The CRD carries api.podsecurity's refusals as CEL rules on the pod template's securityContexts and
volumes, each naming a field the schema declares (CEL reads only those), with podsecurity's words."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from specpilot.api import crd
from specpilot.api.podschema import REFUSED_VOLUMES, VOLUME_SOURCES, forbidden_rule
from specpilot.api.podsecurity import CONTEXT_FORBIDDEN, HOST_PATH, PRIVILEGED, ROOT_USER, VOLUME_TYPES, Forbidden, When

CHECKED_IN = Path(__file__).resolve().parents[3] / "crds" / crd.FILE_NAME
TEMPLATE = ("spec", "engine", "podTemplate")


def node(schema: dict[str, Any], *path: str) -> dict[str, Any]:
    for key in path:
        schema = schema["items"] if key == "[]" else schema["properties"][key]
    return schema


def template_schema() -> dict[str, Any]:
    return node(crd.openapi_schema(), *TEMPLATE)


@pytest.mark.parametrize("path", [("securityContext",), ("container", "securityContext")], ids=["pod", "container"])
def test_each_security_context_carries_a_rule_per_forbidden_field(path: tuple[str, ...]) -> None:
    context = node(template_schema(), *path)
    rules = context["x-kubernetes-validations"]
    assert rules == [forbidden_rule(f).to_schema() for f in CONTEXT_FORBIDDEN]
    for rule in rules:
        # the API server refuses a CRD whose fieldPath names no declared field
        declared = node(context, *rule["fieldPath"].removeprefix(".").split("."))
        assert declared.get("type") in ("boolean", "integer", "string", "array"), rule
    assert context["x-kubernetes-preserve-unknown-fields"] is True  # other fields kept as written
    by_field = {rule["fieldPath"]: rule for rule in rules}
    assert by_field[".privileged"] == {
        "rule": "!has(self.privileged) || !self.privileged",
        "message": PRIVILEGED,
        "fieldPath": ".privileged",
    }
    assert by_field[".runAsUser"]["rule"] == "!has(self.runAsUser) || self.runAsUser != 0"
    assert by_field[".runAsUser"]["message"] == ROOT_USER


@pytest.mark.parametrize(
    ("forbidden", "cel"),
    [
        (Forbidden("a", When.TRUE, "m"), "!has(self.a) || !self.a"),
        (Forbidden("a", When.FALSE, "m"), "!has(self.a) || self.a"),
        (Forbidden("a", When.ZERO, "m"), "!has(self.a) || self.a != 0"),
        (Forbidden("a.b", When.SET, "m"), "!has(self.a) || !has(self.a.b) || size(self.a.b) == 0"),
        (Forbidden("a.b", When.EQUALS, "m", "X"), "!has(self.a) || !has(self.a.b) || self.a.b != 'X'"),
    ],
    ids=["true", "false", "zero", "set", "equals"],
)
def test_a_forbidden_value_becomes_a_guarded_rule(forbidden: Forbidden, cel: str) -> None:
    rule = forbidden_rule(forbidden)
    assert (rule.cel, rule.message, rule.field_path) == (cel, "m", f".{forbidden.path}")


def test_every_volume_reaching_the_node_is_refused_by_name() -> None:
    volume = node(template_schema(), "volumes", "[]")
    rules = {rule["fieldPath"]: rule for rule in volume["x-kubernetes-validations"]}
    assert sorted(rules) == sorted(f".{kind}" for kind in REFUSED_VOLUMES)
    assert rules[".hostPath"] == {"rule": "!has(self.hostPath)", "message": HOST_PATH, "fieldPath": ".hostPath"}
    assert "nfs volumes are refused" in rules[".nfs"]["message"]
    assert set(VOLUME_TYPES) <= set(VOLUME_SOURCES) and not set(VOLUME_TYPES) & set(REFUSED_VOLUMES)
    assert set(volume["properties"]) == set(REFUSED_VOLUMES)


def test_the_checked_in_crd_carries_the_rules() -> None:
    checked_in = yaml.safe_load(CHECKED_IN.read_text())
    template = node(checked_in["spec"]["versions"][0]["schema"]["openAPIV3Schema"], *TEMPLATE)
    for path in (("securityContext",), ("container", "securityContext"), ("volumes", "[]")):
        rules = node(template, *path)["x-kubernetes-validations"]
        assert rules == node(template_schema(), *path)["x-kubernetes-validations"], "run `make crd`"
