"""Webhooks' credentials: a header whose value the operator reads from a Secret in the pilot's namespace as
it makes the call (`spec.SecretHeader`), so that no credential sits in a URL or in the spec, and a rotated
value is sent from the next call on.

The operator reads only the Secrets its installer lets it (the chart's `rbac.webhookSecrets`, granted by
name); any other is unreadable, and the call is not made. A value read never leaves as text: it goes into
the header, and into the list of values `fetch.outbound.scrub` takes out of a failed call's reason.
"""

from __future__ import annotations

import base64
import binascii
from typing import Protocol

from specpilot.api.spec import SecretHeader
from specpilot.controller.kube import ApiError
from specpilot.controller.ports import KubeApi


class SecretUnreadable(Exception):
    """A secret header's value the operator could not read: the call is not made. Its message names the
    Secret and key, never a value."""


class HeaderValues(Protocol):
    """A secret header's value, read as a call is made."""

    async def __call__(self, header: SecretHeader) -> str: ...


async def no_secrets(header: SecretHeader) -> str:
    """For callers given no way to read Secrets: every secret header is unreadable."""
    raise SecretUnreadable(f"Secret {header.secret_key_ref.name}: the operator reads no Secret here")


class KubeSecretValues:
    """Secret headers' values from the Secrets of one namespace, read through the API server at each call."""

    def __init__(self, kube: KubeApi, namespace: str) -> None:
        self._kube = kube
        self._namespace = namespace

    async def __call__(self, header: SecretHeader) -> str:
        ref = header.secret_key_ref
        where = f"Secret {self._namespace}/{ref.name}"
        try:
            found = await self._kube.get("v1", "Secret", self._namespace, ref.name)
        except ApiError as error:
            raise SecretUnreadable(
                f"{where} unreadable (HTTP {error.code}): the operator reads only the Secrets its installer "
                "lists (the chart's rbac.webhookSecrets)"
            ) from None
        encoded = ((found or {}).get("data") or {}).get(ref.key)
        if found is None or not isinstance(encoded, str):
            raise SecretUnreadable(f"{where} has no key {ref.key}" if found is not None else f"{where} not found")
        try:
            value = base64.b64decode(encoded, validate=True).decode().strip()
        except (binascii.Error, UnicodeDecodeError):
            raise SecretUnreadable(f"{where} key {ref.key} is not UTF-8 text") from None
        if not value or "\n" in value or "\r" in value:
            raise SecretUnreadable(f"{where} key {ref.key} is empty or holds a line break, which no header value may")
        return value


async def secret_headers(header: SecretHeader | None, values: HeaderValues) -> tuple[dict[str, str], tuple[str, ...]]:
    """The headers a call sends for `header`, and the secret values among them (for `scrub`)."""
    if header is None:
        return {}, ()
    value = await values(header)
    return {header.name: value}, (value,)
