"""What the operator measures of one pilot between reconciles: engine scrapes and router samples.

A collector per pilot scrapes every ready pod of both arms and reads every ready router's
`/samples` from its cursor, a few times per analysis interval; the reconcile then closes windows
from what it holds. Held in memory only, bounded to one window back: after a restart, the routers
still hold their recent samples (read again from cursor 0) and scrapes resume, so the first
windows after a restart are inconclusive rather than wrong.

With `analysis.metricsSource.prometheus`, the engines' figures come from that Prometheus instead
and the pods are not scraped: each collection queries the window ending then, since the reconcile
closes windows at the last collection.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

import aiohttp

from specpilot.analysis.evidence import WindowLoad
from specpilot.analysis.window import ArmEngine, ArmRequests, ScopeWindow
from specpilot.api import spec as s
from specpilot.metrics.engine import ENGINE_FAMILIES, Scrape, engine_window
from specpilot.metrics.ledger import SampleLedger
from specpilot.metrics.load import kv_blocks, window_load
from specpilot.metrics.prometheus import arm_engines
from specpilot.metrics.samples import arm_requests, kv_load
from specpilot.metrics.scrape import ReadFailure, ScrapeTarget, read_samples, scrape_all
from specpilot.metrics.window import scope_window
from specpilot.wire.names import ENGINE_PORT, ROUTER_ADMIN_PORT, Arm

SAMPLES_PAGE = 10_000
TIMEOUT_SECONDS = 5.0
JUDGED_ARMS = (Arm.BASELINE, Arm.SPECULATIVE)


def cadence(analysis: s.Analysis) -> float:
    """Seconds between collections: several per interval (the KV-cache limit is judged on how long
    usage stays high), at most every 2 s and at least every 10 s."""
    return min(10.0, max(2.0, analysis.interval.total_seconds() / 5))


class PilotMeasurements:
    """Engine scrapes per arm and the routers' samples, over the last window and a margin."""

    def __init__(self) -> None:
        self._scrapes: dict[Arm, deque[Scrape]] = {arm: deque() for arm in JUDGED_ARMS}
        self._ledger: SampleLedger | None = None
        self._horizon = timedelta(minutes=5)
        self._routers: set[str] = set()
        self._queried: tuple[datetime, dict[Arm, ArmEngine]] | None = None  # from Prometheus: (end, engines)
        self.collected_at: datetime | None = None

    async def collect(
        self,
        session: aiohttp.ClientSession,
        *,
        arms: dict[Arm, list[tuple[str, str]]],
        routers: Sequence[tuple[str, str]],
        analysis: s.Analysis,
        pilot: tuple[str, str],
        now: datetime,
    ) -> None:
        """One collection: every ready pod of both arms, every ready router (name, IP pairs) of the
        pilot (namespace, name)."""
        self._horizon = analysis.window * 2 + timedelta(seconds=4 * cadence(analysis))
        if self._ledger is None:
            self._ledger = SampleLedger(horizon=self._horizon)
        source = analysis.metrics_source
        self._queried = None
        if source is not None:
            window, step = analysis.window, timedelta(seconds=cadence(analysis))
            quantile = analysis.thresholds.inter_token_latency.quantile
            self._queried = (
                now,
                await arm_engines(
                    session,
                    source.prometheus,
                    namespace=pilot[0],
                    pilot=pilot[1],
                    window=window,
                    step=step,
                    quantile=quantile,
                    end=now,
                ),
            )
        targets = [
            (arm, ScrapeTarget(pod=name, url=f"http://{ip}:{ENGINE_PORT}/metrics"))
            for arm in JUDGED_ARMS
            for name, ip in arms.get(arm, [])
            if source is None
        ]
        results = await scrape_all(
            session, [t for _, t in targets], families=ENGINE_FAMILIES, timeout_s=TIMEOUT_SECONDS, at=now
        )
        for (arm, _), result in zip(targets, results, strict=True):
            self._scrapes[arm].append(result)
        for series in self._scrapes.values():
            while series and series[0].at < now - self._horizon:
                series.popleft()
        await asyncio.gather(*(self._read(session, name, ip, now) for name, ip in routers))
        for gone in self._routers - {name for name, _ in routers}:
            self._ledger.forget(gone, at=now)
        self._routers = {name for name, _ in routers}
        self.collected_at = now

    async def _read(self, session: aiohttp.ClientSession, name: str, ip: str, now: datetime) -> None:
        assert self._ledger is not None
        url = f"http://{ip}:{ROUTER_ADMIN_PORT}"
        for _ in range(10):  # a busy router may hold several pages since the last read
            page = await read_samples(
                session, url, cursor=self._ledger.cursor(name), limit=SAMPLES_PAGE, timeout_s=TIMEOUT_SECONDS
            )
            if isinstance(page, ReadFailure):
                self._ledger.record_failure(name, page.reason, at=now)
                return
            self._ledger.record(name, page, at=now, limit=SAMPLES_PAGE)
            if len(page.samples) < SAMPLES_PAGE:
                return

    def new_requests(self, scope: str, *, since: datetime, end: datetime) -> int:
        """Speculative-arm requests of the scope that finished in [since, end)."""
        return self._speculative(scope, since, end).routed if end > since else 0

    def kv_loads(self, scopes: Iterable[str], *, analysis: s.Analysis, end: datetime) -> dict[str, float]:
        """KV cache each scope's requests held on the speculative arm over the last two windows: a
        request is seen when it finishes, so a span longer than the longest requests is fairer to them."""
        start = end - 2 * analysis.window
        samples = self._ledger.samples(start, end) if self._ledger is not None else ()
        return {scope: kv_load(samples, scope=scope, arm=Arm.SPECULATIVE, start=start, end=end) for scope in scopes}

    def _speculative(self, scope: str, start: datetime, end: datetime) -> ArmRequests:
        samples = self._ledger.samples(start, end) if self._ledger is not None else ()
        return arm_requests(samples, scope=scope, arm=Arm.SPECULATIVE, start=start, end=end)

    def window(self, scope: str, *, analysis: s.Analysis, end: datetime) -> ScopeWindow:
        """The scope's window ending at `end`, as long as analysis.window."""
        start = end - analysis.window
        tolerance = timedelta(seconds=2 * cadence(analysis))
        quantile = analysis.thresholds.inter_token_latency.quantile
        engines = {
            arm: engine_window(
                self._scrapes[arm],
                start=start,
                end=end,
                tolerance=tolerance,
                quantile=quantile,
                speculative=arm is Arm.SPECULATIVE,
            )
            for arm in JUDGED_ARMS
        }
        if self._queried is not None:  # from Prometheus, for the window ending at the last collection
            at, queried = self._queried
            missing = ArmEngine(inconclusive="no Prometheus query at the window's end")
            engines = {arm: queried[arm] if at == end else missing for arm in JUDGED_ARMS}
        ledger = self._ledger if self._ledger is not None else SampleLedger(horizon=self._horizon)
        return scope_window(
            ledger,
            scope=scope,
            start=start,
            end=end,
            baseline_engine=engines[Arm.BASELINE],
            speculative_engine=engines[Arm.SPECULATIVE],
        )

    def load(self, window: ScopeWindow, *, replicas: dict[Arm, int]) -> WindowLoad:
        """What loaded the arms during the scope's window (every scope's requests), for the evidence."""
        samples = self._ledger.samples(window.start, window.end) if self._ledger is not None else ()
        engines = {Arm.BASELINE: window.baseline_engine, Arm.SPECULATIVE: window.speculative_engine}
        return window_load(
            samples, scope=window.scope, start=window.start, end=window.end, replicas=replicas, engines=engines
        )

    def kv_blocks(self) -> dict[Arm, int]:
        """KV-cache blocks per replica of each arm, where its engines report them."""
        found = {arm: kv_blocks(list(self._scrapes[arm])) for arm in JUDGED_ARMS}
        return {arm: blocks for arm, blocks in found.items() if blocks is not None}
