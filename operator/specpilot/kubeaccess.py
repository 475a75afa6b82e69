"""Where the API server is and how to authenticate to it, for the two programs that call it.

The operator and the router each talk to the API server through a small aiohttp client of their
own, and the plugin through the `kubernetes` client; all take credentials from the `kubernetes`
package's config loaders (in-cluster, else KUBECONFIG), here, and keep them fresh as client-go does:
an exec plugin run again before its credential (a token or a client certificate) expires and after a
401 (once per failure, with backoff), a kubeconfig tokenFile read again every minute and after a 401.
This is the one module besides `specpilot.wire` that the router shares.
"""

from __future__ import annotations

import logging
import os
import random
import shlex
import ssl
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Protocol

from kubernetes import client, config
from kubernetes.config import kube_config

log = logging.getLogger("specpilot.kubeaccess")


# client-go re-reads a kubeconfig's tokenFile every minute; an exec plugin's credential is renewed
# before its expirationTimestamp: five minutes before, or at four fifths of a shorter life.
TOKEN_FILE_REREAD = timedelta(minutes=1)
EXPIRY_MARGIN = timedelta(minutes=5)
# After a 401 the credentials are loaded again at once, then no sooner than this, doubling up to the cap
# while 401s go on: once per failure, never a plugin run per request.
REJECTED_BACKOFF = (timedelta(seconds=1), timedelta(minutes=1))


@dataclass(frozen=True)
class Loaded:
    """Credentials as loaded once: the TLS context (with a client certificate, if any), the bearer token
    source, and when they are due to be loaded again."""

    config: client.Configuration
    ssl: ssl.SSLContext | bool
    at: datetime
    expiry: datetime | None = None  # an exec plugin's expirationTimestamp
    token_file: bool = False  # the user's token is a kubeconfig tokenFile


def renewal_at(loaded: Loaded) -> datetime | None:
    """When credentials loaded as `loaded` are to be loaded again: an exec plugin's before they expire,
    a tokenFile's after a minute; None when they do not expire."""
    due = [loaded.at + TOKEN_FILE_REREAD] if loaded.token_file else []
    if loaded.expiry is not None:
        due.append(loaded.expiry - min(EXPIRY_MARGIN, (loaded.expiry - loaded.at) / 5))
    return min(due, default=None)


def renewal_due(loaded: Loaded, now: datetime) -> bool:
    due = renewal_at(loaded)
    return due is not None and now >= due


class Credentials:
    """The credentials to call the API server with, renewed as they expire and after a 401: an exec
    plugin run again for a new client certificate or token, a tokenFile read again. Asked at each
    request (`ssl`, `token`); `rejected` after a 401."""

    def __init__(self, load: Callable[[], Loaded], clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self._load, self._clock = load, clock
        self._loaded = load()
        self._retry_at: datetime | None = None  # a 401 renews no sooner than this
        self._backoff = REJECTED_BACKOFF[0]

    def _current(self) -> Loaded:
        if renewal_due(self._loaded, self._clock()):
            self._renew()
        return self._loaded

    def _renew(self) -> None:
        try:
            self._loaded = self._load()
        except (NoCredential, config.ConfigException, OSError, ValueError, ssl.SSLError) as error:
            log.warning("renewing the API server credentials failed, keeping the current ones: %s", error)

    @property
    def server(self) -> str:
        return str(self._loaded.config.host).rstrip("/")

    def ssl(self) -> ssl.SSLContext | bool:
        return self._current().ssl

    def token(self) -> str | None:
        # For an exec plugin's or the in-cluster token, the loaders' own hook renews it as it expires (an
        # exec plugin from 5 minutes before its expirationTimestamp, the in-cluster token file after a
        # minute, well before a token the kubelet rotated stops working).
        value = self._current().config.auth_settings().get("BearerToken", {}).get("value")
        return str(value).strip() or None if value else None  # a tokenFile's newline: client-go trims it

    def current(self) -> tuple[client.Configuration, datetime | None]:
        """The configuration as it stands now, and when it is due to be renewed (for a client that keeps
        its own connection, as Kopf does: it logs in again then)."""
        loaded = self._current()
        return loaded.config, renewal_at(loaded)

    def rejected(self) -> None:
        """The API server answered 401: load the credentials again, at once the first time and then no
        sooner than a backoff that doubles while the 401s go on."""
        now = self._clock()
        if self._retry_at is not None and now < self._retry_at:
            return
        before = self._loaded
        self._renew()
        changed = _identity(self._loaded) != _identity(before)
        self._backoff = REJECTED_BACKOFF[0] if changed else min(2 * self._backoff, REJECTED_BACKOFF[1])
        self._retry_at = now + self._backoff


def _identity(loaded: Loaded) -> tuple[object, ...]:
    cfg = loaded.config
    return cfg.cert_file, cfg.key_file, cfg.api_key.get("BearerToken")


class CredentialSource(Protocol):
    def ssl(self) -> ssl.SSLContext | bool: ...
    def token(self) -> str | None: ...
    def rejected(self) -> None: ...


@dataclass(frozen=True)
class Fixed:
    """Credentials that never change (a test's, or a plain HTTP server's)."""

    context: ssl.SSLContext | bool = False
    bearer: Callable[[], str | None] = lambda: None

    def ssl(self) -> ssl.SSLContext | bool:
        return self.context

    def token(self) -> str | None:
        return self.bearer()

    def rejected(self) -> None:
        return None


@dataclass(frozen=True)
class KubeAccess:
    """The API server's base URL and the credentials to call it with."""

    server: str
    credentials: CredentialSource

    def ssl(self) -> ssl.SSLContext | bool:
        return self.credentials.ssl()

    def token(self) -> str | None:
        return self.credentials.token()

    def rejected(self) -> None:
        self.credentials.rejected()


def load_access(kubeconfig: str | None = None, context: str | None = None) -> KubeAccess:
    """Credentials from the in-cluster service account, else from `kubeconfig` (else KUBECONFIG, else
    ~/.kube/config), renewed as they expire."""
    try:
        config.load_incluster_config(client_configuration=client.Configuration())
    except config.ConfigException:
        path = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        credentials = kubeconfig_credentials(path, context)
    else:
        credentials = Credentials(_in_cluster)
    return KubeAccess(server=credentials.server, credentials=credentials)


def kubeconfig_credentials(path: str, context: str | None = None) -> Credentials:
    """Credentials from the kubeconfig at `path` (files joined by ':' merge, as KUBECONFIG's do), renewed
    as they expire."""
    return Credentials(lambda: _from_kubeconfig(path, context))


def _in_cluster() -> Loaded:
    cfg = client.Configuration()
    config.load_incluster_config(client_configuration=cfg)
    return Loaded(cfg, _context(cfg), datetime.now(UTC))


class NoCredential(Exception):
    """A kubeconfig user's exec plugin gave no credential. The loaders would go on without one; the API
    server is never called anonymously instead."""


def _from_kubeconfig(path: str, context: str | None) -> Loaded:
    """The kubeconfig loaded afresh: its exec plugin run, its tokenFile and certificate files read."""
    cfg = client.Configuration()
    loader = kube_config._get_kube_config_loader(filename=path, active_context=context, persist_config=False)
    errors: list[str] = []
    with _root_errors(errors):
        loader.load_and_set(cfg)
    user = loader._user or {}
    if "exec" in user and not (getattr(loader, "token", None) or getattr(loader, "cert_file", None)):
        raise NoCredential(_exec_failed(loader, errors))
    expiry = getattr(loader, "expiry", None) if "exec" in user else None
    if "exec" in user:
        cfg.refresh_api_key_hook = None  # renewed here (`renewal_at`), not also by the loader's own hook
    return Loaded(cfg, _context(cfg), datetime.now(UTC), expiry=expiry, token_file="tokenFile" in user)


@contextmanager
def _root_errors(errors: list[str]) -> Iterator[None]:
    """What the loaders log on the root logger while they load (an exec plugin's failure, which they
    swallow), kept in `errors` instead of printed, so that it reaches the error that stops the start."""

    def keep(record: logging.LogRecord) -> bool:
        errors.append(record.getMessage())
        return False

    root = logging.getLogger()
    quiet = logging.NullHandler()  # with no handler at all, logging.error would configure one of its own
    root.addFilter(keep)
    root.addHandler(quiet)
    try:
        yield
    finally:
        root.removeFilter(keep)
        root.removeHandler(quiet)


def _exec_failed(loader: kube_config.KubeConfigLoader, errors: list[str]) -> str:
    """Why no credential came, naming the kubeconfig user and the plugin's command, with the fix."""
    plugin = loader._user["exec"]
    command = shlex.join([str(plugin.safe_get("command") or ""), *(str(arg) for arg in plugin.safe_get("args") or ())])
    name = loader._current_context["context"].safe_get("user")
    why = "; ".join(errors) or "it printed neither a token nor a client certificate"
    return (
        f"kubeconfig user {name!r}: its exec credential plugin `{command}` gave no credential ({why}); the API "
        "server is never called without one: run that command by hand to see why it fails, and fix it"
    )


def _context(cfg: client.Configuration) -> ssl.SSLContext | bool:
    if not cfg.host.startswith("https:"):
        return False
    context = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
    if not cfg.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if cfg.cert_file:
        context.load_cert_chain(cfg.cert_file, cfg.key_file)
    return context


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
