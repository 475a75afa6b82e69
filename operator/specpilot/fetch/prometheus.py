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
from specpilot.fetch.scrape import MAX_BODY_BYTES, TooLarge, read_body
from specpilot.metrics.promql import Answer, QueryFailure, arm_engine, arm_matchers, engine_queries, parse_answer
from specpilot.wire.names import Arm

K = TypeVar("K")
_ERRORS = (aiohttp.ClientError, OSError, TimeoutError, ValueError)
_SLACK_S = 1.0  # the client waits a little past the server's own query timeout, to hear its error


async def query(session: aiohttp.ClientSession, url: str, promql: str, *, at: datetime, timeout_s: float) -> Answer:
    """One instant query at `at` against the server at `url` (its base URL, without /api/v1), POSTed as a
    form so that long selectors need no long URL."""
    endpoint = f"{url.rstrip('/')}/api/v1/query"
    form = {"query": promql, "time": f"{at.timestamp():.3f}", "timeout": f"{timeout_s:g}s"}
    try:
        async with session.post(
            endpoint,
            data=form,
            headers={"Accept": "application/json"},
            timeout=aiohttp.ClientTimeout(total=timeout_s + _SLACK_S),
            allow_redirects=False,
        ) as response:
            body = await read_body(response)
            status = response.status
    except TooLarge:
        return QueryFailure(f"POST {endpoint}: body over {MAX_BODY_BYTES} bytes")
    except _ERRORS as exc:
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
    session: aiohttp.ClientSession, url: str, queries: Mapping[K, str], *, at: datetime, timeout_s: float
) -> dict[K, Answer]:
    """Every query at `at`, concurrently, by key."""
    keys = list(queries)
    answers = await asyncio.gather(*(query(session, url, queries[k], at=at, timeout_s=timeout_s) for k in keys))
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
) -> dict[Arm, ArmEngine]:
    """Both judged arms' engine figures over the window ending at `end`, from the source's Prometheus."""
    timeout_s = source.timeout.total_seconds()

    async def one(arm: Arm) -> ArmEngine:
        matchers = arm_matchers(source, namespace=namespace, pilot=pilot, arm=arm)
        queries = engine_queries(matchers, window=window, step=step, quantile=quantile, pod_label=source.pod_label)
        answers = await query_all(session, source.url, queries, at=end, timeout_s=timeout_s)
        return arm_engine(
            answers, start=end - window, speculative=arm is Arm.SPECULATIVE, pod_label=source.pod_label, arm=arm.value
        )

    baseline, speculative = await asyncio.gather(one(Arm.BASELINE), one(Arm.SPECULATIVE))
    return {Arm.BASELINE: baseline, Arm.SPECULATIVE: speculative}
