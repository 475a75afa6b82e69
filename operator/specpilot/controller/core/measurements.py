"""One pilot's measurements as one collection left them, frozen: what a tick judges its windows on.

A collection hands the reconcile an immutable `Measurements`: the routers' samples as a ledger view
and the engines' readings from whichever source the spec names. Later collections build new values
and never touch one a reconcile holds, so a tick that awaits a webhook between two reads of its
windows reads the same figures both times.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from specpilot.analysis.evidence import WindowLoad
from specpilot.analysis.window import ArmEngine, ScopeWindow
from specpilot.api.spec import Analysis, Rehearsal, SpeculationPilotSpec
from specpilot.metrics.arm_requests import arm_requests, kv_load
from specpilot.metrics.engine_window import Scrape, engine_window
from specpilot.metrics.ledger import LedgerView
from specpilot.metrics.load import cache_config, kv_blocks, window_load
from specpilot.metrics.scope_window import scope_window
from specpilot.wire.names import MEASURED_ARMS, Arm


def compared_arm(spec: SpeculationPilotSpec) -> Arm:
    """The arm the speculative arm is judged against: the control arm, or production's baseline
    when the pilot runs without one."""
    return Arm.CONTROL if spec.control.enabled else Arm.BASELINE


def alternative_judged(spec: SpeculationPilotSpec) -> bool:
    """Whether the pilot's alternative arm takes the speculative arm's share and is judged: it runs one,
    beside a control arm (the API refuses one without)."""
    return spec.alternative is not None and spec.control.enabled


def cadence(analysis: Analysis) -> float:
    """Seconds between collections: several per interval (the KV-cache limit is judged on how long
    usage stays high), at most every 2 s and at least every 10 s."""
    return min(10.0, max(2.0, analysis.interval.total_seconds() / 5))


# A window's load is binned as read over the last minute of its stage: an engine's queue answers to the
# load of the last tens of seconds, so a 15 s burst within a quieter minute reads a queue the burst's own
# rate would build only over a longer run (bench/stage_bands.py).
RECENT_LOAD = timedelta(seconds=60)


def horizon(analysis: Analysis, rehearsal: Rehearsal | None = None) -> timedelta:
    """How far back measurements are kept: two windows (KV loads look that far), the recent load's span,
    or a rehearsal step where longer (a ladder or crossover step is read over most of it), and a margin."""
    step = timedelta(0)
    if rehearsal is not None:
        step = rehearsal.crossover_step_duration if rehearsal.crossover_steps else rehearsal.step_duration
    return max(analysis.window * 2, RECENT_LOAD, step) + timedelta(seconds=4 * cadence(analysis))


class EngineReadings(Protocol):
    """The measured arms' engine figures as one metric source gave them."""

    def engines(self, *, start: datetime, end: datetime, analysis: Analysis) -> dict[Arm, ArmEngine]:
        """Each measured arm's figures over [start, end]."""
        ...

    def kv_blocks(self) -> dict[Arm, int]:
        """KV-cache blocks per replica of each arm, where its engines report them."""
        ...

    def block_size(self) -> int | None:
        """Tokens per KV-cache block (the same engine config in every arm), where reported."""
        ...


@dataclass(frozen=True)
class Scraped:
    """Direct scrapes of each measured arm's pods, within the horizon, oldest first."""

    scrapes: Mapping[Arm, tuple[Scrape, ...]] = field(default_factory=dict)

    def engines(self, *, start: datetime, end: datetime, analysis: Analysis) -> dict[Arm, ArmEngine]:
        return {
            arm: engine_window(
                self.scrapes.get(arm, ()),
                start=start,
                end=end,
                tolerance=timedelta(seconds=2 * cadence(analysis)),
                quantile=analysis.thresholds.itl_quantile,
                speculative=arm is Arm.SPECULATIVE,
            )
            for arm in MEASURED_ARMS
        }

    def kv_blocks(self) -> dict[Arm, int]:
        found = {arm: kv_blocks(list(self.scrapes.get(arm, ()))) for arm in MEASURED_ARMS}
        return {arm: blocks for arm, blocks in found.items() if blocks is not None}

    def block_size(self) -> int | None:
        return next(
            (size for arm in MEASURED_ARMS if (size := cache_config(list(self.scrapes.get(arm, ())), "block_size"))),
            None,
        )


@dataclass(frozen=True)
class Queried:
    """A Prometheus' figures for the window that ends at `at` (the collection's time)."""

    at: datetime
    figures: Mapping[Arm, ArmEngine]

    def engines(self, *, start: datetime, end: datetime, analysis: Analysis) -> dict[Arm, ArmEngine]:
        if end != self.at:
            missing = ArmEngine(inconclusive="no Prometheus query at the window's end")
            return dict.fromkeys(MEASURED_ARMS, missing)
        unnamed = ArmEngine(inconclusive="the source's labels do not name this arm")
        return {arm: self.figures.get(arm, unnamed) for arm in MEASURED_ARMS}

    def kv_blocks(self) -> dict[Arm, int]:
        return {}

    def block_size(self) -> int | None:
        return None


@dataclass(frozen=True)
class Measurements:
    """The routers' samples and the engines' readings as of `collected_at` (the windows' end)."""

    collected_at: datetime | None = None
    # When the engines' figures begin (this process's first scrape; None when a Prometheus keeps them):
    # a window that starts earlier has no figures at its start, so it waits rather than being judged.
    measured_since: datetime | None = None
    samples: LedgerView = field(default_factory=LedgerView.empty)
    readings: EngineReadings = field(default_factory=Scraped)
    # Every scope's window of a tick spans the same time: the engines' figures over it, worked out once.
    _engines: dict[tuple[datetime, datetime, float, float], dict[Arm, ArmEngine]] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )

    def engines(self, *, start: datetime, end: datetime, analysis: Analysis) -> dict[Arm, ArmEngine]:
        """Each measured arm's engine figures over [start, end] (the same object for the same span)."""
        key = (start, end, cadence(analysis), analysis.thresholds.itl_quantile)
        if key not in self._engines:
            self._engines[key] = self.readings.engines(start=start, end=end, analysis=analysis)
        return self._engines[key]

    def window(
        self, scope: str, *, analysis: Analysis, end: datetime, compared: Arm, alternative: bool = False
    ) -> ScopeWindow:
        """The scope's window ending at `end`, as long as analysis.window: the speculative arm (and the
        alternative arm, where the pilot runs one) against the `compared` arm."""
        start = end - analysis.window
        engines = self.engines(start=start, end=end, analysis=analysis)
        return scope_window(
            self.samples,
            scope=scope,
            start=start,
            end=end,
            compared=compared,
            compared_engine=engines[compared],
            speculative_engine=engines[Arm.SPECULATIVE],
            alternative=alternative,
        )

    def new_requests(self, scope: str, *, since: datetime, end: datetime) -> int:
        """Speculative-arm requests of the scope that finished in [since, end)."""
        if end <= since:
            return 0
        samples = self.samples.samples(since, end)
        return arm_requests(samples, scope=scope, arm=Arm.SPECULATIVE, start=since, end=end).routed

    def kv_loads(self, scopes: Iterable[str], *, analysis: Analysis, end: datetime) -> dict[str, float]:
        """KV cache each scope's requests held on the speculative arm over the last two windows: a
        request is seen when it finishes, so a span longer than the longest requests is fairer to them."""
        start = end - 2 * analysis.window
        samples = self.samples.samples(start, end)
        return {scope: kv_load(samples, scope=scope, arm=Arm.SPECULATIVE, start=start, end=end) for scope in scopes}

    def load(
        self, window: ScopeWindow, *, replicas: Mapping[Arm, int], analysis: Analysis, since: datetime | None = None
    ) -> WindowLoad:
        """What loaded the arms during the scope's window (every scope's requests), for the evidence, and
        over up to `RECENT_LOAD` before its end, from `since` on (the load last changed then: the stage
        began, the arm's mix changed) and where every request of that span was read."""
        samples = self.samples.samples(window.start, window.end)
        engines = self.engines(start=window.start, end=window.end, analysis=analysis)
        start = window.end - RECENT_LOAD if since is None else max(window.end - RECENT_LOAD, since)
        recent = None
        if start < window.start and not self.samples.gaps(start, window.start):
            recent = (self.samples.arrivals(start, window.end), (window.end - start).total_seconds())
        return window_load(
            samples,
            arrived=self.samples.arrivals(window.start, window.end),
            scope=window.scope,
            start=window.start,
            end=window.end,
            replicas=replicas,
            engines=engines,
            recent=recent,
        )

    def kv_blocks(self) -> dict[Arm, int]:
        """KV-cache blocks per replica of each arm, where its engines report them."""
        return self.readings.kv_blocks()

    def block_size(self) -> int | None:
        """Tokens per KV-cache block, where the engines report it."""
        return self.readings.block_size()
