"""Prometheus' HTTP query API, for `specpilot.metrics.promql`: the one other module of metrics that does I/O.

Each figure of a window is one instant query (``POST <url>/api/v1/query`` with query, time, timeout)
evaluated at the window's end, all of an arm's at once over the shared session. As with scraping,
nothing but cancellation leaves this module as an exception: a refused connection, a timeout, an
error status or a body that is no API response comes back as a `QueryFailure` with its reason.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import TypeVar

import aiohttp

from specpilot.analysis.window import ArmEngine
from specpilot.api.spec import PrometheusSource
from specpilot.fetch.bodies import MAX_BODY_BYTES, TooLarge, read_body
from specpilot.fetch.endpoints import PrometheusEndpoint
from specpilot.fetch.outbound import scrub
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


_ERRORS = (aiohttp.ClientError, OSError, TimeoutError, ValueError)
_SLACK_S = 1.0  # the client waits a little past the server's own query timeout, to hear its error
_BODY_SHOWN = 160  # characters of an answer that is no API response kept in the reason


async def query(
    session: aiohttp.ClientSession,
    url: str,
    promql: str,
    *,
    at: datetime,
    timeout_s: float,
    auth: PrometheusEndpoint | None = None,
) -> Answer:
    """One instant query at `at` against the server at `url` (its base URL, without /api/v1), POSTed as a
    form so that long selectors need no long URL; with `auth`'s credentials where it covers `url`. A
    failure's reason holds none of their secret values."""
    endpoint = f"{url.rstrip('/')}/api/v1/query"
    form = {"query": promql, "time": f"{at.timestamp():.3f}", "timeout": f"{timeout_s:g}s"}
    covered = auth if auth is not None and auth.covers(url) else None
    secrets: tuple[str, ...] = ()
    try:
        headers = {"Accept": "application/json"}
        if covered is not None:
            sent, secrets = covered.headers()
            headers.update(sent)
        context = covered.ssl() if covered is not None else None
        async with session.post(
            endpoint,
            data=form,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=timeout_s + _SLACK_S),
            allow_redirects=False,
            ssl=context if context is not None else True,
            server_hostname=covered.server_name if covered is not None else None,
        ) as response:
            body = await read_body(response)
            status = response.status
    except TooLarge:
        return QueryFailure(f"POST {endpoint}: body over {MAX_BODY_BYTES} bytes")
    except _ERRORS as exc:  # also an unreadable credentials file (OSError) or a bad certificate (SSLError)
        if isinstance(exc, TimeoutError):
            return QueryFailure(f"POST {endpoint}: no answer within {timeout_s + _SLACK_S:g}s")
        return QueryFailure(scrub(f"POST {endpoint}: {exc.__class__.__name__}: {exc}", secrets))
    try:
        decoded = json.loads(body)
    except ValueError:
        return QueryFailure(f"POST {endpoint}: HTTP {status}, not JSON{_shown(body, secrets)}")
    answer = parse_answer(decoded)
    if isinstance(answer, QueryFailure):
        return QueryFailure(scrub(f"POST {endpoint}: HTTP {status}, {answer.reason}", secrets))
    return answer


def _shown(body: bytes, secrets: tuple[str, ...]) -> str:
    """The start of an answer that is no API response (a proxy's or gateway's own words: "no org id"),
    on one line, without the secrets sent."""
    text = " ".join(body.decode("utf-8", "replace").split())
    if not text:
        return ""
    text = scrub(text, secrets)
    return f": {text[:_BODY_SHOWN]}{'...' if len(text) > _BODY_SHOWN else ''}"


async def query_all(
    session: aiohttp.ClientSession,
    url: str,
    queries: Mapping[K, str],
    *,
    at: datetime,
    timeout_s: float,
    auth: PrometheusEndpoint | None = None,
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
    url: str,
    auth: PrometheusEndpoint | None = None,
) -> dict[Arm, ArmEngine]:
    """The measured arms' engine figures over the window ending at `end`, from the Prometheus at `url`
    (the source's, or its endpoint's; an arm the source's labels do not name is left out)."""
    timeout_s = source.timeout.total_seconds()
    matched = {arm: arm_matchers(source, namespace=namespace, pilot=pilot, arm=arm) for arm in MEASURED_ARMS}

    async def one(arm: Arm, matchers: tuple[Matcher, ...]) -> ArmEngine:
        queries = engine_queries(matchers, window=window, step=step, pod_label=source.pod_label)
        answers = await query_all(session, url, queries, at=end, timeout_s=timeout_s, auth=auth)
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
