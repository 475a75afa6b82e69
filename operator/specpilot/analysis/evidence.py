"""The pilot's evidence: bounded rolling aggregates of every judged window, by scope, arm and load.

Each window that carried traffic adds its figures to the scope's aggregates: per arm, into the bin
of its offered load (requests per second per replica, over every scope the arm served), and into
running totals (timing breakdown, on-time completions, request lengths, acceptance). The compared
pair (the speculative arm and the control arm, which takes the same share at the same size) is
binned at one load, the pair's mean, so that each window adds to both arms at the same load; the
alternative arm (the same share on the same GPUs, without speculation) is binned there too. Without
a control arm each arm is binned at its own. A window within which the scope's weight changed is
kept out of the bins, since its requests ran at two loads. Bins are fixed and fine (a quarter of an
octave of load each), so the store stays bounded however long the pilot runs; the load bands a
decision reads are learned from them (`decision.bands`). Production's baseline is watched: the
windows' loads it ran at are kept as a histogram over the same bins. The store lives in a ConfigMap
beside the pilot, never in status.

The probe rounds' counts by scope, kind and arm are kept here too, with the state of each kind's
sequential tests, so that the report's quality by scope and the probe checks survive an operator restart
(`record_probes`).

Pure: the shell passes the window, its load and its verdict, and writes back what this returns.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field

from specpilot.analysis.proportions import Sequential
from specpilot.analysis.ratios import gap_quantiles
from specpilot.analysis.stats import nearest_rank
from specpilot.analysis.window import ArmRequests, ScopeWindow
from specpilot.api.common import ApiModel
from specpilot.api.spec import ProbeKind
from specpilot.api.spec.analysis import ITL_QUANTILE, MIN_SAMPLES
from specpilot.api.status import Verdict
from specpilot.wire.buckets import coarse_key, fine_bucket, fine_bucket_bounds
from specpilot.wire.names import Arm
from specpilot.wire.samples import RequestOutcome

BINS_PER_OCTAVE = 4
BIN_RANGE = (-40, 48)  # offered loads from 1/1024 to 4096 requests per second per replica
KV_POINTS = 720  # KV-cache usage points kept per arm (newest), for the report's plot
MAX_POSITIONS = 16


class Moments(ApiModel):
    """Count, sum and sum of squares of one figure: its mean and spread without its values."""

    n: Annotated[int, Field(ge=0)] = 0
    sum: float = 0.0
    sum_sq: float = 0.0

    def add(self, value: float | None) -> Moments:
        if value is None or not math.isfinite(value):
            return self
        return Moments(n=self.n + 1, sum=self.sum + value, sum_sq=self.sum_sq + value * value)

    def merge(self, other: Moments) -> Moments:
        return Moments(n=self.n + other.n, sum=self.sum + other.sum, sum_sq=self.sum_sq + other.sum_sq)

    @property
    def mean(self) -> float | None:
        return self.sum / self.n if self.n else None

    @property
    def sd(self) -> float | None:
        """Sample standard deviation; None below two values."""
        if self.n < 2:
            return None
        return math.sqrt(max(0.0, (self.sum_sq - self.sum * self.sum / self.n) / (self.n - 1)))


# Times to first token are counted in the fine buckets (`fine_bucket`), as the router counts chunk gaps.
ttft_bucket_bounds = fine_bucket_bounds


def add_counts(counts: Mapping[int, int], other: Mapping[int, int]) -> dict[int, int]:
    out = dict(counts)
    for index, count in other.items():
        out[index] = out.get(index, 0) + count
    return out


class BinArm(ApiModel):
    """One arm's windows whose load fell in one bin."""

    load: Moments = Moments()
    """The load the window is binned at (`ArmLoad.offered_per_replica`): requests per second per replica."""
    in_flight: Moments = Moments()
    """The router's requests in flight per replica: concurrency, an outcome of the load (a diagnostic)."""
    tpct: Moments = Moments()
    """The scope's time per committed token on the arm, seconds."""
    ttft_p99: Moments = Moments()
    """The scope's 99th percentile time to first token on the arm in each window, seconds."""
    ttft: dict[int, Annotated[int, Field(ge=0)]] = {}
    """The scope's times to first token on the arm, counted per fine bucket (`fine_bucket`, keyed by its
    lowest fine bucket when `Evidence.ttft_width` merges several); a request is counted in every window
    it falls in, so counts run `Evidence.overlap` times the requests."""
    e2e: Moments = Moments()
    """The scope's mean end-to-end time of ok requests on the arm, seconds."""
    routed: Annotated[int, Field(ge=0)] = 0
    """Requests of the scope routed to the arm (every outcome)."""
    on_time: Annotated[int, Field(ge=0)] = 0
    """Of those, ok and within the scope's deadline."""


class ArmTotals(ApiModel):
    """Running sums of one arm's requests of the scope over every recorded window."""

    routed: Annotated[int, Field(ge=0)] = 0
    on_time: Annotated[int, Field(ge=0)] = 0
    ok: Annotated[int, Field(ge=0)] = 0
    e2e_seconds: float = 0.0
    """Summed over ok requests."""
    streams: Annotated[int, Field(ge=0)] = 0
    ttft_seconds: float = 0.0
    """Summed over ok streamed requests."""
    decoded: Annotated[int, Field(ge=0)] = 0
    decode_seconds: float = 0.0
    committed_tokens: Annotated[int, Field(ge=0)] = 0
    """Over ok streams of two tokens or more: decode time and tokens after the first."""
    load: Moments = Moments()
    running: Moments = Moments()
    waiting: Moments = Moments()
    """Engine requests running and waiting, per replica (arm-wide: engines cannot tell scopes apart)."""


class Lengths(ApiModel):
    """A token-count distribution as log-moments and bounds (a lognormal fit for replay)."""

    log: Moments = Moments()
    min: int | None = None
    max: int | None = None

    def add(self, values: Sequence[int]) -> Lengths:
        usable = [v for v in values if v >= 1]
        if not usable:
            return self
        log = self.log
        for value in usable:
            log = log.add(math.log(value))
        low, high = min(usable), max(usable)
        return Lengths(
            log=log,
            min=low if self.min is None else min(self.min, low),
            max=high if self.max is None else max(self.max, high),
        )


class ProbeArm(ApiModel):
    """One arm's probe answers of one kind on one scope."""

    checks: Annotated[int, Field(ge=0)] = 0
    """greedy: text comparisons (the speculative arm's against the baseline's; the baseline's against its
    own repeat). sampled: answers asked. The other kinds: answers judged."""
    passed: Annotated[int, Field(ge=0)] = 0
    """Of those, greedy: equal texts; sampled: answers whose score counted; the other kinds: answers that
    kept the case's contract."""
    scores: Moments = Moments()
    """sampled: the scores that counted."""

    def merge(self, other: ProbeArm) -> ProbeArm:
        return ProbeArm(
            checks=self.checks + other.checks, passed=self.passed + other.passed, scores=self.scores.merge(other.scores)
        )


class ProbeCounts(ApiModel):
    """One probe kind's rounds on one scope, and each probed arm's answers."""

    rounds: Annotated[int, Field(ge=0)] = 0
    """The most rounds any of the kind's cases ran."""
    baseline: ProbeArm = ProbeArm()
    speculative: ProbeArm = ProbeArm()
    test: Sequential = Sequential()
    """The kind's sequential tests over these rounds, in the order they came (`proportions`)."""

    def merge(self, other: ProbeCounts) -> ProbeCounts:
        """These rounds, then `other`'s (a later run of the operator)."""
        return ProbeCounts(
            rounds=self.rounds + other.rounds,
            baseline=self.baseline.merge(other.baseline),
            speculative=self.speculative.merge(other.speculative),
            test=self.test.then(other.test),
        )


def _merged(
    one: Mapping[ProbeKind, ProbeCounts], other: Mapping[ProbeKind, ProbeCounts]
) -> dict[ProbeKind, ProbeCounts]:
    return {
        kind: one.get(kind, ProbeCounts()).merge(other.get(kind, ProbeCounts()))
        for kind in ProbeKind
        if kind in one or kind in other
    }


class ProbeRecord(ApiModel):
    """A scope's probe counts by kind. The operator accumulates its rounds in memory, so a run of it
    (`since`: when its first round began) writes its counts so far over `current`; a later run first adds
    them to `kept`, so that what earlier runs counted survives a restart."""

    kept: dict[ProbeKind, ProbeCounts] = {}
    """What the operator's earlier runs counted."""
    since: datetime | None = None
    """When the first round of the run that wrote `current` began."""
    current: dict[ProbeKind, ProbeCounts] = {}
    """What that run has counted so far."""

    def counts(self) -> dict[ProbeKind, ProbeCounts]:
        """Every run's counts together."""
        return _merged(self.kept, self.current)

    def before(self, since: datetime | None) -> dict[ProbeKind, ProbeCounts]:
        """What the runs before the one whose first round began at `since` counted (None: a run without
        a round yet)."""
        return dict(self.kept) if since is not None and since == self.since else self.counts()


class ScopeEvidence(ApiModel):
    """Everything recorded about one scope."""

    windows: Annotated[int, Field(ge=0)] = 0
    verdicts: dict[Verdict, int] = {}
    quality_failed: Annotated[int, Field(ge=0)] = 0
    """Windows with a failing probe or webhook check."""
    unsettled: Annotated[int, Field(ge=0)] = 0
    """Windows kept out of the load bins: the scope's weight, or the speculative arm's mix, changed within them."""
    mix_changed_at: datetime | None = None
    """When another scope last left the speculative arm: what was measured before, beside that scope's
    requests (its cache, its slower rounds), does not describe the arm without it, so the scope's bins
    and totals start again from there."""
    last_end: datetime | None = None
    """End of the newest window recorded: an older or equal one is not counted again."""
    arrival_rate: Moments = Moments()
    """The scope's requests per second, both arms."""
    bins: dict[Arm, dict[int, BinArm]] = {}
    totals: dict[Arm, ArmTotals] = {}
    acceptance_length: Moments = Moments()
    per_position: Annotated[list[Moments], Field(max_length=MAX_POSITIONS)] = []
    """The speculative engines' acceptance rate at each draft position (arm-wide)."""
    chunk_gaps: dict[Arm, Moments] = {}
    """Each compared arm's gap between streamed chunks (vLLM's inter-token latency at the thresholds'
    quantile, arm-wide), one value per window: stream cadence, reported whether or not it is judged."""
    prompt_tokens: Lengths = Lengths()
    output_tokens: Lengths = Lengths()
    rehearsed: dict[int, Annotated[int, Field(ge=0)]] = {}
    """Windows per load bin of the compared pair that the peak rehearsal's traffic made (its source)."""
    probes: ProbeRecord = ProbeRecord()
    """The probe rounds' counts by kind and arm, for the report's quality by scope."""


class KvPoint(ApiModel):
    """The highest KV-cache usage among an arm's pods at one scrape."""

    at: datetime
    usage: float


class Evidence(ApiModel):
    """One pilot's evidence store."""

    version: Literal[1] = 1
    compared: Arm = Arm.BASELINE
    """The arm the speculative arm is compared with: control, or production's baseline without one."""
    production: dict[int, Annotated[int, Field(ge=0)]] = {}
    """Windows per load bin at which production's baseline ran (offered load per replica, every scope)."""
    overlap: float = 1.0
    """analysis.window / analysis.interval: how many windows each request is counted in."""
    scopes: dict[str, ScopeEvidence] = {}
    kv_usage: dict[Arm, Annotated[list[KvPoint], Field(max_length=KV_POINTS)]] = {}
    kv_blocks: dict[Arm, int] = {}
    """KV-cache blocks per replica, from vllm:cache_config_info (num_gpu_blocks)."""
    block_size: int | None = None
    """Tokens per KV-cache block, from vllm:cache_config_info (block_size)."""
    gpus: dict[Arm, int] = {}
    """GPUs each arm holds."""
    replicas: dict[Arm, int] = {}
    """Ready engine replicas of each arm, last seen."""
    config_hashes: dict[Arm, str] = {}
    """The arms' config hashes the windows were measured under: a change starts a new store."""
    ttft_width: Annotated[int, Field(ge=1)] = 1
    """Fine TTFT buckets each counted key spans (a power of two): raised by `fit` when the store would
    outgrow its ConfigMap, so that a long, wide pilot keeps every window at a coarser TTFT resolution."""


@dataclass(frozen=True, kw_only=True)
class ArmLoad:
    """One arm's load over a window, over every scope it served.

    The load is the offered load per replica: requests per second, counted as they finish (in a
    window long against its requests that is their arrival rate). It is what an SRE reads off a
    production dashboard, and it is the same for two arms that take the same share at the same size
    whatever their speed: a faster arm holds fewer requests in flight for it, so concurrency is an
    outcome of the arm, not an axis to compare arms on, and it is kept as a diagnostic."""

    offered_per_replica: float | None  # requests finished per second, per replica
    in_flight_per_replica: float | None = None  # the router's requests in flight, by Little's law
    running_per_replica: float | None = None  # the engines' num_requests_running, mean
    waiting_per_replica: float | None = None  # the engines' num_requests_waiting, mean
    batch_seen: float | None = None  # the engines' batch as their tokens saw it (`ArmEngine.batch_seen`)


@dataclass(frozen=True, kw_only=True)
class WindowLoad:
    """What loaded the arms during one scope's window, and the scope's request lengths."""

    arms: Mapping[Arm, ArmLoad]
    arrival_rate: float  # the scope's requests per second, both arms
    prompt_tokens: tuple[int, ...] = ()
    output_tokens: tuple[int, ...] = ()

    @property
    def offered(self) -> dict[Arm, float | None]:
        """Each arm's offered load per replica."""
        return {arm: arm_load.offered_per_replica for arm, arm_load in self.arms.items()}


def load_bin(load: float) -> int:
    """The fine bin of a load: a quarter octave wide, clamped to the range kept."""
    index = math.floor(BINS_PER_OCTAVE * math.log2(load))
    return min(max(index, BIN_RANGE[0]), BIN_RANGE[1])


def bin_bounds(index: int) -> tuple[float, float]:
    return 2 ** (index / BINS_PER_OCTAVE), 2 ** ((index + 1) / BINS_PER_OCTAVE)


def _p99(values: Sequence[float]) -> float | None:
    usable = sorted(v for v in values if math.isfinite(v))
    return nearest_rank(usable, 0.99) if usable else None


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _on_time(requests: ArmRequests) -> int:
    return max(0, requests.count(RequestOutcome.OK) - requests.late)


def _add_totals(totals: ArmTotals, requests: ArmRequests, load: ArmLoad) -> ArmTotals:
    ok = len(requests.e2e_seconds)
    return ArmTotals(
        routed=totals.routed + requests.routed,
        on_time=totals.on_time + _on_time(requests),
        ok=totals.ok + ok,
        e2e_seconds=totals.e2e_seconds + sum(requests.e2e_seconds),
        streams=totals.streams + len(requests.ttft_seconds),
        ttft_seconds=totals.ttft_seconds + sum(requests.ttft_seconds),
        decoded=totals.decoded + len(requests.decode_seconds),
        decode_seconds=totals.decode_seconds + sum(requests.decode_seconds),
        committed_tokens=totals.committed_tokens + sum(requests.committed_tokens),
        load=totals.load.add(load.offered_per_replica),
        running=totals.running.add(load.running_per_replica),
        waiting=totals.waiting.add(load.waiting_per_replica),
    )


def matched_load(offered: Mapping[Arm, float | None], compared: Arm) -> dict[Arm, float | None]:
    """The load each arm's window is binned at, from each arm's offered load per replica: the compared
    pair at their mean when the comparison is with the control arm (the same share at the same size),
    every arm at its own else. The alternative arm takes the same share on the same GPU budget in other
    replicas, so it is binned at the pair's load too: its bins hold the same traffic as theirs, whatever
    its own replica count."""
    own = dict(offered)
    pair = [own.get(arm) for arm in (Arm.SPECULATIVE, compared)]
    if compared is Arm.CONTROL and all(value is not None for value in pair):
        mean = sum(value for value in pair if value is not None) / 2
        own.update({Arm.SPECULATIVE: mean, Arm.CONTROL: mean, Arm.ALTERNATIVE: mean})
    return own


def _add_bin(cell: BinArm, requests: ArmRequests, load: float, in_flight: float | None, ttft_width: int) -> BinArm:
    counted = Counter(coarse_key(fine_bucket(v), ttft_width) for v in requests.ttft_seconds if math.isfinite(v))
    return BinArm(
        load=cell.load.add(load),
        in_flight=cell.in_flight.add(in_flight),
        tpct=cell.tpct.add(requests.time_per_committed_token),
        ttft_p99=cell.ttft_p99.add(_p99(requests.ttft_seconds)),
        ttft=add_counts(cell.ttft, counted),
        e2e=cell.e2e.add(_mean(requests.e2e_seconds)),
        routed=cell.routed + requests.routed,
        on_time=cell.on_time + _on_time(requests),
    )


def _kv(points: Sequence[KvPoint], window: Sequence[tuple[datetime, float]]) -> list[KvPoint]:
    newest = points[-1].at if points else None
    added = [KvPoint(at=at, usage=usage) for at, usage in window if newest is None or at > newest]
    return [*points, *added][-KV_POINTS:]


def record_window(
    evidence: Evidence,
    window: ScopeWindow,
    load: WindowLoad,
    *,
    verdict: Verdict,
    quality_failed: bool,
    settled: bool = True,
    rehearsed: bool = False,
    gap_quantile: float = ITL_QUANTILE,
    min_samples: int = MIN_SAMPLES,
) -> Evidence:
    """The evidence with one more window of one scope; unchanged for a window without traffic, or
    one at or before the newest the scope already holds (a restarted operator judging it again).
    A window that is not `settled` (the scope's weight changed within it) adds to the totals only; an
    inconclusive one (too few requests, gaps in the samples, another scope's KV pressure) only to the
    counts: what it measured is not evidence either way. A `rehearsed` window (the peak rehearsal's
    traffic, at loads production chose not to offer) adds to the bins alone, marked as such: the
    totals, arrival rate and lengths describe the scope's live traffic. Cadence: as the check reads it."""
    scope = evidence.scopes.get(window.scope, ScopeEvidence())
    compared = evidence.compared
    arms = {compared: window.compared, Arm.SPECULATIVE: window.speculative}
    if window.alternative is not None and compared is Arm.CONTROL:
        arms[Arm.ALTERNATIVE] = window.alternative
    if not any(requests.routed for requests in arms.values()):
        return evidence
    if scope.last_end is not None and window.end <= scope.last_end:
        return evidence
    bins, totals, marked = _add_arms(
        scope,
        arms,
        load,
        compared=compared,
        counted=verdict is not Verdict.INCONCLUSIVE,
        settled=settled,
        rehearsed=rehearsed,
        ttft_width=evidence.ttft_width,
    )
    engine = window.speculative_engine
    verdicts = {**scope.verdicts, verdict: scope.verdicts.get(verdict, 0) + 1}
    updated = ScopeEvidence(
        windows=scope.windows + 1,
        verdicts=verdicts,
        quality_failed=scope.quality_failed + int(quality_failed),
        unsettled=scope.unsettled + int(not settled),
        last_end=window.end,
        arrival_rate=scope.arrival_rate if rehearsed else scope.arrival_rate.add(load.arrival_rate),
        bins={arm: cells for arm, cells in bins.items() if cells},
        totals=totals,
        acceptance_length=scope.acceptance_length.add(engine.acceptance_length),
        per_position=_per_position(scope.per_position, engine.per_position_acceptance),
        chunk_gaps=_chunk_gaps(scope.chunk_gaps, window, compared, quantile=gap_quantile, min_samples=min_samples),
        prompt_tokens=scope.prompt_tokens if rehearsed else scope.prompt_tokens.add(load.prompt_tokens),
        output_tokens=scope.output_tokens if rehearsed else scope.output_tokens.add(load.output_tokens),
        rehearsed=marked,
        probes=scope.probes,
    )
    update = {"scopes": {**evidence.scopes, window.scope: updated}, "kv_usage": _kv_usage(evidence, window)}
    return evidence.model_copy(update=update)


def _kv_usage(evidence: Evidence, window: ScopeWindow) -> dict[Arm, list[KvPoint]]:
    """The compared and speculative arms' KV-cache usage with the window's scrapes added."""
    compared = evidence.compared
    return {
        **evidence.kv_usage,
        compared: _kv(evidence.kv_usage.get(compared, []), window.compared_engine.kv_usage),
        Arm.SPECULATIVE: _kv(evidence.kv_usage.get(Arm.SPECULATIVE, []), window.speculative_engine.kv_usage),
    }


def _add_arms(
    scope: ScopeEvidence,
    arms: Mapping[Arm, ArmRequests],
    load: WindowLoad,
    *,
    compared: Arm,
    counted: bool,
    settled: bool,
    rehearsed: bool,
    ttft_width: int,
) -> tuple[dict[Arm, dict[int, BinArm]], dict[Arm, ArmTotals], dict[int, int]]:
    """The scope's bins, totals and rehearsed bins with each arm's requests of a `counted` window added:
    to its totals (a `rehearsed` window's are not), and, when `settled` at a known load, to that load's
    bin, which a rehearsed window marks on the compared arm."""
    bins = {arm: dict(scope.bins.get(arm, {})) for arm in Arm if arm in scope.bins or arm in arms}
    totals = dict(scope.totals)
    loads = matched_load(load.offered, compared)
    marked = dict(scope.rehearsed)
    for arm, requests in arms.items() if counted else ():
        arm_load = load.arms.get(arm, ArmLoad(offered_per_replica=None))
        if not rehearsed:
            totals[arm] = _add_totals(totals.get(arm, ArmTotals()), requests, arm_load)
        value = loads.get(arm)
        if settled and requests.routed and value is not None and value > 0:
            index = load_bin(value)
            cell = bins[arm].get(index, BinArm())
            bins[arm][index] = _add_bin(cell, requests, value, arm_load.in_flight_per_replica, ttft_width)
            if rehearsed and arm is compared:
                marked[index] = marked.get(index, 0) + 1
    return bins, totals, marked


def _per_position(positions: Sequence[Moments], acceptance: Sequence[float]) -> list[Moments]:
    """Each draft position's acceptance so far, with one more window's rates (a new position starts)."""
    out = list(positions)
    for index, rate in enumerate(acceptance[:MAX_POSITIONS]):
        if index == len(out):
            out.append(Moments())
        out[index] = out[index].add(rate)
    return out


def _chunk_gaps(
    gaps: Mapping[Arm, Moments], window: ScopeWindow, compared: Arm, *, quantile: float, min_samples: int
) -> dict[Arm, Moments]:
    """The compared and speculative arms' stream cadence so far, with the window's gaps at `quantile`
    where they can be read, from the source the inter-token-latency check reads (`ratios.gap_quantiles`:
    the router's gaps of the scope, else the engines' histograms); an arm with none yet is left out."""
    out = dict(gaps)
    engines = (window.speculative_engine, window.compared_engine)
    found = gap_quantiles(
        window.speculative,
        window.compared,
        engines=engines,
        compared_arm=compared,
        quantile=quantile,
        min_samples=min_samples,
    )
    if not isinstance(found, str):
        for arm, gap in ((Arm.SPECULATIVE, found[0]), (compared, found[1])):
            out[arm] = out.get(arm, Moments()).add(gap.value)
    return {arm: moments for arm, moments in out.items() if moments.n}


def mix_changed(evidence: Evidence, scopes: Sequence[str], *, at: datetime) -> Evidence:
    """The evidence with `scopes` started again at `at`: another scope left the speculative arm, which
    from then on runs without its requests (their counts are kept)."""
    updated = {
        name: found.model_copy(update={"bins": {}, "totals": {}, "rehearsed": {}, "mix_changed_at": at})
        for name, found in evidence.scopes.items()
        if name in scopes
    }
    return evidence.model_copy(update={"scopes": {**evidence.scopes, **updated}})


def record_probes(
    evidence: Evidence, counts: Mapping[str, Mapping[ProbeKind, ProbeCounts]], *, since: datetime
) -> Evidence:
    """The evidence with each scope's probe counts of the operator's run whose rounds began at `since`:
    they replace that run's, or, from a later run, start its own beside what the earlier ones kept. A
    scope without counts yet is left as it is."""
    scopes = dict(evidence.scopes)
    for name, kinds in counts.items():
        if not kinds:
            continue
        found = scopes.get(name, ScopeEvidence())
        record = found.probes
        kept = record.kept if record.since in (None, since) else _merged(record.kept, record.current)
        probes = ProbeRecord(kept=kept, since=since, current=dict(kinds))
        scopes[name] = found.model_copy(update={"probes": probes})
    return evidence.model_copy(update={"scopes": scopes})


def watch_production(evidence: Evidence, load: WindowLoad) -> Evidence:
    """The evidence with the load production's baseline ran at over one more window (every scope)."""
    production = load.arms.get(Arm.BASELINE)
    value = production.offered_per_replica if production is not None else None
    if value is None or value <= 0:
        return evidence
    index = load_bin(value)
    return evidence.model_copy(
        update={"production": {**evidence.production, index: evidence.production.get(index, 0) + 1}}
    )


def production_quantile(production: Mapping[int, int], q: float) -> float | None:
    """Production's offered load per replica at quantile `q` of its windows: the upper edge of the bin
    that holds it (conservative for an envelope)."""
    total = sum(production.values())
    if not total:
        return None
    seen = 0
    for index in sorted(production):
        seen += production[index]
        if seen >= q * total:
            return bin_bounds(index)[1]
    return bin_bounds(max(production))[1]


def rehearsal_peak(
    per_replica: float | None, production_factor: float | None, production: Mapping[int, int]
) -> float | None:
    """The peak a rehearsal climbs to (requests per second per replica): as given, or production's
    highest measured load times the factor; None when it rests on a production never measured."""
    if per_replica is not None:
        return per_replica
    highest = production_quantile(production, 1.0)
    return highest * (production_factor or 1.0) if highest is not None else None


def with_arms(
    evidence: Evidence,
    *,
    overlap: float,
    kv_blocks: Mapping[Arm, int],
    gpus: Mapping[Arm, int],
    replicas: Mapping[Arm, int] | None = None,
    block_size: int | None = None,
) -> Evidence:
    """The evidence with the arms' current KV blocks (and their size), GPUs and replicas, and the window
    overlap."""
    blocks = {**evidence.kv_blocks, **{arm: value for arm, value in kv_blocks.items() if value > 0}}
    ready = {**evidence.replicas, **{arm: value for arm, value in (replicas or {}).items() if value > 0}}
    update = {
        "overlap": max(1.0, overlap),
        "kv_blocks": blocks,
        "block_size": block_size or evidence.block_size,
        "gpus": dict(gpus),
        "replicas": ready,
    }
    return evidence.model_copy(update=update)


STORE_BUDGET = 768 * 1024  # bytes of JSON: a ConfigMap holds at most 1 MiB, metadata included
MAX_TTFT_WIDTH = 8  # three TTFT buckets to the octave, each 26% wide


def coarsened(evidence: Evidence) -> Evidence:
    """The store with every TTFT count merged into keys twice as wide; nothing else changes."""

    def merged(cell: BinArm) -> BinArm:
        counts: dict[int, int] = {}
        for index, count in cell.ttft.items():
            key = coarse_key(index, 2 * evidence.ttft_width)
            counts[key] = counts.get(key, 0) + count
        return cell.model_copy(update={"ttft": counts})

    scopes = {
        name: scope.model_copy(
            update={"bins": {arm: {i: merged(c) for i, c in cells.items()} for arm, cells in scope.bins.items()}}
        )
        for name, scope in evidence.scopes.items()
    }
    return evidence.model_copy(update={"scopes": scopes, "ttft_width": 2 * evidence.ttft_width})


def fit(evidence: Evidence, budget: int = STORE_BUDGET) -> Evidence:
    """The store within `budget` bytes of JSON where coarser TTFT counts bring it there: many scopes over
    a wide range of loads, each bin counting a wide spread of TTFTs, would outgrow a ConfigMap."""
    while evidence.ttft_width < MAX_TTFT_WIDTH and len(dump(evidence)) > budget:
        evidence = coarsened(evidence)
    return evidence


def dump(evidence: Evidence) -> str:
    """The store as the ConfigMap holds it: compact JSON, keys in a stable order."""
    return evidence.model_dump_json(by_alias=True, exclude_defaults=False)


def load(text: str) -> Evidence:
    """The store from its ConfigMap text; raises `ValueError` naming what is wrong."""
    return Evidence.model_validate_json(text)
