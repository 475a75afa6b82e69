"""The routing table: the contract between the operator, which writes it, and the router.

The operator writes a ConfigMap named `routes_name(pilot)` (``<pilot>-routes``) in the pilot's
namespace whose data key ``routes.json`` holds a `RoutingTable` as JSON (render it with
`render_routes`, read it with `parse_routes`)::

    {"pilot": "p1", "generation": 3, "updatedAt": "2026-11-29T12:00:00Z", "defaultScope": "chat",
     "scopes": [
       {"name": "code", "weights": {"baseline": 90, "speculative": 10, "alternative": 0}, "mirror": "control",
        "deadlineSeconds": 20, "match": {"headers": [{"name": "x-team", "type": "Exact", "value": "code"}]}},
       {"name": "chat", "weights": {"baseline": 100},
        "match": {"headers": [{"name": "x-team", "type": "Exact", "value": "support"}],
                  "paths": [{"type": "PathPrefix", "value": "/v1/chat/"}]}}]}

Rules both sides rely on:

- ``weights`` are percentages per arm that sum to 100; an arm left out gets 0.
- Classification: a request naming a listed scope in the scope header (`SCOPE_HEADER` unless the
  router is told otherwise) belongs to it. Otherwise scopes are tried in list order and the first
  whose ``match`` holds takes it: every header condition must hold, and one of the paths must
  match when paths are given; an empty match takes only requests naming the scope. The rest
  belong to ``defaultScope``, or, without one, to the router's ``--default-scope`` label. A scope
  that is not listed runs ordinary decoding (baseline 100). There is no match on the model: every
  arm of a pilot serves the same model name, so it cannot tell scopes apart.
- ``deadlineSeconds`` is the scope's latency budget; each request is measured against it.
- ``mirror`` (``"control"``, with no control weight): every request the speculative arm takes is also
  sent to the control arm at the same moment, its answer measured (a request sample of the control
  arm) and dropped. The client gets the speculative arm's answer only. A copy is never diverted to
  another arm: with no ready control endpoint, or past the router's bound on copies in flight, it is
  not sent (and counted as such).
- Staleness: the operator rewrites the table (at least ``updatedAt``) every analysis interval.
  A router treats a table whose ``updatedAt`` is older than its ``--max-table-age`` as stale and
  sends every scope to the baseline arm until a fresh table arrives; so does a missing or
  invalid table (the router keeps the last valid one's scope names, matches and deadlines).
- Arms are the Services `arm_name(pilot, arm)` (``<pilot>-baseline``, ``<pilot>-speculative``,
  ``<pilot>-control``, ``<pilot>-alternative``); the router finds their ready pods through EndpointSlices labelled
  `SERVICE_NAME_LABEL`.
- Unknown fields are ignored, so a newer operator does not knock an older router into fallback.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Annotated, Literal, Self

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StringConstraints,
    ValidationError,
    model_validator,
)
from pydantic.alias_generators import to_camel

from specpilot.wire.names import Arm

ROUTES_KEY = "routes.json"
SCOPE_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"  # a DNS label, as the API has it

ScopeName = Annotated[str, StringConstraints(pattern=SCOPE_NAME_PATTERN)]


class _Model(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="ignore", alias_generator=to_camel, validate_by_name=True, serialize_by_alias=True
    )


class ArmWeights(_Model):
    """Share of a scope's new requests per arm, in percent (summing to 100)."""

    baseline: int = Field(default=0, ge=0, le=100)
    speculative: int = Field(default=0, ge=0, le=100)
    control: int = Field(default=0, ge=0, le=100)
    alternative: int = Field(default=0, ge=0, le=100)

    @model_validator(mode="after")
    def _sum_to_100(self) -> Self:
        total = self.baseline + self.speculative + self.control + self.alternative
        if total != 100:
            raise ValueError(f"weights must sum to 100, got {total}")
        return self

    def of(self, arm: Arm) -> int:
        return int(getattr(self, arm.value))


ORDINARY = ArmWeights(baseline=100)


@functools.lru_cache(maxsize=256)
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


class HeaderMatch(_Model):
    """A request header condition (name case-insensitive; a regular expression matches in full)."""

    name: str = Field(min_length=1)
    type: Literal["Exact", "RegularExpression"] = "Exact"
    value: str

    @model_validator(mode="after")
    def _compiles(self) -> Self:
        if self.type == "RegularExpression":
            try:
                _regex(self.value)
            except re.error as exc:
                raise ValueError(f"bad regular expression {self.value!r}: {exc}") from None
        return self

    def holds(self, headers: Mapping[str, str]) -> bool:
        value = headers.get(self.name)
        if value is None:
            return False
        return value == self.value if self.type == "Exact" else _regex(self.value).fullmatch(value) is not None


class PathMatch(_Model):
    """A request path condition."""

    type: Literal["Exact", "PathPrefix"] = "PathPrefix"
    value: str = Field(pattern=r"^/")

    def holds(self, path: str) -> bool:
        return path == self.value if self.type == "Exact" else path.startswith(self.value)


class ScopeMatch(_Model):
    """Which requests a scope takes: every header condition, and one path where paths are given."""

    headers: tuple[HeaderMatch, ...] = ()
    paths: tuple[PathMatch, ...] = ()

    def holds(self, *, path: str, headers: Mapping[str, str]) -> bool:
        if not (self.headers or self.paths):
            return False
        return all(h.holds(headers) for h in self.headers) and (
            not self.paths or any(p.holds(path) for p in self.paths)
        )


class ScopeRoute(_Model):
    """How one scope (task group) is recognised and split between arms."""

    name: ScopeName
    weights: ArmWeights = ORDINARY
    deadline_seconds: float | None = Field(default=None, gt=0)
    match: ScopeMatch = ScopeMatch()
    mirror: Arm | None = None
    """The arm sent a copy of every request the speculative arm takes, at the same moment, its answer
    measured and dropped: the control arm, so that both compared arms serve the same requests."""

    @model_validator(mode="after")
    def _mirrored_to_control(self) -> Self:
        if self.mirror not in (None, Arm.CONTROL):
            raise ValueError(f"scope {self.name!r}: mirror may name only the control arm, not {self.mirror}")
        if self.mirror is not None and self.weights.control:
            raise ValueError(f"scope {self.name!r}: a mirrored control arm takes no share of its own")
        return self


class RoutingTable(_Model):
    """The whole routing state of one pilot, as the operator last decided it."""

    pilot: str = Field(min_length=1)
    generation: int = Field(ge=0)
    updated_at: AwareDatetime
    default_scope: ScopeName | None = None
    scopes: tuple[ScopeRoute, ...] = ()
    _by_name: dict[str, ScopeRoute] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        names = [scope.name for scope in self.scopes]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"scope names must be unique: {', '.join(duplicates)}")
        if self.default_scope is not None and self.default_scope not in names:
            raise ValueError(f"defaultScope {self.default_scope!r} is not a listed scope")
        self._by_name = {scope.name: scope for scope in self.scopes}
        return self

    def scope(self, name: str) -> ScopeRoute | None:
        return self._by_name.get(name)

    def classify(self, *, path: str, headers: Mapping[str, str]) -> str | None:
        """The first scope, in table order, whose match holds for the request."""
        for scope in self.scopes:
            if scope.match.holds(path=path, headers=headers):
                return scope.name
        return None

    def stale_at(self, max_age: timedelta | None) -> datetime | None:
        """When this table becomes stale under `max_age` (None: never)."""
        return None if max_age is None else self.updated_at + max_age


class TableError(ValueError):
    """The ConfigMap data does not hold a usable routing table."""


def render_routes(table: RoutingTable) -> dict[str, str]:
    """ConfigMap ``data`` for `table`."""
    return {ROUTES_KEY: table.model_dump_json(exclude_none=True)}


def parse_routes(data: Mapping[str, str] | None, *, pilot: str) -> RoutingTable:
    """The routing table in ConfigMap ``data``; raises `TableError` saying what is wrong."""
    if not data or ROUTES_KEY not in data:
        raise TableError(f"data key {ROUTES_KEY!r} is missing")
    try:
        table = RoutingTable.model_validate_json(data[ROUTES_KEY])
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}" for err in exc.errors()
        )
        raise TableError(problems) from None
    if table.pilot != pilot:
        raise TableError(f"table is for pilot {table.pilot!r}, not {pilot!r}")
    return table
