"""The Prometheus endpoints the operator holds credentials for, in the shapes of Prometheus' own
`http_config`: `authorization`, `basic_auth`, `tls_config` (a CA, a client certificate for mTLS) and
`http_headers` (a tenant for Thanos, Mimir or Cortex: `X-Scope-OrgID`).

The credentials stay with the operator: an installer mounts them from Secrets into its pod and lists the
endpoints in a file (`--prometheus-endpoints`); a pilot names an endpoint (`metricsSource.prometheus
.endpoint`) and never sees what it holds. Files are read again when they change, so rotated tokens and
certificates are picked up at the next query. No secret value leaves this module: a refused
configuration names the field, never its value, and `fetch.outbound.scrub` takes the values out of a failure's reason
before it reaches status, an Event or a log.

    endpoints:
    - name: mimir
      url: https://mimir-gateway.monitoring:8080/prometheus
      authorization: {credentials_file: /etc/specpilot/prometheus/mimir/token}
      tls_config: {ca_file: .../ca.crt, cert_file: .../tls.crt, key_file: .../tls.key}
      http_headers: {X-Scope-OrgID: {values: [team-a]}}
"""

from __future__ import annotations

import base64
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, StringConstraints, ValidationError, model_validator

from specpilot.api.common import endpoint
from specpilot.api.hosts import service_of
from specpilot.api.spec import PrometheusSource

_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Authorization(_Config):
    """The Authorization header: `<type> <credentials>`."""

    type: Annotated[str, StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9-]*$")] = "Bearer"
    credentials: SecretStr | None = None
    credentials_file: str | None = None

    @model_validator(mode="after")
    def _one(self) -> Authorization:
        if (self.credentials is None) == (self.credentials_file is None):
            raise ValueError("set exactly one of credentials and credentials_file")
        return self


class BasicAuth(_Config):
    """HTTP basic authentication."""

    username: str | None = None
    username_file: str | None = None
    password: SecretStr | None = None
    password_file: str | None = None

    @model_validator(mode="after")
    def _given(self) -> BasicAuth:
        if (self.username is None) == (self.username_file is None):
            raise ValueError("set exactly one of username and username_file")
        if self.password is not None and self.password_file is not None:
            raise ValueError("set at most one of password and password_file")
        return self


class TlsConfig(_Config):
    """How the server is verified, and the client certificate it may demand."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    server_name: str | None = None
    insecure_skip_verify: bool = False

    @model_validator(mode="after")
    def _pair(self) -> TlsConfig:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("set cert_file and key_file together")
        return self


class Header(_Config):
    """One header's values: plain, secret, or read from files."""

    values: list[str] = []
    secrets: list[SecretStr] = []
    files: list[str] = []


class PrometheusEndpoint(_Config):
    """One Prometheus, by name, and what the operator sends it. Its credentials go to URLs under `url`
    only (`covers`)."""

    name: Annotated[str, StringConstraints(pattern=_NAME, max_length=63)]
    url: Annotated[str, StringConstraints(pattern=r"^https?://[^\s/?#]+(/[^\s?#]*)?$", max_length=2048)]
    authorization: Authorization | None = None
    basic_auth: BasicAuth | None = None
    tls_config: TlsConfig | None = None
    http_headers: dict[Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9-]+$")], Header] = {}

    @model_validator(mode="after")
    def _one_scheme(self) -> PrometheusEndpoint:
        if self.authorization is not None and self.basic_auth is not None:
            raise ValueError("set at most one of authorization and basic_auth")
        if {name.lower() for name in self.http_headers} & {"authorization", "host", "content-type"}:
            raise ValueError("http_headers may not set Authorization, Host or Content-Type")
        return self

    @classmethod
    def bearer(cls, url: str, token_file: str | None = None, ca_file: str | None = None) -> PrometheusEndpoint:
        """The endpoint of the operator's --prometheus-auth-url flags: a token file and a CA bundle."""
        return cls(
            name="default",
            url=url,
            authorization=Authorization(credentials_file=token_file) if token_file is not None else None,
            tls_config=TlsConfig(ca_file=ca_file) if ca_file is not None else None,
        )

    def covers(self, url: str) -> bool:
        """The same scheme, host (a Service in any of its qualified spellings) and port, and a path at or
        under this one's."""
        mine, theirs = endpoint(self.url), endpoint(url)
        path, under = urlsplit(self.url).path.rstrip("/"), urlsplit(url).path.rstrip("/")
        return (
            mine is not None
            and theirs is not None
            and _same(mine, theirs)
            and (under == path or under.startswith(f"{path}/"))
        )

    def headers(self) -> tuple[dict[str, str], tuple[str, ...]]:
        """The headers to send, read now, and the secret values among them (for `scrub`)."""
        headers: dict[str, str] = {}
        secrets: list[str] = []
        if self.authorization is not None:
            token = _value(self.authorization.credentials, self.authorization.credentials_file)
            headers["Authorization"] = f"{self.authorization.type} {token}"
            secrets.append(token)
        if self.basic_auth is not None:
            basic = self.basic_auth
            user = _value(basic.username, basic.username_file)
            password = _value(basic.password, basic.password_file) if basic.password or basic.password_file else ""
            encoded = base64.b64encode(f"{user}:{password}".encode()).decode()
            headers["Authorization"] = f"Basic {encoded}"
            secrets += [encoded, *([password] if password else [])]
        for name, header in self.http_headers.items():
            hidden = [*(secret.get_secret_value() for secret in header.secrets), *map(_read, header.files)]
            headers[name] = ", ".join([*header.values, *hidden])
            secrets += hidden
        return headers, tuple(secret for secret in secrets if secret)

    @property
    def server_name(self) -> str | None:
        """The name its certificate is checked against, where it is not the URL's host."""
        return self.tls_config.server_name if self.tls_config is not None else None

    def ssl(self) -> ssl.SSLContext | None:
        """The TLS context to call it with (None: the default), loaded again when a file changed."""
        return _CONTEXTS.get(self.tls_config) if self.tls_config is not None else None


def _value(inline: SecretStr | str | None, file: str | None) -> str:
    if isinstance(inline, SecretStr):
        return inline.get_secret_value()
    return inline if inline is not None else _read(file or "")


def _read(file: str) -> str:
    return Path(file).read_text().strip()


def _same(a: tuple[str, str, int], b: tuple[str, str, int]) -> bool:
    """The same endpoint: `prometheus.monitoring` is `prometheus.monitoring.svc` (pilots' URLs are called so)."""
    (scheme, host, port), (their_scheme, their_host, their_port) = a, b
    service = service_of(host, None)
    same_host = host == their_host or (service is not None and service == service_of(their_host, None))
    return scheme == their_scheme and port == their_port and same_host


class _Contexts:
    """TLS contexts by configuration, kept while their files stay as they were (size and mtime), so a
    rotated certificate is loaded at the next query and an unchanged one is not loaded at every query."""

    def __init__(self) -> None:
        self._made: dict[TlsConfig, tuple[tuple[tuple[int, int], ...], ssl.SSLContext]] = {}

    def get(self, tls: TlsConfig) -> ssl.SSLContext:
        files = [file for file in (tls.ca_file, tls.cert_file, tls.key_file) if file is not None]
        stamp = tuple((st.st_mtime_ns, st.st_size) for st in (os.stat(file) for file in files))
        made = self._made.get(tls)
        if made is not None and made[0] == stamp:
            return made[1]
        context = ssl.create_default_context(cafile=tls.ca_file)
        if tls.insecure_skip_verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if tls.cert_file is not None and tls.key_file is not None:
            context.load_cert_chain(tls.cert_file, tls.key_file)
        self._made[tls] = (stamp, context)
        return context


_CONTEXTS = _Contexts()


class _File(_Config):
    endpoints: Annotated[list[PrometheusEndpoint], Field(max_length=64)] = []


def parse_endpoints(doc: Any, *, origin: str = "the endpoints") -> dict[str, PrometheusEndpoint]:
    """The endpoints of a configuration document, by name; a ValueError naming the fields at fault (never
    their values) when it is not one."""
    try:
        parsed = _File.model_validate(doc if doc is not None else {})
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in item['loc']) or '(top)'}: {item['msg']}"
            for item in error.errors(include_input=False, include_url=False)
        )
        raise ValueError(f"{origin}: {problems}") from None
    named: dict[str, PrometheusEndpoint] = {}
    for item in parsed.endpoints:
        if item.name in named:
            raise ValueError(f"{origin}: endpoint {item.name!r} is named twice")
        named[item.name] = item
    return named


def load_endpoints(path: str) -> dict[str, PrometheusEndpoint]:
    """The endpoints listed in the YAML file at `path`."""
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as error:
        raise ValueError(f"{path}: {error.__class__.__name__}, not a readable YAML file") from None
    return parse_endpoints(doc, origin=path)


@dataclass(frozen=True)
class PrometheusCredentials:
    """What the operator holds for Prometheus: endpoints by name, and the one of its --prometheus-auth-url
    flags, whose credentials go to the pilots' URLs it covers."""

    named: Mapping[str, PrometheusEndpoint] = field(default_factory=dict)
    flags: PrometheusEndpoint | None = None

    def target(self, source: PrometheusSource) -> tuple[str, PrometheusEndpoint | None] | None:
        """The URL to query for `source`, and the credentials to query it with; None for an endpoint the
        operator does not hold."""
        if source.endpoint is not None:
            held = self.named.get(source.endpoint)
            return (held.url, held) if held is not None else None
        assert source.url is not None, "a source names a url or an endpoint"
        return source.url, self.flags
