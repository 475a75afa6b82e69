"""Values from JSON schemas: conforming ones validate, violating ones do not, both deterministic."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from specpilot.mockvllm.schemavalues import conforming, violating

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 3, "maxLength": 12},
        "age": {"type": "integer", "minimum": 18, "maximum": 99},
        "score": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        "active": {"type": "boolean"},
        "role": {"enum": ["admin", "viewer"]},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 4, "uniqueItems": True},
        "nickname": {"type": ["string", "null"]},
    },
    "required": ["name", "age", "score", "active", "role", "tags"],
    "additionalProperties": False,
}
# What pydantic (and so the openai SDK's `parse`) writes for a nested model.
NESTED = {
    "$defs": {
        "Step": {
            "type": "object",
            "properties": {"explanation": {"type": "string"}, "output": {"type": "string"}},
            "required": ["explanation", "output"],
            "additionalProperties": False,
        }
    },
    "type": "object",
    "properties": {
        "steps": {"type": "array", "items": {"$ref": "#/$defs/Step"}},
        "final_answer": {"anyOf": [{"type": "integer", "multipleOf": 5}, {"type": "null"}]},
    },
    "required": ["steps", "final_answer"],
    "additionalProperties": False,
}
# A recursive schema: every node must have children, so only depth limits end it.
TREE = {
    "$defs": {
        "Node": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                "parent": {"anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}]},
            },
            "required": ["name", "children"],
        }
    },
    "$ref": "#/$defs/Node",
}
SCHEMAS: dict[str, dict[str, Any]] = {
    "person": PERSON,
    "nested-refs": NESTED,
    "all-of": {"allOf": [{"properties": {"a": {"type": "integer"}}, "required": ["a"]}, {"required": ["b"]}]},
    "array-root": {"type": "array", "items": {"type": "number", "minimum": -5, "maximum": -1}, "minItems": 1},
    "tuple": {"type": "array", "prefixItems": [{"const": "x"}, {"type": "boolean"}], "items": False},
    "formats": {
        "type": "object",
        "properties": {"when": {"type": "string", "format": "date-time"}, "id": {"type": "string", "format": "uuid"}},
        "required": ["when", "id"],
    },
    "open-object": {"type": "object"},
    "closed-empty": {"type": "object", "additionalProperties": False},
    "multiple-of": {"type": "integer", "minimum": 7, "maximum": 40, "multipleOf": 6},
    "recursive": TREE,
    "untyped-items": {"type": "array", "minItems": 2},
}


@pytest.mark.parametrize("schema", SCHEMAS.values(), ids=SCHEMAS.keys())
@pytest.mark.parametrize("seed", [0, 1, 2, 99, 2**63 + 5])
def test_conforming_values_validate(schema: dict[str, Any], seed: int) -> None:
    jsonschema.validate(conforming(schema, seed), schema)


def test_the_same_seed_gives_the_same_value_and_others_vary() -> None:
    assert conforming(PERSON, 7) == conforming(PERSON, 7)
    assert len({repr(conforming(PERSON, seed)) for seed in range(10)}) > 1


def test_required_properties_are_always_there_and_optional_ones_sometimes() -> None:
    values = [conforming(PERSON, seed) for seed in range(40)]
    assert all(set(PERSON["required"]) <= set(v) for v in values)
    assert any("nickname" in v for v in values) and any("nickname" not in v for v in values)


def test_an_object_without_properties_gets_an_answer() -> None:
    assert set(conforming({"type": "object"}, 3)) == {"answer"}
    assert conforming({"type": "object", "additionalProperties": False}, 3) == {}


@pytest.mark.parametrize(
    "schema",
    [
        PERSON,
        NESTED,
        {"type": "string"},
        {"type": "integer"},
        {"type": "number"},
        {"type": "boolean"},
        {"type": "array", "items": {"type": "string"}},
        {"type": "object"},
        {"enum": ["a", "b"]},
        {"const": 3},
        {"type": ["string", "integer"]},
        {"anyOf": [{"type": "string"}, {"type": "null"}]},
    ],
    ids=lambda s: str(s.get("type") or s.get("enum") or s.get("const") or next(iter(s))),
)
def test_violating_values_are_rejected(schema: dict[str, Any]) -> None:
    broken = violating(schema, 11)
    assert broken is not None
    assert not jsonschema.Draft202012Validator(schema).is_valid(broken.value)


def test_a_missing_required_property_is_the_violation_of_an_object() -> None:
    broken = violating(PERSON, 4)
    assert broken is not None and "name" not in broken.value and "age" in broken.value


@pytest.mark.parametrize("schema", [{}, {"anyOf": [{"type": "string"}, {}]}], ids=["anything", "open-branch"])
def test_schemas_that_admit_anything_cannot_be_violated(schema: dict[str, Any]) -> None:
    assert violating(schema, 0) is None
