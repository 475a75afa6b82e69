"""The HTTP session for every call the operator makes on a pilot's behalf: webhooks, score webhooks and
probes, a Prometheus, engine scrapes and the routers' admin port.

A pilot names its webhooks' and Prometheus' URLs and runs the engine pods that probes and scrapes reach,
so the server at any of them may answer with a redirect to a host the operator's policy never allowed
(the cloud's metadata address, the API server, another team's Service). Policy is checked on the URLs a
spec names, so no call follows a redirect: the session refuses every 3xx answer by raising
`RedirectRefused`, an `aiohttp.ClientError` that callers already turn into a failed call, and its
message names where the redirect pointed.
"""

from __future__ import annotations

import aiohttp
from aiohttp.client import DEFAULT_TIMEOUT
from yarl import URL

LOCATION_SHOWN = 200  # characters of a refused redirect's target kept in its message


class RedirectRefused(aiohttp.ClientError):
    """A 3xx answer, which the operator never follows."""

    def __init__(self, status: int, location: str) -> None:
        super().__init__(status, location)
        self.status = status
        self.location = location

    def __str__(self) -> str:
        return f"HTTP {self.status}: redirect to {self.location} refused (the operator follows no redirect)"


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


async def refuse_redirects(
    request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
) -> aiohttp.ClientResponse:
    """The session's middleware: every answer passes through here before aiohttp would follow it."""
    response = await handler(request)
    if 300 <= response.status < 400:
        refused = RedirectRefused(response.status, _target(response))
        response.close()  # its body is never read, so its connection is not reused
        raise refused
    return response


def outbound_session(
    *, timeout: aiohttp.ClientTimeout | None = None, connector: aiohttp.BaseConnector | None = None
) -> aiohttp.ClientSession:
    """A session that follows no redirect and keeps no cookies; create it in the running loop, close it at exit."""
    return aiohttp.ClientSession(
        timeout=timeout if timeout is not None else DEFAULT_TIMEOUT,
        connector=connector,
        cookie_jar=aiohttp.DummyCookieJar(),
        middlewares=(refuse_redirects,),
    )
