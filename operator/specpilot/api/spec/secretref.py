"""Values read from Secrets: a Secret's key, and the header a call sends it in."""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, StringConstraints

from specpilot.api.common import ApiModel, Rule, cel

RESERVED_HEADERS = ("host", "content-type", "content-length", "transfer-encoding", "connection")
HEADER_NOT_RESERVED = Rule(
    cel=f"!(self.name.lowerAscii() in {list(RESERVED_HEADERS)})",
    message=f"the operator sets {', '.join(RESERVED_HEADERS)} itself: name another header, e.g. Authorization",
    reason="FieldValueForbidden",
    field_path=".name",
)


class SecretKeySelector(ApiModel):
    """A key of a Secret in the pilot's namespace."""

    name: Annotated[str, StringConstraints(min_length=1, max_length=253)]
    """Name of the Secret."""
    key: Annotated[str, StringConstraints(pattern=r"^[-._a-zA-Z0-9]+$", max_length=253)]
    """Key within the Secret."""


class SecretHeader(ApiModel):
    """A header sent with each call, its value read from a Secret in the pilot's namespace as the call is
    made (a rotated value is sent from the next call on). The value never appears in status, Events or
    the operator's logs. The operator reads the Secret itself, so its installer must let it: the chart's
    rbac.webhookSecrets lists the Secrets' names."""

    model_config = ConfigDict(json_schema_extra=cel(HEADER_NOT_RESERVED))

    name: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9-]+$", max_length=64)] = "Authorization"
    """The header's name; its value is the Secret's value whole (for Authorization: `Bearer <token>`)."""
    secret_key_ref: SecretKeySelector
    """The Secret and key that hold the header's value."""
