"""JSON values from a JSON schema: one that conforms (what guided decoding yields) and one that does not.

Structured outputs and tool-call arguments must be valid against the request's schema, and the
same on every arm, so values are drawn from a generator seeded by the caller. Supported: `type`
(one or a list), `enum`, `const`, `properties`/`required` (optional properties are included by
chance), `items`/`prefixItems`/`minItems`/`maxItems`/`uniqueItems`, string lengths and a few
`format`s, numeric bounds and `multipleOf`, `anyOf`/`oneOf` (the first branch), `allOf` (merged),
and local `$ref`s (`#/$defs/...`), recursive ones included: past a few levels of nesting only
required properties and minimal arrays are drawn. `pattern` is not honoured.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specpilot.mockvllm.textgen import VOCAB

Schema = Mapping[str, Any]

# Bounds used when a numeric schema leaves one side open.
_LOW, _HIGH = 0, 100
# Nesting from which only what the schema requires is drawn, so recursive schemas end.
_DEEP = 6
_FORMATS = {
    "date": "2024-05-17",
    "date-time": "2024-05-17T09:30:00Z",
    "time": "09:30:00",
    "email": "sre@example.com",
    "uuid": "7d444840-9dc0-11d1-b245-5ffdce74fad2",
    "uri": "https://example.com/model",
}
# A value of each JSON type, tried in order when a value of the wrong type is wanted.
_SAMPLES: tuple[Any, ...] = ("not-a-match", 0, True, [], {}, None)


@dataclass(frozen=True)
class Broken:
    """A value a schema rejects (it may be JSON null, hence the wrapper)."""

    value: Any


def conforming(schema: Schema, seed: int) -> Any:
    """A value valid against `schema`, the same for the same seed."""
    return _Draw(schema, random.Random(seed)).value(schema)


def violating(schema: Schema, seed: int) -> Broken | None:
    """A JSON value `schema` rejects (a missing required property, a wrong type, a value outside an
    enum), or None when the schema constrains nothing this can break."""
    return _Break(schema, random.Random(seed)).value(schema)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _admits(types: set[str], value: Any) -> bool:
    kind = _json_type(value)
    return kind in types or (kind == "integer" and "number" in types)


class _Resolver:
    """Local `$ref`s and `allOf` merged into one schema."""

    def __init__(self, root: Schema, rng: random.Random) -> None:
        self.root = root
        self.rng = rng

    def resolve(self, schema: Schema) -> Schema:
        while "$ref" in schema:
            ref = str(schema["$ref"])
            if not ref.startswith("#"):
                raise ValueError(f"only local $refs are supported, got {ref!r}")
            target: Any = self.root
            for step in filter(None, ref[1:].split("/")):
                target = target[step.replace("~1", "/").replace("~0", "~")]
            schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
        if "allOf" in schema:
            merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
            for raw in schema["allOf"]:
                part = self.resolve(raw)
                merged["properties"] = {**merged.get("properties", {}), **part.get("properties", {})}
                merged["required"] = [*merged.get("required", []), *part.get("required", [])]
                merged.update({k: v for k, v in part.items() if k not in ("properties", "required")})
            schema = merged
        return schema

    def kind(self, schema: Schema) -> str | None:
        """The type to produce: the first non-null of `type`, else what the keywords imply."""
        declared = schema.get("type")
        if isinstance(declared, list):
            declared = next((t for t in declared if t != "null"), declared[0] if declared else None)
        if declared is not None:
            return str(declared)
        if "properties" in schema or "required" in schema:
            return "object"
        if "items" in schema or "prefixItems" in schema:
            return "array"
        return None


class _Draw(_Resolver):
    def __init__(self, root: Schema, rng: random.Random) -> None:
        super().__init__(root, rng)
        self.depth = 0

    def value(self, schema: Schema) -> Any:
        self.depth += 1
        try:
            return self._value(self.resolve(schema))
        finally:
            self.depth -= 1

    def _value(self, schema: Schema) -> Any:
        if "const" in schema:
            return schema["const"]
        if schema.get("enum"):
            return self.rng.choice(list(schema["enum"]))
        for key in ("anyOf", "oneOf"):
            if schema.get(key):
                return self.value({**{k: v for k, v in schema.items() if k != key}, **schema[key][0]})
        kind = self.kind(schema)
        if kind == "object":
            return self._object(schema)
        if kind == "array":
            return self._array(schema)
        if kind == "integer":
            return self._integer(schema)
        if kind == "number":
            return self._number(schema)
        if kind == "boolean":
            return self.rng.random() < 0.5
        if kind == "null":
            return None
        return self._string(schema)

    def _object(self, schema: Schema) -> dict[str, Any]:
        properties: Mapping[str, Schema] = schema.get("properties", {})
        required = set(schema.get("required", ()))
        optional = self.depth < _DEEP
        out = {
            name: self.value(sub)
            for name, sub in properties.items()
            if name in required or (optional and self.rng.random() < 0.5)
        }
        for name in sorted(required - set(properties)):
            out[name] = self._string({})
        if not properties and not required and schema.get("additionalProperties", True) is not False:
            out["answer"] = self._string({})
        return out

    def _array(self, schema: Schema) -> list[Any]:
        prefix = [self.value(sub) for sub in schema.get("prefixItems", ())]
        items = schema.get("items", {})
        if not isinstance(items, Mapping):  # `items: false`: the prefix is all there is
            return prefix
        required = max(int(schema.get("minItems", 0)), len(prefix))
        target = required
        if self.depth < _DEEP:
            low = max(required, 1)
            target = self.rng.randint(low, max(int(schema.get("maxItems", max(low, 3))), low))
        unique = bool(schema.get("uniqueItems"))
        out = list(prefix)
        for _ in range(target * 4 if unique else target):
            if len(out) >= target:
                break
            item = self.value(items)
            if not unique or item not in out:
                out.append(item)
        return out

    def _bounds(self, schema: Schema) -> tuple[float, float, float, float]:
        """(inclusive low, inclusive high, exclusive low, exclusive high) with open sides filled in."""
        low = schema.get("minimum", -math.inf)
        high = schema.get("maximum", math.inf)
        xlow = schema.get("exclusiveMinimum", -math.inf)
        xhigh = schema.get("exclusiveMaximum", math.inf)
        floor, ceiling = max(low, xlow), min(high, xhigh)
        if floor == -math.inf:
            floor = min(_LOW, ceiling - _HIGH)
        if ceiling == math.inf:
            ceiling = max(_HIGH, floor + _HIGH)
        return floor, ceiling, xlow, xhigh

    def _integer(self, schema: Schema) -> int:
        floor, ceiling, xlow, xhigh = self._bounds(schema)
        low = math.floor(floor) + 1 if floor == xlow or floor != math.floor(floor) else int(floor)
        high = math.ceil(ceiling) - 1 if ceiling == xhigh or ceiling != math.ceil(ceiling) else int(ceiling)
        step = schema.get("multipleOf")
        if isinstance(step, int) and step > 0:
            first, last = -(-low // step), high // step
            return self.rng.randint(first, max(first, last)) * step
        return self.rng.randint(low, max(low, high))

    def _number(self, schema: Schema) -> float:
        floor, ceiling, xlow, xhigh = self._bounds(schema)
        step = schema.get("multipleOf")
        if isinstance(step, int | float) and step > 0:
            first, last = math.floor(floor / step) + 1, math.ceil(ceiling / step) - 1
            return float(self.rng.randint(first, max(first, last)) * step)
        value = round(floor + (ceiling - floor) * self.rng.random(), 2)
        if value <= xlow or value >= xhigh or not floor <= value <= ceiling:
            value = (floor + ceiling) / 2
        return float(value)

    def _string(self, schema: Schema) -> str:
        fixed = _FORMATS.get(str(schema.get("format")))
        if fixed is not None:
            return fixed
        low = int(schema.get("minLength", 1))
        high = int(schema.get("maxLength", max(low, 40)))
        words = [self.rng.choice(VOCAB) for _ in range(self.rng.randint(1, 4))]
        text = " ".join(words)
        while len(text) < low:
            text += " " + self.rng.choice(VOCAB)
        return text[:high].rstrip() if len(text[:high].rstrip()) >= low else text[:high]


class _Break(_Resolver):
    def value(self, schema: Schema) -> Broken | None:
        schema = self.resolve(schema)
        if "const" in schema:
            return self._outside([schema["const"]])
        if schema.get("enum"):
            return self._outside(list(schema["enum"]))
        for key in ("anyOf", "oneOf"):
            if schema.get(key):
                return self._wrong_type(self._types_of(schema[key]))
        kind = self.kind(schema)
        if kind == "object":
            required = list(schema.get("required", ()))
            if required:
                document = conforming(schema, self.rng.getrandbits(64))
                del document[required[0]]
                return Broken(document)
        types = schema.get("type")
        if types is None:
            return None if kind is None else self._wrong_type({kind})
        return self._wrong_type(set(types) if isinstance(types, list) else {str(types)})

    def _types_of(self, branches: list[Schema]) -> set[str] | None:
        types: set[str] = set()
        for raw in branches:
            declared = self.resolve(raw).get("type")
            if declared is None:
                return None
            types |= set(declared) if isinstance(declared, list) else {str(declared)}
        return types

    def _wrong_type(self, types: set[str] | None) -> Broken | None:
        if types is None:
            return None
        return next((Broken(value) for value in _SAMPLES if not _admits(types, value)), None)

    def _outside(self, members: list[Any]) -> Broken | None:
        return next((Broken(value) for value in _SAMPLES if value not in members), None)
