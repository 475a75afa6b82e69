"""One scope's requests to one arm over a window, from the router's per-request samples: `ArmRequests`.

A request belongs to the window in which it finished (``at + e2e``, on the router's clock), so
adjacent windows [start, end) share none. Every outcome is counted (it is the denominator of
every rate); speed comes only from what yields it: decode time and the tokens after the first
from ok streams with at least two output tokens, TTFT from ok streams, e2e from ok requests. The
KV-cache load counts every request that reached an engine, since a timed-out one held its cache too.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from datetime import datetime

from specpilot.analysis.window import ArmRequests
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
    decode: list[float] = []
    committed: list[int] = []
    ttft: list[float] = []
    e2e: list[float] = []
    kv_load = 0.0
    for sample in samples:
        if sample.scope != scope or sample.arm is not arm or not since <= finished_at(sample) < until:
            continue
        outcomes[sample.outcome] += 1
        kv_load += kv_token_seconds(sample)
        if sample.outcome is not RequestOutcome.OK:
            continue
        e2e.append(sample.e2e)
        if sample.deadline_met is False:
            late += 1
        if not sample.stream:
            continue
        if sample.ttft is not None:
            ttft.append(sample.ttft)
        if sample.decode is not None and sample.output_tokens is not None and sample.output_tokens >= 2:
            decode.append(sample.decode)
            committed.append(sample.output_tokens - 1)
    return ArmRequests(
        outcomes=dict(outcomes),
        late=late,
        decode_seconds=tuple(decode),
        committed_tokens=tuple(committed),
        ttft_seconds=tuple(ttft),
        e2e_seconds=tuple(e2e),
        kv_load=kv_load,
    )


def kv_token_seconds(sample: RequestSample) -> float:
    """KV cache the request held on its engine, in token-seconds: the prompt, and the output growing
    over it, for as long as it was decoding (time queued for the cache holds none), else for the
    whole request; zero when it reached no engine (an unknown count counts as none)."""
    if not sample.endpoint:
        return 0.0
    held = sample.decode if sample.decode is not None else sample.e2e
    return ((sample.prompt_tokens or 0) + (sample.output_tokens or 0) / 2) * held
