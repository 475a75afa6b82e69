"""Summaries of a run: counts by outcome and latency quantiles, overall and per scope.

Quantiles interpolate linearly between order statistics over successful requests; the counts
beside them (timeouts, rejections, errors, on-time completions over *all* requests) keep the
failures in view.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from specpilot.loadgen.sender import ClientOutcome, Status

QUANTILES = (0.5, 0.9, 0.95, 0.99)


def quantile(ordered: Sequence[float], q: float) -> float:
    """The q-quantile of sorted values, interpolating linearly between neighbours."""
    if not ordered:
        raise ValueError("quantile of no values")
    position = q * (len(ordered) - 1)
    lower = int(position)
    upper = min(lower + 1, len(ordered) - 1)
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (position - lower)


def describe(values: Iterable[float | None]) -> dict[str, float] | None:
    """Mean, quantiles and max of the values present; None when there are none."""
    ordered = sorted(v for v in values if v is not None)
    if not ordered:
        return None
    out = {"mean": sum(ordered) / len(ordered)}
    out.update({f"p{round(q * 100)}": quantile(ordered, q) for q in QUANTILES})
    out["max"] = ordered[-1]
    return out


def summarize(outcomes: Sequence[ClientOutcome], elapsed_s: float) -> dict[str, Any]:
    """Counts, on-time share, token throughput and TTFT/e2e/TPOT quantiles of some outcomes."""
    ok = [o for o in outcomes if o.status is Status.OK]
    on_time = sum(o.on_time for o in outcomes)
    tokens = sum(o.output_tokens for o in ok)
    return {
        "requests": len(outcomes),
        "ok": len(ok),
        "timeouts": sum(o.status is Status.TIMEOUT for o in outcomes),
        "rejections": sum(o.status is Status.REJECTED for o in outcomes),
        "errors": sum(o.status is Status.ERROR for o in outcomes),
        "on_time": on_time,
        "on_time_ratio": on_time / len(outcomes) if outcomes else None,
        "output_tokens": tokens,
        "output_tokens_per_s": tokens / elapsed_s if elapsed_s > 0 else None,
        "ttft_s": describe(o.ttft_s for o in ok),
        "e2e_s": describe(o.e2e_s for o in ok),
        "tpot_s": describe(o.tpot_s for o in ok),
    }


def by_scope(outcomes: Sequence[ClientOutcome], elapsed_s: float) -> dict[str, dict[str, Any]]:
    """`summarize` per scope, scopes in name order."""
    scopes = sorted({o.scope for o in outcomes})
    return {s: summarize([o for o in outcomes if o.scope == s], elapsed_s) for s in scopes}
