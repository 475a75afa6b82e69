"""Recording into the store: one scope's window at the arms' loads (`record_window`), a change of the
speculative arm's mix, the probe rounds' counts, and the arms' sizes."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from specpilot.analysis.evidence.store import (
    KV_POINTS,
    MAX_POSITIONS,
    ArmTotals,
    BinArm,
    Evidence,
    KvPoint,
    Moments,
    ProbeCounts,
    ProbeRecord,
    ScopeEvidence,
    _merged,
    add_counts,
    load_bin,
)
from specpilot.analysis.ratios import gap_quantiles
from specpilot.analysis.stats import nearest_rank
from specpilot.analysis.window import ArmRequests, ScopeWindow
from specpilot.api.spec import ProbeKind
from specpilot.api.spec.analysis_spec import ITL_QUANTILE, MIN_SAMPLES
from specpilot.api.status import Verdict
from specpilot.wire.buckets import coarse_key, fine_bucket
from specpilot.wire.names import Arm
from specpilot.wire.samples import RequestOutcome


@dataclass(frozen=True, kw_only=True)
class ArmLoad:
    """One arm's load over a window, over every scope it served.

    The load is the offered load per replica: requests per second, counted as they arrive (finished or
    still in flight when the router was last read), so that a slow arm reads the load it was sent. It is
    what an SRE reads off a production dashboard, and it is the same for two arms that take the same
    share at the same size whatever their speed: a faster arm holds fewer requests in flight for it, so
    concurrency is an outcome of the arm, not an axis to compare arms on, and it is kept as a diagnostic."""

    offered_per_replica: float | None  # requests sent per second, per replica
    # The same over the last minute of the stage (`RECENT_LOAD`), where the requests read reach that far:
    # the load the engines' queues answer to, which a 15 s burst within a quieter minute has not built.
    recent_per_replica: float | None = None
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

    @property
    def recent(self) -> dict[Arm, float | None]:
        """Each arm's offered load per replica over the recent span (`ArmLoad.recent_per_replica`), else
        over the window: the load its window is binned at."""
        return {
            arm: arm_load.offered_per_replica if arm_load.recent_per_replica is None else arm_load.recent_per_replica
            for arm, arm_load in self.arms.items()
        }

    @property
    def in_flight(self) -> dict[Arm, float | None]:
        """Each arm's requests in flight per replica (the router's, by Little's law)."""
        return {arm: arm_load.in_flight_per_replica for arm, arm_load in self.arms.items()}


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


def _add_bin(
    cell: BinArm,
    requests: ArmRequests,
    load: float,
    *,
    tpct: float | None,
    in_flight: float | None,
    ttft_width: int,
    paired: Mapping[Arm, float],
) -> BinArm:
    """The cell with one window of `requests` at `load`, whose time per committed token is `tpct`."""
    counted = Counter(coarse_key(fine_bucket(v), ttft_width) for v in requests.ttft_seconds if math.isfinite(v))
    return BinArm(
        load=cell.load.add(load),
        in_flight=cell.in_flight.add(in_flight),
        tpct=cell.tpct.add(tpct),
        decode=cell.decode.add(sum(requests.decode_seconds) if tpct is not None else None),
        tokens=cell.tokens.add(sum(requests.committed_tokens) if tpct is not None else None),
        ttft_p99=cell.ttft_p99.add(_p99(requests.ttft_seconds)),
        ttft=add_counts(cell.ttft, counted),
        e2e=cell.e2e.add(_mean(requests.e2e_seconds)),
        routed=cell.routed + requests.routed,
        on_time=cell.on_time + _on_time(requests),
        paired={arm: cell.paired.get(arm, Moments()).add(paired.get(arm)) for arm in {**cell.paired, **paired}},
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
    loads = matched_load(load.recent, compared)
    marked = dict(scope.rehearsed)
    binned = {
        arm: requests.time_per_committed_token
        for arm, requests in arms.items()
        if counted and settled and requests.routed and (loads.get(arm) or 0) > 0
    }
    for arm, requests in arms.items() if counted else ():
        arm_load = load.arms.get(arm, ArmLoad(offered_per_replica=None))
        if not rehearsed:
            totals[arm] = _add_totals(totals.get(arm, ArmTotals()), requests, arm_load)
        value = loads.get(arm)
        if arm in binned and value is not None:
            index = load_bin(value)
            cell = bins[arm].get(index, BinArm())
            bins[arm][index] = _add_bin(
                cell,
                requests,
                value,
                tpct=binned[arm],
                in_flight=arm_load.in_flight_per_replica,
                ttft_width=ttft_width,
                paired=_paired(arm, binned, loads),
            )
            if rehearsed and arm is compared:
                marked[index] = marked.get(index, 0) + 1
    return bins, totals, marked


def _paired(arm: Arm, tpct: Mapping[Arm, float | None], loads: Mapping[Arm, float | None]) -> dict[Arm, float]:
    """`arm`'s time per committed token less each other binned arm's (`tpct`) in the same window, for those
    binned at the same load (so in the same bin), where both measured one."""
    own = tpct[arm]
    out: dict[Arm, float] = {}
    for other, theirs in tpct.items():
        if other is not arm and loads.get(other) == loads.get(arm) and own is not None and theirs is not None:
            out[other] = own - theirs
    return out


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
