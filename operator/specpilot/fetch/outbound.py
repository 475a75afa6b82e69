"""The HTTP session for every call the operator makes on a pilot's behalf: webhooks, score webhooks and
probes, a Prometheus, engine scrapes and the routers' admin port.

A pilot names its webhooks' and Prometheus' URLs and runs the engine pods that probes and scrapes reach,
so the server at any of them may answer with a redirect to a host the operator's policy never allowed
(the cloud's metadata address, the API server, another team's Service). Policy is checked on the URLs a
spec names, so no call follows a redirect: the session refuses every 3xx answer by raising
`RedirectRefused`, a `Refused` (an `aiohttp.ClientError`, which callers already turn into a failed
call) whose message names where the redirect pointed.

A name the policy allows may still resolve to an address it never would (a Service of type ExternalName
in the pilot's namespace, a DNS record): the session's resolver drops link-local and metadata addresses
(`api.hosts.never_called`), and a request to one written as an address is refused before it is sent
(`AddressRefused`).
"""

from __future__ import annotations

import socket

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.client import DEFAULT_TIMEOUT
from yarl import URL

from specpilot.api.hosts import never_called

LOCATION_SHOWN = 200  # characters of a refused redirect's target kept in its message


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


class AddressRefused(Refused):
    """A link-local or metadata address, which the operator never calls."""

    def __init__(self, host: str, addresses: list[str]) -> None:
        super().__init__(host, addresses)
        self.host = host
        self.addresses = addresses

    def __str__(self) -> str:
        found = "" if self.addresses == [self.host] else f" (resolved to {', '.join(self.addresses)})"
        return f"{self.host}{found} refused: the operator never calls link-local or cloud metadata addresses"


class GuardedResolver(AbstractResolver):
    """aiohttp's resolver, without the addresses the operator never calls."""

    def __init__(self) -> None:
        self._resolver = aiohttp.DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        found = await self._resolver.resolve(host, port, family)
        kept = [answer for answer in found if not never_called(answer["host"])]
        if not kept:
            raise AddressRefused(host, [answer["host"] for answer in found])
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


async def guard(request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType) -> aiohttp.ClientResponse:
    """The session's middleware: every request and answer passes through here, before aiohttp would
    follow a redirect."""
    host = request.url.raw_host or ""
    if never_called(host):
        raise AddressRefused(host, [host])
    response = await handler(request)
    if 300 <= response.status < 400:
        refused = RedirectRefused(response.status, _target(response))
        response.close()  # its body is never read, so its connection is not reused
        raise refused
    return response


def outbound_session(
    *,
    timeout: aiohttp.ClientTimeout = DEFAULT_TIMEOUT,
    limit: int = 100,
    limit_per_host: int = 0,
    keepalive_s: float = 15.0,
) -> aiohttp.ClientSession:
    """A session that follows no redirect, calls no link-local address and keeps no cookies; create it in
    the running loop, close it at exit. The connector's limits are aiohttp's unless given."""
    connector = aiohttp.TCPConnector(
        resolver=GuardedResolver(), limit=limit, limit_per_host=limit_per_host, keepalive_timeout=keepalive_s
    )
    return aiohttp.ClientSession(
        timeout=timeout, connector=connector, cookie_jar=aiohttp.DummyCookieJar(), middlewares=(guard,)
    )
