"""One closed window of one scope, as the judge reads it: what each arm did with the scope's requests,
and what each arm's engines reported.

`specpilot.metrics` builds these from the router's per-request samples and the engines' /metrics;
the judge only reads them. Per-scope speed comes from the requests (engines cannot tell scopes
apart); the engine figures are arm-wide diagnostics and hard limits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from specpilot.analysis.stats import BucketQuantile
from specpilot.wire.buckets import FineCounts
from specpilot.wire.names import Arm
from specpilot.wire.samples import RequestOutcome


@dataclass(frozen=True, kw_only=True)
class ArmRequests:
    """The scope's requests that the router sent to one arm and that finished within the window.

    `outcomes` counts every request, failures included: it is the denominator of every rate. The
    tuples hold one value per request that yields it: `decode_seconds` and `committed_tokens` are
    paired (ok streamed requests with at least two output tokens: decode time, and output tokens
    after the first); `ttft_seconds` is per ok streamed request; `e2e_seconds` per ok request.
    `chunk_gaps` pools the gaps between chunks of output that the router counted on ok streams, of
    which `gap_streams` had any (none from a router that does not count them).
    `answerable_starts` and `timeout_starts` are when requests began (Unix seconds, sorted): every
    request the rates count, and those the timeout rate counts (timed out, or ok but late)."""

    outcomes: Mapping[RequestOutcome, int] = field(default_factory=dict)
    late: int = 0  # ok but after the scope's deadline
    answerable_starts: tuple[float, ...] = ()
    timeout_starts: tuple[float, ...] = ()
    decode_seconds: tuple[float, ...] = ()
    committed_tokens: tuple[int, ...] = ()
    ttft_seconds: tuple[float, ...] = ()
    e2e_seconds: tuple[float, ...] = ()
    chunk_gaps: FineCounts = field(default_factory=FineCounts)
    gap_streams: int = 0

    @property
    def routed(self) -> int:
        """Every request sent to the arm, whatever its outcome."""
        return sum(self.outcomes.values())

    def count(self, *outcomes: RequestOutcome) -> int:
        return sum(self.outcomes.get(outcome, 0) for outcome in outcomes)

    @property
    def time_per_committed_token(self) -> float | None:
        """Accumulated decode time over accumulated tokens after the first, in seconds."""
        tokens = sum(self.committed_tokens)
        return sum(self.decode_seconds) / tokens if tokens > 0 else None


@dataclass(frozen=True, kw_only=True)
class ArmEngine:
    """One arm's engines over the window, summed over its ready pods (counter deltas, gauge samples)."""

    time_per_committed_token: float | None = None  # seconds: Δdecode sum / (Δgeneration tokens - Δfinished)
    acceptance_rate: float | None = None  # Δaccepted / Δdraft tokens
    acceptance_length: float | None = None  # 1 + Δaccepted / Δdrafts: committed tokens per round
    per_position_acceptance: tuple[float, ...] = ()  # acceptance rate at draft position 0, 1, ...
    kv_usage: tuple[tuple[datetime, float], ...] = ()  # (scrape time, highest kv_cache_usage_perc of its pods)
    # Seconds, at thresholds.interTokenLatency.quantile, from bucket deltas: the point and its bucket.
    inter_token_latency: BucketQuantile | None = None
    preemptions: int = 0
    running: float | None = None  # mean of num_requests_running over the scrapes
    waiting: float | None = None  # mean of num_requests_waiting over the scrapes
    # The batch a generated token saw: sum of running^2 over sum of running, per pod and scrape (a
    # pod's batch weighted by its own size, as tokens are). Under a fluctuating load this exceeds the
    # mean batch, and it is what the per-token cost of speculation depends on.
    batch_seen: float | None = None
    inconclusive: str | None = None  # why these figures cannot be trusted (missing, NaN, truncated, reset)


@dataclass(frozen=True, kw_only=True)
class ScopeWindow:
    """Everything the judge needs about one scope's window, speculative arm against the arm it is
    compared with (`compared_arm`): the control arm when the pilot runs one (the baseline's engine at
    the speculative arm's size and share), else production's baseline."""

    scope: str
    start: datetime
    end: datetime
    compared: ArmRequests
    speculative: ArmRequests
    compared_engine: ArmEngine
    speculative_engine: ArmEngine
    compared_arm: Arm = Arm.CONTROL
    # The alternative arm's requests, where the pilot runs one: the same share on the same GPU budget,
    # without speculation, judged against the compared arm too.
    alternative: ArmRequests | None = None
    # Why the sources could not see the whole window (dropped samples, a router restart, a failed
    # scrape): the window is inconclusive, never a pass.
    gaps: tuple[str, ...] = ()
