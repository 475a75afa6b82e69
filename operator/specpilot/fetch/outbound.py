"""The HTTP session for every call the operator makes on a pilot's behalf: webhooks, score webhooks and
probes, a Prometheus, engine scrapes and the routers' admin port.

A pilot names its webhooks' and Prometheus' URLs and runs the engine pods that probes and scrapes reach,
so the server at any of them may answer with a redirect to a host the operator's policy never allowed
(the cloud's metadata address, the API server, another team's Service). Policy is checked on the URLs a
spec names, so no call follows a redirect: the session refuses every 3xx answer by raising
`RedirectRefused`, a `Refused` (an `aiohttp.ClientError`, which callers already turn into a failed
call) whose message names where the redirect pointed.

A name the policy allows may still resolve to an address it never would (a Service of type ExternalName
in the pilot's namespace, a DNS record): every call is judged on the address it connects to, after
resolution, whatever name led there (`Addresses`). The session's resolver drops the addresses refused, and
a request to one written as an address is refused before it is sent (`AddressRefused`): link-local and
cloud metadata addresses always (`api.hosts.never_called`); loopback and the Kubernetes API server's
addresses unless the installer names them (`--allow-address`, for a cluster whose pods run on loopback).
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import quote, quote_plus

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.client import DEFAULT_TIMEOUT
from yarl import URL

from specpilot.api.hosts import never_ip, parsed_ip

LOCATION_SHOWN = 200  # characters of a refused redirect's target kept in its message
REDACTED = "<secret>"
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#\s@]*@")


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` without the userinfo of any URL in it and with every secret value sent (a header's value, a
    token) replaced: every reason the operator writes about a call it made (status, Events, logs) passes here."""
    spelled = {form for secret in secrets for form in (secret, quote(secret, safe=""), quote_plus(secret))}
    for secret in sorted(spelled, key=len, reverse=True):  # as sent, and as a URL would carry it
        text = text.replace(secret, REDACTED)
    return _USERINFO.sub(rf"\1{REDACTED}@", text)


class Refused(aiohttp.ClientError):
    """A call the session refused: its message says why."""


class RedirectRefused(Refused):
    """A 3xx answer, which the operator never follows."""

    def __init__(self, status: int, location: str) -> None:
        super().__init__(status, location)
        self.status = status
        self.location = location

    def __str__(self) -> str:
        return f"HTTP {self.status}: redirect to {self.location} refused (the operator follows no redirect)"


NEVER = "link-local or cloud metadata addresses"
LOOPBACK = "loopback addresses unless its installer names them (--allow-address)"
API_SERVER = "the Kubernetes API server's addresses unless its installer names them (--allow-address)"


@dataclass(frozen=True)
class Addresses:
    """Which addresses the operator connects to for a pilot: none link-local or metadata; no loopback (nor
    the unspecified address, which reaches it) and none of the API server's, but those in `allowed`."""

    api_server: frozenset[ipaddress.IPv4Address | ipaddress.IPv6Address] = frozenset()
    allowed: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()

    def refusal(self, address: str) -> str | None:
        """Which kind of address the operator never calls `address` is (None: it may call it, or it is
        no IP address)."""
        found = parsed_ip(address)
        if found is None:
            return None
        if never_ip(found):
            return NEVER
        if any(found in net for net in self.allowed):
            return None
        if found.is_loopback or found.is_unspecified:
            return LOOPBACK
        return API_SERVER if found in self.api_server else None


REFUSING = Addresses()  # the default: no loopback, no API server, no link-local or metadata address


class AddressRefused(Refused):
    """An address the operator never calls (`Addresses`)."""

    def __init__(self, host: str, addresses: list[str], why: str = NEVER) -> None:
        super().__init__(host, addresses)
        self.host = host
        self.addresses = addresses
        self.why = why

    def __str__(self) -> str:
        found = "" if self.addresses == [self.host] else f" (resolved to {', '.join(self.addresses)})"
        return f"{self.host}{found} refused: the operator never calls {self.why}"


class GuardedResolver(AbstractResolver):
    """aiohttp's resolver, without the addresses the operator never calls."""

    def __init__(self, addresses: Addresses) -> None:
        self._resolver = aiohttp.DefaultResolver()
        self._addresses = addresses

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        found = await self._resolver.resolve(host, port, family)
        refusals = [self._addresses.refusal(answer["host"]) for answer in found]
        kept = [answer for answer, refused in zip(found, refusals, strict=True) if refused is None]
        if not kept:
            why = next((refused for refused in refusals if refused is not None), NEVER)
            raise AddressRefused(host, [answer["host"] for answer in found], why)
        return kept

    async def close(self) -> None:
        await self._resolver.close()


def _target(response: aiohttp.ClientResponse) -> str:
    """Where a redirect points, resolved against the URL asked (a Location may be relative), cut short."""
    location = response.headers.get("Location")
    if not location:
        return "(no Location)"
    try:
        found = str(response.url.join(URL(location)))
    except ValueError:
        found = location
    return found if len(found) <= LOCATION_SHOWN else f"{found[:LOCATION_SHOWN]}..."


@dataclass(frozen=True)
class _Guard:
    """The session's middleware: every request and answer passes through here, before aiohttp would
    follow a redirect. An address written in the URL is judged here (aiohttp asks no resolver for one)."""

    addresses: Addresses

    async def __call__(
        self, request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
    ) -> aiohttp.ClientResponse:
        host = request.url.raw_host or ""
        why = self.addresses.refusal(host)
        if why is not None:
            raise AddressRefused(host, [host], why)
        response = await handler(request)
        if 300 <= response.status < 400:
            refused = RedirectRefused(response.status, _target(response))
            response.close()  # its body is never read, so its connection is not reused
            raise refused
        return response


def outbound_session(
    *,
    addresses: Addresses = REFUSING,
    timeout: aiohttp.ClientTimeout = DEFAULT_TIMEOUT,
    limit: int = 100,
    limit_per_host: int = 0,
    keepalive_s: float = 15.0,
) -> aiohttp.ClientSession:
    """A session that follows no redirect, connects to no address `addresses` refuses (by default: no
    loopback, link-local or metadata address) and keeps no cookies; create it in the running loop, close it
    at exit. The connector's limits are aiohttp's unless given."""
    connector = aiohttp.TCPConnector(
        resolver=GuardedResolver(addresses), limit=limit, limit_per_host=limit_per_host, keepalive_timeout=keepalive_s
    )
    return aiohttp.ClientSession(
        timeout=timeout, connector=connector, cookie_jar=aiohttp.DummyCookieJar(), middlewares=(_Guard(addresses),)
    )


LOOPBACK_NETWORKS = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))


def allowing_loopback() -> Addresses:
    """Addresses with loopback allowed: for a cluster whose pods and servers run on loopback (the project's
    local cluster, its tests), never a real one."""
    return Addresses(allowed=LOOPBACK_NETWORKS)
