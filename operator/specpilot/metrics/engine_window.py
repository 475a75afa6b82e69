"""One arm's engines over a window, from timestamped scrapes of its pods: `ArmEngine`.

Counters are differenced per series (pod, engine, labels) from the scrape nearest the window's
start to the one nearest its end, through every scrape between (so a reset between two of them
is seen), then summed over the arm's pods before anything is divided; a failed scrape between
the edges costs no count (the next one carries it). Gauges are sampled once per scrape cycle (the
scrapes of one cycle share their `at`), and a cycle in which a pod did not answer has no point.

Pods that come and go:

- A pod with no scrape near the window's start counts from zero if its process started within
  the window (``process_start_time_seconds``): everything it counted happened inside. Otherwise
  (it started earlier, or the exposition does not say) its value at the start is unknown and the
  window is inconclusive.
- A pod with no scrape near the window's end is a gap (it went away or stopped answering, and what
  it counted since its last scrape is lost): inconclusive.
- A pod that restarted inside the window (its process start time changed, or a counter went down)
  is counted as PromQL's ``increase`` would, a lower bound, and the window is inconclusive.

A scrape with a truncated or garbage exposition, a family missing or a NaN in what is read leaves
that pod out of the figures and makes the window inconclusive. No traffic is not inconclusive: a
figure that has nothing to divide by is None.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from specpilot.analysis.window import ArmEngine
from specpilot.metrics.counters import Increase, bucket_increases, increase, total
from specpilot.metrics.exposition import Exposition, Labels, label
from specpilot.metrics.quantile import bucket_quantile

GENERATION_TOKENS = "vllm:generation_tokens_total"
DECODE_SUM = "vllm:request_decode_time_seconds_sum"
DECODE_COUNT = "vllm:request_decode_time_seconds_count"
PREEMPTIONS = "vllm:num_preemptions_total"
ITL_BUCKETS = "vllm:inter_token_latency_seconds_bucket"
DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
KV_USAGE = "vllm:kv_cache_usage_perc"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
PROCESS_START = "process_start_time_seconds"

# The families `engine_window` reads, as `parse_exposition` takes them.
ENGINE_FAMILIES = (
    "vllm:generation_tokens",
    "vllm:request_decode_time_seconds",
    "vllm:num_preemptions",
    "vllm:inter_token_latency_seconds",
    "vllm:kv_cache_usage_perc",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:spec_decode_num_drafts",
    "vllm:spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens",
    "vllm:spec_decode_num_accepted_tokens_per_pos",
    PROCESS_START,
    "vllm:cache_config_info",  # num_gpu_blocks, for the report's cost view (metrics.load)
)
_COUNTERS = (GENERATION_TOKENS, DECODE_SUM, DECODE_COUNT, PREEMPTIONS, ITL_BUCKETS)
_SPEC_COUNTERS = (DRAFTS, DRAFT_TOKENS, ACCEPTED, ACCEPTED_PER_POS)
_GAUGES = (KV_USAGE, RUNNING, WAITING)
_MAX_REASONS = 5  # a thousand pods failing alike need not spell out every one


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineScrape:
    """One pod's /metrics as parsed, stamped with the time its scrape cycle began."""

    at: datetime
    pod: str
    exposition: Exposition

    @property
    def process_start(self) -> float | None:
        """The serving process's start, Unix seconds (single API server only; multiprocess mode has none)."""
        values = list(self.exposition.series(PROCESS_START).values())
        return values[0] if len(values) == 1 and math.isfinite(values[0]) else None


@dataclass(frozen=True, slots=True, kw_only=True)
class ScrapeFailure:
    """A scrape that produced no exposition: refused, timed out, not 200, cut off."""

    at: datetime
    pod: str
    reason: str


Scrape = EngineScrape | ScrapeFailure


def engine_window(
    scrapes: Iterable[Scrape],
    *,
    start: datetime,
    end: datetime,
    tolerance: timedelta,
    quantile: float,
    speculative: bool,
) -> ArmEngine:
    """The arm's engine figures over [start, end] from its pods' scrapes (others are ignored).

    `tolerance` is how far from an edge the scrape standing for it may be (about one scrape
    interval); `quantile` is the inter-token-latency quantile; `speculative` requires the spec-decode
    counters (an ordinary arm has none).
    """
    reasons: list[str] = []
    by_pod: dict[str, list[Scrape]] = {}
    for scrape in scrapes:
        if start - tolerance <= scrape.at <= end + tolerance:
            by_pod.setdefault(scrape.pod, []).append(scrape)
    if not by_pod:
        return ArmEngine(inconclusive="no engine scrape within the window")
    required = _COUNTERS + _GAUGES + (_SPEC_COUNTERS if speculative else ())
    grown: dict[str, list[tuple[Labels, Increase]]] = {name: [] for name in _COUNTERS + _SPEC_COUNTERS}
    counted = 0
    for pod, entries in sorted(by_pod.items()):
        entries.sort(key=lambda entry: entry.at)
        span = _span(pod, entries, start=start, end=end, tolerance=tolerance, required=required, reasons=reasons)
        if span is None:
            continue
        used, from_zero = span
        snapshots = [None, *(s.exposition for s in used)] if from_zero else [s.exposition for s in used]
        pod_grown = {name: _increases(snapshots, name) for name in grown}
        for name, items in pod_grown.items():
            grown[name].extend(items)
        counted += 1
        restart = _restart(pod, used, pod_grown)
        if restart is not None:
            reasons.append(restart)
    kv, running, waiting, batch_seen = _gauges(by_pod, start=start, end=end)
    generated, decode, finished = (_sum(grown[name]) for name in (GENERATION_TOKENS, DECODE_SUM, DECODE_COUNT))
    drafts, draft_tokens, accepted = (_sum(grown[name]) for name in (DRAFTS, DRAFT_TOKENS, ACCEPTED))
    itl = bucket_quantile(quantile, bucket_increases(grown[ITL_BUCKETS])) if counted else None
    return ArmEngine(
        time_per_committed_token=decode / (generated - finished) if generated - finished > 0 else None,
        acceptance_rate=accepted / draft_tokens if draft_tokens > 0 else None,
        acceptance_length=1 + accepted / drafts if drafts > 0 else None,
        per_position_acceptance=_per_position(grown[ACCEPTED_PER_POS], drafts),
        kv_usage=kv,
        inter_token_latency=itl,
        preemptions=round(_sum(grown[PREEMPTIONS])),
        running=sum(running) / len(running) if running else None,
        waiting=sum(waiting) / len(waiting) if waiting else None,
        batch_seen=batch_seen,
        inconclusive=summarize_reasons(reasons),
    )


def _span(
    pod: str,
    entries: Sequence[Scrape],
    *,
    start: datetime,
    end: datetime,
    tolerance: timedelta,
    required: tuple[str, ...],
    reasons: list[str],
) -> tuple[list[EngineScrape], bool] | None:
    """The pod's scrapes from the window's start to its end, and whether it counts from zero; or None with a reason."""
    ok = [entry for entry in entries if isinstance(entry, EngineScrape)]
    failures = [entry for entry in entries if isinstance(entry, ScrapeFailure)]
    if not ok:
        reasons.append(f"{pod}: no successful scrape within the window (last: {failures[-1].reason})")
        return None
    within = f"within {tolerance.total_seconds():g}s of the window"
    first, last_index = _nearest(ok, start, tolerance), _nearest(ok, end, tolerance)
    if last_index is None:
        after = [failure.reason for failure in failures if failure.at > ok[-1].at]
        then = f"; then: {after[-1]}" if after else ""
        reasons.append(f"{pod}: no scrape {within} end (last good scrape at {_time(ok[-1].at)}{then})")
        return None
    used: list[EngineScrape]
    if first is None:
        started = ok[0].process_start
        if started is None or started < start.timestamp():
            how = "its start time is unknown" if started is None else "it started before the window"
            reasons.append(f"{pod}: no scrape {within} start, and {how}")
            return None
        used = ok[: last_index + 1]
    elif first >= last_index:
        reasons.append(f"{pod}: one scrape stands for both the window's start and its end")
        return None
    else:
        used = ok[first : last_index + 1]
    for scrape in used:
        if scrape.exposition.problems:
            more = len(scrape.exposition.problems) - 1
            extra = f" (+{more} more)" if more else ""
            reasons.append(f"{pod} at {_time(scrape.at)}: {scrape.exposition.problems[0]}{extra}")
            return None
        missing = [name for name in required if name not in scrape.exposition.samples]
        if missing:
            reasons.append(f"{pod} at {_time(scrape.at)}: no {', '.join(missing)}")
            return None
        nan = [name for name in required if any(math.isnan(v) for v in scrape.exposition.series(name).values())]
        if nan:
            reasons.append(f"{pod} at {_time(scrape.at)}: NaN in {', '.join(nan)}")
            return None
    return used, first is None


def _nearest(ok: Sequence[EngineScrape], at: datetime, tolerance: timedelta) -> int | None:
    best = min(range(len(ok)), key=lambda i: abs(ok[i].at - at))
    return best if abs(ok[best].at - at) <= tolerance else None


def _restart(pod: str, used: Sequence[EngineScrape], grown: dict[str, list[tuple[Labels, Increase]]]) -> str | None:
    """Why the pod's counts are lower bounds: its process start time changed, or a counter went down."""
    for before, after in itertools.pairwise(used):
        started = (before.process_start, after.process_start)
        if None not in started and started[0] != started[1]:
            return f"{pod}: restarted between {_time(before.at)} and {_time(after.at)} (counters reset)"
    if any(grown_by.resets for items in grown.values() for _, grown_by in items):
        return f"{pod}: counters went down between {_time(used[0].at)} and {_time(used[-1].at)} (reset by a restart)"
    return None


def _increases(snapshots: Sequence[Exposition | None], name: str) -> list[tuple[Labels, Increase]]:
    """Per series of one pod: its increase over the snapshots (None, or a series not there yet, is 0)."""
    keys = dict.fromkeys(labels for snapshot in snapshots if snapshot for labels in snapshot.series(name))
    return [
        (labels, increase([snapshot.series(name).get(labels, 0.0) if snapshot else 0.0 for snapshot in snapshots]))
        for labels in keys
    ]


def _sum(increases: Iterable[tuple[Labels, Increase]]) -> float:
    return total(grown for _, grown in increases).value


def _per_position(increases: Iterable[tuple[Labels, Increase]], drafts: float) -> tuple[float, ...]:
    if drafts <= 0:
        return ()
    by_position: dict[int, float] = {}
    for labels, grown in increases:
        position = label(labels, "position")
        if position is not None and position.isdigit():
            by_position[int(position)] = by_position.get(int(position), 0.0) + grown.value
    return tuple(by_position[i] / drafts for i in sorted(by_position))


def _gauges(
    by_pod: dict[str, list[Scrape]], *, start: datetime, end: datetime
) -> tuple[tuple[tuple[datetime, float], ...], list[float], list[float], float | None]:
    """Per scrape cycle inside the window: the highest KV usage of the pods, and running/waiting summed.

    A cycle in which a pod did not answer, or answered without a usable gauge, has no point: its
    maximum or sum would be a guess.
    """
    cycles: dict[datetime, list[Scrape]] = {}
    for entries in by_pod.values():
        for entry in entries:
            if start <= entry.at <= end:
                cycles.setdefault(entry.at, []).append(entry)
    kv: list[tuple[datetime, float]] = []
    running: list[float] = []
    waiting: list[float] = []
    seen, weight = 0.0, 0.0
    for at in sorted(cycles):
        values = [_cycle_gauges(entry) for entry in cycles[at]]
        if any(v is None for v in values):
            continue
        usable = [v for v in values if v is not None]
        kv.append((at, max(v[0] for v in usable)))
        running.append(sum(v[1] for v in usable))
        waiting.append(sum(v[2] for v in usable))
        seen += sum(v[1] * v[1] for v in usable)
        weight += sum(v[1] for v in usable)
    return tuple(kv), running, waiting, seen / weight if weight > 0 else None


def _cycle_gauges(entry: Scrape) -> tuple[float, float, float] | None:
    """(highest KV usage over the pod's engines, running, waiting), or None if not usable."""
    if isinstance(entry, ScrapeFailure) or entry.exposition.problems:
        return None
    kv, running, waiting = (list(entry.exposition.series(name).values()) for name in _GAUGES)
    if not kv or not running or not waiting or any(math.isnan(v) for v in (*kv, *running, *waiting)):
        return None
    return max(kv), sum(running), sum(waiting)


def summarize_reasons(reasons: Sequence[str]) -> str | None:
    """The reasons in one line, the first few spelled out; None when there are none."""
    if not reasons:
        return None
    shown = "; ".join(reasons[:_MAX_REASONS])
    more = len(reasons) - _MAX_REASONS
    return f"{shown}; and {more} more" if more > 0 else shown


def _time(at: datetime) -> str:
    return at.isoformat(timespec="seconds")
