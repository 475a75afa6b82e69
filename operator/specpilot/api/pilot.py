"""The SpeculationPilot resource: its identity in the API and the whole object as one model."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from specpilot.api.common import ApiModel, Rule
from specpilot.api.spec.pilot_spec import SpeculationPilotSpec
from specpilot.api.status.pilot_status import SpeculationPilotStatus
from specpilot.wire.names import REHEARSAL_SUFFIX

GROUP = "specpilot.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "SpeculationPilot"
PLURAL = "speculationpilots"
SINGULAR = "speculationpilot"
SHORT_NAMES = ("sp", "spilot")
CATEGORIES = ("specpilot",)

# The pilot's name prefixes the names of the objects it owns (e.g. `<name>-alternative`, a Service
# name, which must be an RFC 1035 label of at most 63 characters).
NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
NAME_MAX_LENGTH = 40
NAME_RULE = Rule(
    cel=f"self.metadata.name.size() <= {NAME_MAX_LENGTH} && self.metadata.name.matches('{NAME_PATTERN}')",
    message=f"must be an RFC 1035 label of at most {NAME_MAX_LENGTH} characters: it prefixes "
    "the names of the Services and Deployments the pilot owns",
    field_path=".metadata.name",
)
NAME_LEAVES_REHEARSAL = Rule(
    cel=f"!self.metadata.name.endsWith('{REHEARSAL_SUFFIX}')",
    message=f"must not end in {REHEARSAL_SUFFIX}: the peak rehearsal of the pilot named without it gives its "
    "router, table and Services those names",
    field_path=".metadata.name",
)


# Manual actions, as annotations on the pilot; the operator acts once and removes the annotation.
PROMOTE_ANNOTATION = f"{GROUP}/promote"  # value: a scope name; it moves to its next stage now
ABORT_ANNOTATION = f"{GROUP}/abort"  # value: a scope name, or "*" for every scope: back to ordinary decoding
RESUME_ANNOTATION = f"{GROUP}/resume"  # value: a rolled-back scope's name; it pilots again from its first stage
ALL_SCOPES = "*"
# Any value: state the decision now from the evidence so far, before every scope has settled. It
# stays until removed; the decision is then restated as the evidence grows.
DECIDE_ANNOTATION = f"{GROUP}/decide"
# Any value: run the peak rehearsal now (again, once one ended), on the scopes the speculative arm serves.
REHEARSE_ANNOTATION = f"{GROUP}/rehearse"
# Every annotation an SRE sets for the operator: GitOps tools leave them to the operator.
ACTION_ANNOTATIONS = (PROMOTE_ANNOTATION, ABORT_ANNOTATION, RESUME_ANNOTATION, DECIDE_ANNOTATION, REHEARSE_ANNOTATION)
# Set by `kubectl specpilot follow-up` on the pilot it writes: the name of the pilot this one follows.
FOLLOWS_ANNOTATION = f"{GROUP}/follows"


class SpeculationPilot(ApiModel):
    """A SpeculationPilot object as stored by the API server."""

    api_version: Literal["specpilot.io/v1alpha1"]
    kind: Literal["SpeculationPilot"]
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: SpeculationPilotSpec
    status: SpeculationPilotStatus | None = None
