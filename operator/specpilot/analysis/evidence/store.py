"""The evidence store's models: a scope's aggregates by arm and load bin, its running totals and probe
counts, and the pilot's store around them; the fine load bins they are kept in."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field

from specpilot.analysis.proportions import Sequential
from specpilot.api.common import ApiModel
from specpilot.api.spec import ProbeKind
from specpilot.api.status import Verdict
from specpilot.wire.buckets import fine_bucket_bounds
from specpilot.wire.names import Arm

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
    decode: Moments = Moments()
    """The scope's decode seconds on the arm (after each request's first token), summed in each window."""
    tokens: Moments = Moments()
    """The committed tokens those seconds decoded, summed in each window."""
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
    paired: dict[Arm, Moments] = {}
    """The scope's time per committed token on the arm less another arm's in the same window, seconds,
    for each arm binned at the same load (the compared pair with a control arm, and the alternative
    arm): the within-window difference, whose spread leaves out what both arms' windows share (the
    mirrored requests, the load's drift across a band)."""

    def merge(self, other: BinArm) -> BinArm:
        """Both cells' windows together."""
        return BinArm(
            load=self.load.merge(other.load),
            in_flight=self.in_flight.merge(other.in_flight),
            tpct=self.tpct.merge(other.tpct),
            decode=self.decode.merge(other.decode),
            tokens=self.tokens.merge(other.tokens),
            ttft_p99=self.ttft_p99.merge(other.ttft_p99),
            ttft=add_counts(self.ttft, other.ttft),
            e2e=self.e2e.merge(other.e2e),
            routed=self.routed + other.routed,
            on_time=self.on_time + other.on_time,
            paired={
                arm: self.paired.get(arm, Moments()).merge(other.paired.get(arm, Moments()))
                for arm in {**self.paired, **other.paired}
            },
        )

    @property
    def time_per_token(self) -> float | None:
        """Time per committed token over every window's tokens together, seconds: each token weighs the
        same, as in a long run, where the windows' mean (`tpct`) weighs a quiet window as much as a burst,
        and so reads a band below its long run near the knee. The windows' mean where some window's tokens
        were not kept (a store written before they were)."""
        if self.tokens.n == self.tpct.n and self.tokens.sum > 0:
            return self.decode.sum / self.tokens.sum
        return self.tpct.mean


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


def load_bin(load: float) -> int:
    """The fine bin of a load: a quarter octave wide, clamped to the range kept."""
    index = math.floor(BINS_PER_OCTAVE * math.log2(load))
    return min(max(index, BIN_RANGE[0]), BIN_RANGE[1])


def bin_bounds(index: int) -> tuple[float, float]:
    return 2 ** (index / BINS_PER_OCTAVE), 2 ** ((index + 1) / BINS_PER_OCTAVE)
