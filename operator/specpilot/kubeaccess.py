"""Where the API server is and how to authenticate to it, for the two programs that call it.

The operator and the router each talk to the API server through a small aiohttp client of their
own; both take credentials from the `kubernetes` package's config loaders (in-cluster, else
KUBECONFIG), here. This is the one module besides `specpilot.wire` that the router shares.
"""

from __future__ import annotations

import random
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from kubernetes import client, config


@dataclass(frozen=True)
class KubeAccess:
    """The API server's base URL, the TLS context to reach it, and the bearer token (if any)."""

    server: str
    ssl: ssl.SSLContext | bool
    token: Callable[[], str | None]


def load_access() -> KubeAccess:
    """Credentials from the in-cluster service account, else from KUBECONFIG (or ~/.kube/config)."""
    cfg = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=cfg)
    except config.ConfigException:
        config.load_kube_config(client_configuration=cfg)
    context: ssl.SSLContext | bool = False
    if cfg.host.startswith("https:"):
        context = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
        if not cfg.verify_ssl:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if cfg.cert_file:
            context.load_cert_chain(cfg.cert_file, cfg.key_file)

    def token() -> str | None:
        # Asked at each request, the loaders renew what expires: an exec plugin runs again from 5
        # minutes before its token's expirationTimestamp, and the in-cluster token file is read again
        # after a minute, well before a token the kubelet rotated (at 80% of its life, 48 of 60
        # minutes by default) stops working. A client certificate is loaded once.
        value = cfg.auth_settings().get("BearerToken", {}).get("value")
        return str(value) if value else None

    return KubeAccess(server=str(cfg.host).rstrip("/"), ssl=context, token=token)


# How long to wait when the API server asks for no Retry-After, and the longest wait it may ask for.
RETRY_AFTER_DEFAULT = 1.0
RETRY_AFTER_MAX = 30.0


def retry_after(headers: Mapping[str, str], *, now: datetime | None = None) -> float:
    """Seconds the API server asked a client to wait with its 429 (or 503): `Retry-After` in seconds or
    as an HTTP date; the default when absent or unreadable, capped at `RETRY_AFTER_MAX`."""
    value = headers.get("Retry-After", "").strip()
    seconds = RETRY_AFTER_DEFAULT
    if value.isdigit():
        seconds = float(value)
    elif value:
        try:
            seconds = (parsedate_to_datetime(value) - (now or datetime.now(UTC))).total_seconds()
        except (TypeError, ValueError):
            seconds = RETRY_AFTER_DEFAULT
    return min(max(seconds, 0.0), RETRY_AFTER_MAX)


def jittered(delay: float, draw: Callable[[], float] = random.random) -> float:
    """A backoff delay spread over [delay / 2, delay], so that clients that failed together (an API
    server restart) do not come back together."""
    return delay * (0.5 + draw() / 2)
