"""The router and its traffic scopes: which requests a scope takes, and the stages it is piloted in."""

from __future__ import annotations

from enum import StrEnum
from itertools import pairwise
from typing import Annotated

from pydantic import Field, StringConstraints

from specpilot.api.common import ApiModel, Check, Duration, Rule, duration_within
from specpilot.api.spec.engine_spec import Resources, Toleration
from specpilot.api.spec.probes_spec import ScopeProbes
from specpilot.api.spec.spec_fields import HeaderName, Name
from specpilot.wire.names import SCOPE_HEADER


class HeaderMatchType(StrEnum):
    """How a header value is compared."""

    EXACT = "Exact"
    REGULAR_EXPRESSION = "RegularExpression"


class PathMatchType(StrEnum):
    """How a request path is compared."""

    EXACT = "Exact"
    PATH_PREFIX = "PathPrefix"


class HeaderMatch(ApiModel):
    """A request header condition."""

    type: HeaderMatchType = HeaderMatchType.EXACT
    """Exact or RegularExpression (Python `re` syntax, matched in full)."""
    name: HeaderName
    """Header name, case-insensitive."""
    value: Annotated[str, StringConstraints(min_length=1, max_length=256)]
    """Value or regular expression to match."""


class PathMatch(ApiModel):
    """A request path condition."""

    type: PathMatchType = PathMatchType.PATH_PREFIX
    """Exact or PathPrefix."""
    value: Annotated[str, StringConstraints(pattern=r"^/", max_length=256)]
    """Path, e.g. /v1/chat/completions."""


class ScopeMatch(ApiModel):
    """Which requests a scope takes. Every condition given must hold. A request naming a scope in the
    router's scopeHeader goes to that scope regardless; otherwise scopes are tried in order."""

    headers: Annotated[list[HeaderMatch], Field(max_length=8)] = []
    """Header conditions, all of which must hold."""
    paths: Annotated[list[PathMatch], Field(max_length=8)] = []
    """Path conditions, one of which must hold."""


class Stage(ApiModel):
    """One step of a scope's rollout."""

    weight: Annotated[int, Field(strict=True, gt=0, le=100)]
    """Percent of the scope's requests routed to the speculative arm, in (0, 100]. The control arm serves a
    copy of each; an alternative arm takes the same share again, so with one at most 50."""
    min_requests: Annotated[int, Field(strict=True, ge=1, le=10_000_000)] = 200
    """Requests the scope must complete at this weight before promotion; at least analysis.minSamples."""
    min_duration: Annotated[Duration, duration_within("5s", "168h")] = Duration("10m")
    """Time the scope must spend at this weight before promotion; at least analysis.interval."""


STAGES_INCREASING = Check(
    Rule(
        cel="self.map(s, s.weight).isSorted() && self.all(a, self.exists_one(b, b.weight == a.weight))",
        message="stage weights must be strictly increasing",
    ),
    holds=lambda stages: all(a.weight < b.weight for a, b in pairwise(stages)),
)


class Scope(ApiModel):
    """A traffic scope (task group): requests the router classifies together and that are piloted, judged
    and rolled back together."""

    name: Name
    """Scope name, unique within the pilot (an RFC 1123 label)."""
    match: ScopeMatch = ScopeMatch()
    """Which requests belong to the scope; empty takes only requests that name it in the scope header."""
    deadline: Annotated[Duration, duration_within("100ms", "1h")] | None = None
    """Latency budget of one request; a request that has not finished by then counts as a timeout.
    Defaults to router.requestTimeout, which it must not exceed."""
    stages: Annotated[list[Stage], Field(min_length=1, max_length=10), STAGES_INCREASING] = [
        Stage(weight=10),
        Stage(weight=25),
        Stage(weight=33),
    ]
    """Stages with strictly increasing weights. The last stage's weight is where the scope stays once
    speculative; below 100 it keeps measuring both arms on the same traffic."""
    probes: ScopeProbes | None = None
    """Probe cases for this scope instead of quality.probes' (which must be set)."""


class Takeover(ApiModel):
    """A Service clients already use, re-pointed at the routers once they are ready and put back as it
    was when the pilot ends (its original selector and ports are recorded in status first)."""

    service: Name
    """The Service, in the pilot's namespace."""


class Router(ApiModel):
    """The per-pilot router that classifies requests into scopes and splits them between arms."""

    replicas: Annotated[int, Field(strict=True, ge=1, le=16)] = 2
    """Router replicas."""
    scope_header: HeaderName = SCOPE_HEADER
    """Request header that names a scope explicitly."""
    default_scope: Name | None = None
    """Scope for requests that match no scope; without it they go to the baseline and are not piloted."""
    request_timeout: Annotated[Duration, duration_within("1s", "1h")] = Duration("10m")
    """Upper bound on one proxied request."""
    image_pull_secrets: Annotated[list[Name], Field(max_length=16)] = []
    """Secrets in the pilot's namespace to pull the router's image with (the operator's --router-image);
    the rehearsal's load Jobs run that image too."""
    node_selector: Annotated[dict[str, Annotated[str, StringConstraints(max_length=63)]], Field(max_length=32)] = {}
    """Node labels the router pods (and the rehearsal's load Jobs) require."""
    tolerations: Annotated[list[Toleration], Field(max_length=32)] = []
    """Tolerations of the router pods (and the rehearsal's load Jobs)."""
    resources: Resources | None = None
    """Resources of a router container; by default it requests 100m CPU and 128Mi, limited to 512Mi."""
    takeover: Takeover | None = None
    """Serve through a Service clients already use (none: clients are pointed at `<pilot>-router`)."""
