"""Building blocks shared by the spec and status models.

A constraint is declared once, next to its field, and reaches both places that enforce it: pydantic
(what the operator parses) and the CRD's OpenAPI schema with its CEL rules (what the API server
checks at `kubectl apply`). Rules that relate several fields are declared as `Rule`s on the model
that holds them; `specpilot.api.validate` judges the same rules in Python with the same messages.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated, Any, Self
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    PlainValidator,
    WithJsonSchema,
)
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError, core_schema

# Go duration syntax (what CEL's `duration()` parses), restricted to whole numbers of h, m, s, ms.
DURATION_PATTERN = r"^([0-9]{1,7}(ms|h|m|s)){1,4}$"
_DURATION_PART = re.compile(r"([0-9]+)(ms|h|m|s)")
_UNIT = {
    "h": timedelta(hours=1),
    "m": timedelta(minutes=1),
    "s": timedelta(seconds=1),
    "ms": timedelta(milliseconds=1),
}

# Kubernetes resource quantity, non-negative (the pattern apimachinery publishes for Quantity).
QUANTITY_PATTERN = (
    r"^(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)

# RFC 1123 label, as Kubernetes object names and scope names use it.
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# RFC 1123 subdomain (at most 253 characters), as most other object names are.
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


class ApiModel(BaseModel):
    """Base of every SpeculationPilot model: camelCase on the wire, unknown fields rejected, immutable."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        extra="forbid",
        frozen=True,
        use_attribute_docstrings=True,
    )

    @classmethod
    def from_wire(cls, data: Any) -> Self:
        """Parse a Kubernetes object's camelCase form; Python field names are refused there."""
        return cls.model_validate(data, by_alias=True, by_name=False)

    def to_wire(self) -> dict[str, Any]:
        """The JSON-ready form as it appears in a Kubernetes object (camelCase, unset fields left out)."""
        return self.model_dump(mode="json", exclude_none=True)


@dataclass(frozen=True)
class Rule:
    """One CEL rule as the API server evaluates it: an entry of `x-kubernetes-validations`."""

    cel: str
    message: str
    field_path: str | None = None
    reason: str | None = None

    def to_schema(self) -> dict[str, str]:
        entry = {"rule": self.cel, "message": self.message}
        if self.field_path is not None:
            entry["fieldPath"] = self.field_path
        if self.reason is not None:
            entry["reason"] = self.reason
        return entry


def cel(*rules: Rule) -> dict[str, Any]:
    """The `json_schema_extra` that attaches `rules` to a model's schema."""
    return {"x-kubernetes-validations": [rule.to_schema() for rule in rules]}


@dataclass(frozen=True)
class Check:
    """A rule on a single value: pydantic runs `holds`, the API server runs `rule.cel` on `self`."""

    rule: Rule
    holds: Callable[[Any], bool]

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_after_validator_function(self._validate, handler(source))

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        out = handler(schema)
        out.setdefault("x-kubernetes-validations", []).append(self.rule.to_schema())
        return out

    def _validate(self, value: Any) -> Any:
        if not self.holds(value):
            raise PydanticCustomError("rule", "{message}", {"message": self.rule.message})
        return value


def parse_duration(text: str) -> timedelta:
    """Parse a duration such as `90s`, `5m` or `1h30m` (the syntax of DURATION_PATTERN)."""
    if re.fullmatch(DURATION_PATTERN, text) is None:
        raise ValueError(f"not a duration: {text!r} (expected e.g. 30s, 5m, 1h30m)")
    return sum((int(n) * _UNIT[unit] for n, unit in _DURATION_PART.findall(text)), timedelta())


def duration_within(minimum: str, maximum: str) -> Check:
    """Bound a duration field to [minimum, maximum], in pydantic and in CEL alike."""
    low, high = parse_duration(minimum), parse_duration(maximum)
    return Check(
        Rule(
            # Guarded by the pattern so that a malformed value gets the pattern's message alone.
            cel=f"!self.matches('{DURATION_PATTERN}')"
            f" || (duration(self) >= duration('{minimum}') && duration(self) <= duration('{maximum}'))",
            message=f"must be between {minimum} and {maximum}",
        ),
        holds=lambda value: low <= value <= high,
    )


class Duration(timedelta):
    """A duration read from the wire: a `timedelta` that keeps the text it was parsed from, so that it
    goes back on the wire (and into spec hashes) exactly as written. Arithmetic yields plain timedeltas.

    As a model field it takes that text (DURATION_PATTERN, at most 32 characters), a `Duration`, or a
    `timedelta` (written back in h, m, s and ms), and serializes to the text; its schema is the string's.
    """

    __slots__ = ("text",)
    text: str

    def __new__(cls, text: str) -> Self:
        value = parse_duration(text)
        self = super().__new__(cls, value.days, value.seconds, value.microseconds)
        self.text = text
        return self

    @classmethod
    def of(cls, value: timedelta) -> Duration:
        """`value` as a Duration, written in whole h, m, s and ms (`1h30m`, `90ms`, `0s`)."""
        if isinstance(value, Duration):
            return value
        if value < timedelta() or value.microseconds % 1000:
            raise ValueError(f"not a whole, non-negative number of milliseconds: {value}")
        left, parts = value, []
        for unit in ("h", "m", "s", "ms"):
            count, left = divmod(left, _UNIT[unit])
            if count:
                parts.append(f"{count}{unit}")
        return cls("".join(parts) or "0s")

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"Duration({self.text!r})"

    def __reduce__(self) -> tuple[type[Duration], tuple[str]]:
        return type(self), (self.text,)

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        text = core_schema.str_schema(pattern=DURATION_PATTERN, max_length=32)
        from_text = core_schema.no_info_after_validator_function(cls, text)
        return core_schema.json_or_python_schema(
            json_schema=from_text,
            python_schema=core_schema.no_info_before_validator_function(_duration_text, from_text),
            serialization=core_schema.plain_serializer_function_ser_schema(str, return_schema=text),
        )


def _duration_text(value: Any) -> Any:
    """A Python-side value as the text to validate: a Duration's own text, a timedelta's written form."""
    if isinstance(value, timedelta):
        try:
            return Duration.of(value).text
        except ValueError as error:
            raise PydanticCustomError("duration", "{message}", {"message": str(error)}) from None
    return value


def _quantity(value: Any) -> int | str:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and len(value) <= 64 and re.fullmatch(QUANTITY_PATTERN, value):
        return value
    raise PydanticCustomError("quantity", "must be a resource quantity such as 2, 500m or 64Gi")


Quantity = Annotated[
    int | str,
    PlainValidator(_quantity),
    WithJsonSchema(
        {
            "x-kubernetes-int-or-string": True,
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "maxLength": 64,
            "pattern": QUANTITY_PATTERN,
        }
    ),
]


def endpoint(url: str) -> tuple[str, str, int] | None:
    """An http(s) URL's scheme, host (lower case) and port (the scheme's when none is given); None
    when its port is no number, which names no endpoint."""
    parts = urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    return parts.scheme, (parts.hostname or "").lower(), port


# A Kubernetes object passed through as written (an affinity, a volume, a probe, a Service port): the API
# server checks it where the object that carries it is applied.
KubeObject = Annotated[dict[str, Any], WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True})]
