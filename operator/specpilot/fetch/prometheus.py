"""Prometheus' HTTP query API, for `specpilot.metrics.promql`: the one other module of metrics that does I/O.

Each figure of a window is one instant query (``POST <url>/api/v1/query`` with query, time, timeout)
evaluated at the window's end, all of an arm's at once over the shared session. As with scraping,
nothing but cancellation leaves this module as an exception: a refused connection, a timeout, an
error status or a body that is no API response comes back as a `QueryFailure` with its reason.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit

import aiohttp

from specpilot.analysis.window import ArmEngine
from specpilot.api.common import endpoint
from specpilot.api.hosts import service_of
from specpilot.api.spec import PrometheusSource
from specpilot.fetch.scrape import MAX_BODY_BYTES, TooLarge, read_body
from specpilot.metrics.promql import (
    Answer,
    Matcher,
    QueryFailure,
    arm_engine,
    arm_matchers,
    engine_queries,
    parse_answer,
)
from specpilot.wire.names import MEASURED_ARMS, Arm

K = TypeVar("K")


@dataclass(frozen=True)
class PrometheusAuth:
    """Credentials for one Prometheus, sent only to URLs under `url` (a pilot names the URL it
    queries, so a token must never follow it elsewhere). The files are mounted into the operator's pod
    (it reads no Secrets) and read at each query, so rotated credentials are picked up."""

    url: str  # e.g. https://prometheus.monitoring.example:9091/
    token_file: str | None = None
    ca_file: str | None = None

    def covers(self, url: str) -> bool:
        """The same scheme, host (a Service in any of its qualified spellings) and port, and a path at or
        under this one."""
        mine, theirs = endpoint(self.url), endpoint(url)
        path, under = urlsplit(self.url).path.rstrip("/"), urlsplit(url).path.rstrip("/")
        return (
            mine is not None
            and theirs is not None
            and _same(mine, theirs)
            and (under == path or under.startswith(f"{path}/"))
        )

    def headers(self) -> dict[str, str]:
        if self.token_file is None:
            return {}
        return {"Authorization": f"Bearer {Path(self.token_file).read_text().strip()}"}

    def ssl(self) -> ssl.SSLContext | None:
        return ssl.create_default_context(cafile=self.ca_file) if self.ca_file is not None else None


def _same(a: tuple[str, str, int], b: tuple[str, str, int]) -> bool:
    """The same endpoint: `prometheus.monitoring` is `prometheus.monitoring.svc` (pilots' URLs are called so)."""
    (scheme, host, port), (their_scheme, their_host, their_port) = a, b
    service = service_of(host, None)
    same_host = host == their_host or (service is not None and service == service_of(their_host, None))
    return scheme == their_scheme and port == their_port and same_host


_ERRORS = (aiohttp.ClientError, OSError, TimeoutError, ValueError)
_SLACK_S = 1.0  # the client waits a little past the server's own query timeout, to hear its error


async def query(
    session: aiohttp.ClientSession,
    url: str,
    promql: str,
    *,
    at: datetime,
    timeout_s: float,
    auth: PrometheusAuth | None = None,
) -> Answer:
    """One instant query at `at` against the server at `url` (its base URL, without /api/v1), POSTed as a
    form so that long selectors need no long URL; with `auth`'s credentials where it covers `url`."""
    endpoint = f"{url.rstrip('/')}/api/v1/query"
    form = {"query": promql, "time": f"{at.timestamp():.3f}", "timeout": f"{timeout_s:g}s"}
    covered = auth is not None and auth.covers(url)
    try:
        headers = {"Accept": "application/json", **(auth.headers() if auth is not None and covered else {})}
        context = auth.ssl() if auth is not None and covered else None
        async with session.post(
            endpoint,
            data=form,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=timeout_s + _SLACK_S),
            allow_redirects=False,
            ssl=context if context is not None else True,
        ) as response:
            body = await read_body(response)
            status = response.status
    except TooLarge:
        return QueryFailure(f"POST {endpoint}: body over {MAX_BODY_BYTES} bytes")
    except _ERRORS as exc:  # also an unreadable token or CA file (OSError)
        if isinstance(exc, TimeoutError):
            return QueryFailure(f"POST {endpoint}: no answer within {timeout_s + _SLACK_S:g}s")
        return QueryFailure(f"POST {endpoint}: {exc.__class__.__name__}: {exc}")
    try:
        decoded = json.loads(body)
    except ValueError:
        return QueryFailure(f"POST {endpoint}: HTTP {status}, not JSON")
    answer = parse_answer(decoded)
    if isinstance(answer, QueryFailure):
        return QueryFailure(f"POST {endpoint}: HTTP {status}, {answer.reason}")
    return answer


async def query_all(
    session: aiohttp.ClientSession,
    url: str,
    queries: Mapping[K, str],
    *,
    at: datetime,
    timeout_s: float,
    auth: PrometheusAuth | None = None,
) -> dict[K, Answer]:
    """Every query at `at`, concurrently, by key."""
    keys = list(queries)
    answers = await asyncio.gather(
        *(query(session, url, queries[k], at=at, timeout_s=timeout_s, auth=auth) for k in keys)
    )
    return dict(zip(keys, answers, strict=True))


async def arm_engines(
    session: aiohttp.ClientSession,
    source: PrometheusSource,
    *,
    namespace: str,
    pilot: str,
    window: timedelta,
    step: timedelta,
    quantile: float,
    end: datetime,
    auth: PrometheusAuth | None = None,
) -> dict[Arm, ArmEngine]:
    """The measured arms' engine figures over the window ending at `end`, from the source's Prometheus
    (an arm the source's labels do not name is left out)."""
    timeout_s = source.timeout.total_seconds()
    matched = {arm: arm_matchers(source, namespace=namespace, pilot=pilot, arm=arm) for arm in MEASURED_ARMS}

    async def one(arm: Arm, matchers: tuple[Matcher, ...]) -> ArmEngine:
        queries = engine_queries(matchers, window=window, step=step, pod_label=source.pod_label)
        answers = await query_all(session, source.url, queries, at=end, timeout_s=timeout_s, auth=auth)
        return arm_engine(
            answers,
            start=end - window,
            quantile=quantile,
            speculative=arm is Arm.SPECULATIVE,
            pod_label=source.pod_label,
            arm=arm.value,
        )

    arms = [(arm, matchers) for arm, matchers in matched.items() if matchers is not None]
    found = await asyncio.gather(*(one(arm, matchers) for arm, matchers in arms))
    return {arm: engine for (arm, _), engine in zip(arms, found, strict=True)}
