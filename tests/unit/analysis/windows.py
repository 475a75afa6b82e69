"""Windows built to order for the judge and the rollout tests."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from specpilot.analysis.stats import BucketQuantile
from specpilot.analysis.window import ArmEngine, ArmRequests, ScopeWindow
from specpilot.wire.samples import RequestOutcome

END = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
START = END - timedelta(minutes=5)


def arm(
    n: int = 200,
    *,
    seed: int = 1,
    per_token: float = 0.01,
    ttft: float = 0.1,
    ttft_factor: float = 1.0,
    failures: dict[RequestOutcome, int] | None = None,
    late: int = 0,
) -> ArmRequests:
    """`n` ok streamed requests with noisy per-token decode times, plus `failures` on top."""
    rng = random.Random(seed)
    tokens = tuple(rng.randint(20, 400) for _ in range(n))
    decode = tuple(t * per_token * rng.lognormvariate(0, 0.2) for t in tokens)
    first = tuple(ttft * ttft_factor * rng.lognormvariate(0, 0.3) for _ in range(n))
    return ArmRequests(
        outcomes={RequestOutcome.OK: n, **(failures or {})},
        late=late,
        decode_seconds=decode,
        committed_tokens=tokens,
        ttft_seconds=first,
        e2e_seconds=tuple(a + b for a, b in zip(first, decode, strict=True)),
    )


def engine(usage: float = 0.4, *, acceptance: float | None = 2.5, scrapes: int = 31, itl: float = 0.03) -> ArmEngine:
    """Scrapes every 10 s over the window, all at `usage`; engine steps `itl` s apart at the quantile
    (exactly: the bucket is the point)."""
    step = (END - START) / (scrapes - 1)
    return ArmEngine(
        kv_usage=tuple((START + i * step, usage) for i in range(scrapes)),
        acceptance_length=acceptance,
        inter_token_latency=BucketQuantile(value=itl, low=itl, high=itl),
    )


def window(
    speculative: ArmRequests | None = None,
    compared: ArmRequests | None = None,
    *,
    speculative_engine: ArmEngine | None = None,
    gaps: tuple[str, ...] = (),
    end: datetime = END,
) -> ScopeWindow:
    """Identical arms unless told otherwise (different seeds: same distribution, other draws)."""
    shift = end - END
    spec_engine = speculative_engine or engine()
    return ScopeWindow(
        scope="code",
        start=START + shift,
        end=end,
        compared=compared or arm(seed=2),
        speculative=speculative or arm(seed=3),
        compared_engine=engine(),
        speculative_engine=replace(spec_engine, kv_usage=tuple((at + shift, u) for at, u in spec_engine.kv_usage)),
        gaps=gaps,
    )
