"""One scope's requests to one arm over a window, from the router's per-request samples: `ArmRequests`.

A request belongs to the window in which it finished (``at + e2e``, on the router's clock), so
adjacent windows [start, end) share none. Every outcome is counted (it is the denominator of
every rate); speed comes only from what yields it: decode time and the tokens after the first
from ok streams with at least two output tokens, TTFT and chunk gaps from ok streams, e2e from ok
requests.

`kv_load` is the KV cache a scope's requests held on an arm over a span, for putting KV pressure on
the scope that causes it: every request that reached an engine counts (a timed-out one held its
cache too), for the part of its hold that falls in the span.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from datetime import datetime

from specpilot.analysis.limits import ANSWERABLE, TIMEOUTS
from specpilot.analysis.window import ArmRequests
from specpilot.wire.buckets import FineCounts
from specpilot.wire.names import Arm
from specpilot.wire.samples import RequestOutcome, RequestSample


def finished_at(sample: RequestSample) -> float:
    """When the request ended, Unix seconds."""
    return sample.at + sample.e2e


def arm_requests(
    samples: Iterable[RequestSample], *, scope: str, arm: Arm, start: datetime, end: datetime
) -> ArmRequests:
    """The scope's requests to `arm` that finished within [start, end)."""
    since, until = start.timestamp(), end.timestamp()
    outcomes: Counter[RequestOutcome] = Counter()
    late = 0
    answerable: list[float] = []
    timeouts: list[float] = []
    decode: list[float] = []
    committed: list[int] = []
    ttft: list[float] = []
    e2e: list[float] = []
    gaps: list[FineCounts] = []
    for sample in samples:
        if sample.scope != scope or sample.arm is not arm or not since <= finished_at(sample) < until:
            continue
        outcomes[sample.outcome] += 1
        if sample.outcome in ANSWERABLE:
            answerable.append(sample.at)
        if sample.outcome in TIMEOUTS:
            timeouts.append(sample.at)
        if sample.outcome is not RequestOutcome.OK:
            continue
        e2e.append(sample.e2e)
        if sample.deadline_met is False:
            late += 1
            timeouts.append(sample.at)
        if not sample.stream:
            continue
        if sample.ttft is not None:
            ttft.append(sample.ttft)
        if sample.chunk_gaps.counts:
            gaps.append(sample.chunk_gaps)
        if sample.decode is not None and sample.output_tokens is not None and sample.output_tokens >= 2:
            decode.append(sample.decode)
            committed.append(sample.output_tokens - 1)
    return ArmRequests(
        outcomes=dict(outcomes),
        late=late,
        answerable_starts=tuple(sorted(answerable)),
        timeout_starts=tuple(sorted(timeouts)),
        decode_seconds=tuple(decode),
        committed_tokens=tuple(committed),
        ttft_seconds=tuple(ttft),
        e2e_seconds=tuple(e2e),
        chunk_gaps=FineCounts.pooled(gaps),
        gap_streams=len(gaps),
    )


def kv_load(samples: Iterable[RequestSample], *, scope: str, arm: Arm, start: datetime, end: datetime) -> float:
    """Token-seconds of KV cache the scope's requests held on `arm` within [start, end).

    A request holds its prompt and its growing output (half of it, on average) while it decodes
    (time queued for the cache holds none), else for the whole request when it was not streamed;
    one that reached no engine held nothing, and an unknown count counts as none."""
    since, until = start.timestamp(), end.timestamp()
    total = 0.0
    for sample in samples:
        if sample.scope != scope or sample.arm is not arm or not sample.endpoint:
            continue
        finish = finished_at(sample)
        held = sample.decode if sample.decode is not None else sample.e2e
        overlap = min(finish, until) - max(finish - held, since)
        if overlap > 0:
            total += ((sample.prompt_tokens or 0) + (sample.output_tokens or 0) / 2) * overlap
    return total
