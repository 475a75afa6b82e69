"""Where the API server is and how to authenticate to it, for the two programs that call it.

The operator and the router each talk to the API server through a small aiohttp client of their
own; both take credentials from the `kubernetes` package's config loaders (in-cluster, else
KUBECONFIG), here. This is the one module besides `specpilot.wire` that the router shares.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass

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
        value = cfg.auth_settings().get("BearerToken", {}).get("value")  # refreshes expiring tokens
        return str(value) if value else None

    return KubeAccess(server=str(cfg.host).rstrip("/"), ssl=context, token=token)
