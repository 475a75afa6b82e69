"""Collection: each pilot's router samples and engine figures, a few times per analysis interval.

A `Collector` per pilot reads every ready router's `/samples` from its cursor into a ledger, and
asks the engine source the spec names (direct scrapes of the arms' pods, or a Prometheus) for the
engines' figures. Each collection hands back a frozen `Measurements`, which the reconcile judges
its windows on. Held in memory only, bounded to two windows back: after a restart, the routers
still hold their recent samples (read again from cursor 0) and scrapes resume, so the first
windows after a restart are inconclusive rather than wrong.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

import aiohttp

from specpilot.analysis.window import ArmEngine
from specpilot.api.spec import Analysis, Rehearsal
from specpilot.controller.core.measurements import (
    EngineReadings,
    Measurements,
    Queried,
    Scraped,
    cadence,
    horizon,
)
from specpilot.controller.ports import EngineSource, Pods, SampleReader
from specpilot.fetch.endpoints import PrometheusCredentials
from specpilot.fetch.prometheus import arm_engines
from specpilot.fetch.scrape import ReadFailure, ScrapeTarget, read_samples, scrape_all
from specpilot.metrics.engine_window import ENGINE_FAMILIES, Scrape
from specpilot.metrics.ledger import SampleLedger
from specpilot.wire.names import ENGINE_PORT, MEASURED_ARMS, ROUTER_ADMIN_PORT, Arm
from specpilot.wire.samples import SamplesPage

SAMPLES_PAGE = 10_000
TIMEOUT_SECONDS = 5.0


class HttpSamples:
    """Router samples over HTTP, from the router's admin port."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self._session = session

    async def read(self, address: str, *, cursor: int, limit: int) -> SamplesPage | ReadFailure:
        url = f"http://{address}:{ROUTER_ADMIN_PORT}"
        return await read_samples(self._session, url, cursor=cursor, limit=limit, timeout_s=TIMEOUT_SECONDS)


class ScrapeEngines:
    """Direct scrapes of every ready pod of both judged arms, kept over the measurements' horizon."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self._session = session
        self._scrapes: dict[Arm, deque[Scrape]] = {arm: deque() for arm in MEASURED_ARMS}

    async def read(
        self,
        arms: Mapping[Arm, Pods],
        *,
        pilot: tuple[str, str],
        analysis: Analysis,
        horizon: timedelta,
        now: datetime,
    ) -> EngineReadings:
        targets = [
            (arm, ScrapeTarget(pod=name, url=f"http://{ip}:{ENGINE_PORT}/metrics"))
            for arm in MEASURED_ARMS
            for name, ip in arms.get(arm, [])
        ]
        results = await scrape_all(
            self._session, [t for _, t in targets], families=ENGINE_FAMILIES, timeout_s=TIMEOUT_SECONDS, at=now
        )
        for (arm, _), result in zip(targets, results, strict=True):
            self._scrapes[arm].append(result)
        oldest = now - horizon
        for series in self._scrapes.values():
            while series and series[0].at < oldest:
                series.popleft()
        return Scraped({arm: tuple(series) for arm, series in self._scrapes.items()})


class PrometheusEngines:
    """The engines' figures from the Prometheus that `analysis.metricsSource` names, for the window
    ending at each collection (the reconcile closes windows at the last collection); with the
    operator's credentials for the endpoint it names, or for the Prometheus its URL is under."""

    def __init__(self, session: aiohttp.ClientSession, held: PrometheusCredentials | None = None) -> None:
        self._session = session
        self._held = held if held is not None else PrometheusCredentials()

    async def read(
        self,
        arms: Mapping[Arm, Pods],
        *,
        pilot: tuple[str, str],
        analysis: Analysis,
        horizon: timedelta,
        now: datetime,
    ) -> EngineReadings:
        source = analysis.metrics_source
        assert source is not None, "the Prometheus source reads only for a spec that names one"
        target = self._held.target(source.prometheus)
        if target is None:  # the policy refuses such a spec; an operator restarted with fewer endpoints
            missing = f"the operator holds no Prometheus endpoint named {source.prometheus.endpoint!r}"
            return Queried(now, {arm: ArmEngine(inconclusive=missing) for arm in MEASURED_ARMS})
        url, auth = target
        figures = await arm_engines(
            self._session,
            source.prometheus,
            namespace=pilot[0],
            pilot=pilot[1],
            window=analysis.window,
            step=timedelta(seconds=cadence(analysis)),
            quantile=analysis.thresholds.itl_quantile,
            end=now,
            url=url,
            auth=auth,
        )
        return Queried(now, figures)


class Collector:
    """One pilot's collections: router samples into a ledger, engine figures from the spec's source."""

    def __init__(self, *, samples: SampleReader, direct: EngineSource, prometheus: EngineSource) -> None:
        self._samples = samples
        self._direct = direct
        self._prometheus = prometheus
        self._ledger: SampleLedger | None = None
        self._routers: set[str] = set()
        self._scraped_since: datetime | None = None

    @classmethod
    def over_http(cls, session: aiohttp.ClientSession, prometheus: PrometheusCredentials | None = None) -> Collector:
        return cls(
            samples=HttpSamples(session),
            direct=ScrapeEngines(session),
            prometheus=PrometheusEngines(session, prometheus),
        )

    async def collect(
        self,
        *,
        arms: Mapping[Arm, Pods],
        routers: Sequence[tuple[str, str]],
        analysis: Analysis,
        rehearsal: Rehearsal | None = None,
        pilot: tuple[str, str],
        now: datetime,
    ) -> Measurements:
        """One collection: the ready pods of both arms and every ready router (name, IP pairs) of the
        pilot (namespace, name), kept as far back as the analysis and the rehearsal read."""
        kept = horizon(analysis, rehearsal)
        if self._ledger is None:
            self._ledger = SampleLedger(horizon=kept)
        self._ledger.horizon = kept
        source = self._direct if analysis.metrics_source is None else self._prometheus
        readings = await source.read(arms, pilot=pilot, analysis=analysis, horizon=kept, now=now)
        await asyncio.gather(*(self._read(self._ledger, name, ip, now) for name, ip in routers))
        for gone in self._routers - {name for name, _ in routers}:
            self._ledger.forget(gone, at=now)
        self._routers = {name for name, _ in routers}
        since = None
        if source is self._direct:
            self._scraped_since = since = self._scraped_since or now
        return Measurements(collected_at=now, measured_since=since, samples=self._ledger.view(), readings=readings)

    async def _read(self, ledger: SampleLedger, name: str, ip: str, now: datetime) -> None:
        for _ in range(10):  # a busy router may hold several pages since the last read
            page = await self._samples.read(ip, cursor=ledger.cursor(name), limit=SAMPLES_PAGE)
            if isinstance(page, ReadFailure):
                ledger.record_failure(name, page.reason, at=now)
                return
            ledger.record(name, page, at=now, limit=SAMPLES_PAGE)
            if len(page.samples) < SAMPLES_PAGE:
                return
