"""I/O of `specpilot.metrics`: engine ``/metrics`` and the router's ``/samples`` (and, beside it,
`specpilot.fetch.prometheus` for a Prometheus server's query API).

Scraping 1,000 engine pods every 10 s must stay cheap, so every scrape goes through one shared
`aiohttp.ClientSession` (`scrape_session`) whose connector keeps a few connections per pod alive
between cycles; expositions are asked for as gzip-compressed classic text, and only the wanted
families are parsed. `scrape_all` runs one cycle's scrapes concurrently under a bound.

Nothing but cancellation leaves this module as an exception: a refused connection, a timeout, a
non-200 answer, a cut-off or oversized body, or a page that does not parse comes back as a
`ScrapeFailure` or `ReadFailure` with its reason; a garbage exposition comes back parsed, with
its problems in the `Exposition`.
"""

from __future__ import annotations

import asyncio
import json
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

import aiohttp

from specpilot.fetch.bodies import MAX_BODY_BYTES, TooLarge, read_body
from specpilot.fetch.outbound import REFUSING, Addresses, outbound_session
from specpilot.metrics.engine_window import EngineScrape, Scrape, ScrapeFailure
from specpilot.metrics.exposition import parse_exposition
from specpilot.wire.samples import SamplesPage

# Classic text (never OpenMetrics, whose counters and EOF differ), gzip-compressed when the server can.
_METRICS_HEADERS = {"Accept": "text/plain;version=0.0.4;q=1,*/*;q=0.1", "Accept-Encoding": "gzip"}
_ERRORS = (aiohttp.ClientError, OSError, TimeoutError, ValueError)


@dataclass(frozen=True, slots=True)
class ScrapeTarget:
    """An engine pod and the URL of its ``/metrics``."""

    pod: str
    url: str


@dataclass(frozen=True, slots=True)
class ReadFailure:
    """A ``/samples`` read that produced no page."""

    reason: str


class _BadEncoding(Exception):
    pass


def scrape_session(
    *, addresses: Addresses = REFUSING, limit: int = 100, limit_per_host: int = 2, keepalive_s: float = 30.0
) -> aiohttp.ClientSession:
    """The session to share between all scrapes and reads (an `outbound_session`: it follows no redirect
    and connects to no address `addresses` refuses); create it in the running loop, close it at exit.

    `keepalive_s` should outlast the scrape interval so connections are reused from one cycle to
    the next (where the server keeps them: vLLM's uvicorn closes idle ones after 5 s by default).
    """
    return outbound_session(addresses=addresses, limit=limit, limit_per_host=limit_per_host, keepalive_s=keepalive_s)


async def scrape(
    session: aiohttp.ClientSession, target: ScrapeTarget, *, families: Sequence[str], timeout_s: float, at: datetime
) -> Scrape:
    """One pod's exposition, parsed for `families`, stamped `at` (its cycle's time)."""
    try:
        async with session.get(
            target.url,
            headers=_METRICS_HEADERS,
            timeout=aiohttp.ClientTimeout(total=timeout_s),
            allow_redirects=False,
            auto_decompress=False,  # gunzipped below, where a cut-off stream can be told from a whole one
        ) as response:
            if response.status != 200:
                return ScrapeFailure(at=at, pod=target.pod, reason=f"GET {target.url}: HTTP {response.status}")
            body = _decoded(await read_body(response), response.headers.get("Content-Encoding", "identity"))
    except TooLarge:
        return ScrapeFailure(at=at, pod=target.pod, reason=f"GET {target.url}: body over {MAX_BODY_BYTES} bytes")
    except _BadEncoding as exc:
        return ScrapeFailure(at=at, pod=target.pod, reason=f"GET {target.url}: {exc}")
    except _ERRORS as exc:
        return ScrapeFailure(at=at, pod=target.pod, reason=_reason(target.url, exc, timeout_s))
    return EngineScrape(at=at, pod=target.pod, exposition=parse_exposition(body, families))


async def scrape_all(
    session: aiohttp.ClientSession,
    targets: Iterable[ScrapeTarget],
    *,
    families: Sequence[str],
    timeout_s: float,
    at: datetime,
    concurrency: int = 64,
) -> list[Scrape]:
    """One scrape cycle: every target, at most `concurrency` at a time, results in the targets' order."""
    gate = asyncio.Semaphore(concurrency)

    async def one(target: ScrapeTarget) -> Scrape:
        async with gate:
            return await scrape(session, target, families=families, timeout_s=timeout_s, at=at)

    return list(await asyncio.gather(*(one(target) for target in targets)))


async def read_samples(
    session: aiohttp.ClientSession, admin_url: str, *, cursor: int, limit: int, timeout_s: float
) -> SamplesPage | ReadFailure:
    """The router's samples after `cursor` (``GET <admin_url>/samples?since=&limit=``).

    The router serves at most 10,000 per page; ask for no more, so a full page can be told apart.
    """
    url = f"{admin_url.rstrip('/')}/samples"
    try:
        async with session.get(
            url,
            params={"since": str(cursor), "limit": str(limit)},
            timeout=aiohttp.ClientTimeout(total=timeout_s),
            allow_redirects=False,
        ) as response:
            if response.status != 200:
                return ReadFailure(f"GET {url}: HTTP {response.status}")
            body = await read_body(response)
    except TooLarge:
        return ReadFailure(f"GET {url}: body over {MAX_BODY_BYTES} bytes")
    except _ERRORS as exc:
        return ReadFailure(_reason(url, exc, timeout_s))
    try:
        return SamplesPage.from_json(json.loads(body))
    except ValueError as exc:  # not JSON, not UTF-8, or not a page
        return ReadFailure(f"GET {url}: not a samples page: {exc}")


def _decoded(body: bytes, encoding: str) -> bytes:
    """The body gunzipped if it came gzipped: a stream without its end is cut off, never taken as whole."""
    if encoding.lower() in ("identity", ""):
        return body
    if encoding.lower() != "gzip":
        raise _BadEncoding(f"Content-Encoding {encoding!r}, though only gzip was accepted")
    inflate = zlib.decompressobj(wbits=zlib.MAX_WBITS | 16)
    try:
        out = inflate.decompress(body, MAX_BODY_BYTES + 1)
    except zlib.error as exc:
        raise _BadEncoding(f"gzip body does not inflate ({exc})") from None
    if len(out) > MAX_BODY_BYTES:
        raise TooLarge(MAX_BODY_BYTES)
    if not inflate.eof:
        raise _BadEncoding("gzip body cut off before its end")
    if inflate.unused_data:
        raise _BadEncoding("data after the end of the gzip body")
    return out


def _reason(url: str, exc: Exception, timeout_s: float) -> str:
    if isinstance(exc, TimeoutError):
        return f"GET {url}: no answer within {timeout_s:g}s"
    if isinstance(exc, aiohttp.ClientPayloadError):
        return f"GET {url}: body cut off ({exc})"
    return f"GET {url}: {exc.__class__.__name__}: {exc}"
