"""The figures a decision reads over matched bands: where request time goes (`DecodeShare`), the gain
users saw end to end, and the TTFT tail against the compared arm."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from specpilot.analysis.bands import Band, Comparison, counts_quantile
from specpilot.analysis.evidence import ArmTotals, ScopeEvidence, add_counts, ttft_bucket_bounds
from specpilot.analysis.stats import exceedance_pvalue
from specpilot.api.spec import QuantileRatio
from specpilot.wire.names import Arm


@dataclass(frozen=True, kw_only=True)
class DecodeShare:
    """Where a scope's request time goes on the compared arm, and what the decode gain implies."""

    ttft: float  # mean time to first token, seconds (queue and prefill, as the router sees them)
    decode: float  # mean decode time (first to last token), seconds
    e2e: float  # mean end-to-end time, seconds
    share: float  # decode / e2e
    decode_ratio: float | None  # speculative / compared time per committed token
    observed_gain: float | None  # compared / speculative mean end-to-end time

    def at(self, comparisons: Sequence[Comparison]) -> DecodeShare:
        """The decode ratio and the observed gain read over `comparisons`' matched bands, the loads a
        decision is about (every window's totals include loads it does not adopt or refuse at)."""
        ratio, gain = _pooled_ratio(comparisons), observed_gain(comparisons)
        return replace(self, decode_ratio=ratio, observed_gain=gain) if ratio is not None else self

    @property
    def decode_gain(self) -> float | None:
        return 1 / self.decode_ratio if self.decode_ratio else None

    @property
    def implied_gain(self) -> float | None:
        return implied_gain(self.share, self.decode_ratio) if self.decode_ratio is not None else None


def implied_gain(share: float, decode_ratio: float) -> float:
    """End-to-end gain when the decode share of request time runs `decode_ratio` times as long:
    7 s fixed + 3 s decode, decode halved -> 10 / 8.5 = 1.18x."""
    return 1 / (1 - share * (1 - decode_ratio))


def _tpct(totals: ArmTotals | None) -> float | None:
    return totals.decode_seconds / totals.committed_tokens if totals and totals.committed_tokens else None


def decode_share(scope: ScopeEvidence, compared: Arm = Arm.BASELINE) -> DecodeShare | None:
    """The compared arm's timing breakdown of the scope's ok requests, and the decode ratio and observed
    gain over every window."""
    base = scope.totals.get(compared)
    spec = scope.totals.get(Arm.SPECULATIVE)
    if base is None or not base.ok or not base.decoded or not base.streams or base.e2e_seconds <= 0:
        return None
    e2e = base.e2e_seconds / base.ok
    decode = base.decode_seconds / base.decoded
    base_tpct, spec_tpct = _tpct(base), _tpct(spec)
    return DecodeShare(
        ttft=base.ttft_seconds / base.streams,
        decode=decode,
        e2e=e2e,
        share=min(1.0, decode / e2e),
        decode_ratio=spec_tpct / base_tpct if spec_tpct is not None and base_tpct else None,
        observed_gain=e2e / (spec.e2e_seconds / spec.ok) if spec is not None and spec.ok and spec.e2e_seconds else None,
    )


def _pooled(comparisons: Sequence[Comparison], figure: Callable[[Band], float | None]) -> tuple[float, float] | None:
    """A band figure summed over the matched bands where both arms have it, each band weighted by its
    windows: (speculative, compared); None where no band has it on both."""
    pairs = [
        (c.band.windows, spec, ref)
        for c in comparisons
        if c.compared is not None and (spec := figure(c.band)) and (ref := figure(c.compared))
    ]
    if not pairs:
        return None
    return sum(n * spec for n, spec, _ in pairs), sum(n * ref for n, _, ref in pairs)


@dataclass(frozen=True, kw_only=True)
class TtftTail:
    """The speculative arm's TTFT quantile against the compared arm's over every request of the matched
    bands, and whether that is shown above the limit."""

    ratio: float
    requests: int  # distinct speculative requests (the counts over the windows' overlap)
    p_value: float  # of "within the limit": the judge's precedence test (`ratios.quantile_check`)


def ttft_tail(comparisons: Sequence[Comparison], *, limit: QuantileRatio, overlap: float) -> TtftTail | None:
    """Pooled from the bands' per-bucket counts, so every request weighs the same (a window's p99 over
    a few dozen requests is its slowest one). Requests count once, not once per window they fall in,
    and a value counts above the limit only when its whole bucket is. None where no matched band has
    TTFTs on both arms."""
    spec: dict[int, int] = {}
    ref: dict[int, int] = {}
    for c in comparisons:
        if c.compared is not None and c.band.ttft and c.compared.ttft:
            spec, ref = add_counts(spec, c.band.ttft), add_counts(ref, c.compared.ttft)
    width = next((c.band.ttft_width for c in comparisons), 1)
    spec_q, ref_q = counts_quantile(spec, limit.quantile, width), counts_quantile(ref, limit.quantile, width)
    if spec_q is None or ref_q is None:
        return None
    cut = limit.max_ratio * ref_q
    above = sum(count for index, count in spec.items() if ttft_bucket_bounds(index)[0] >= cut)
    share = 1 / max(1.0, overlap)
    trials, reference = (max(1, round(sum(counts.values()) * share)) for counts in (spec, ref))
    rank = max(1, math.ceil(limit.quantile * reference))
    p_value = exceedance_pvalue(min(trials, round(above * share)), trials, rank=rank, reference=reference)
    return TtftTail(ratio=spec_q / ref_q, requests=trials, p_value=p_value)


def observed_gain(comparisons: Sequence[Comparison]) -> float | None:
    """The compared arm's mean end-to-end time over the speculative arm's, over matched bands (each
    weighted by its windows): what users saw, at the loads compared."""
    pooled = _pooled(comparisons, lambda band: band.e2e)
    return pooled[1] / pooled[0] if pooled is not None else None


def _pooled_ratio(comparisons: Sequence[Comparison]) -> float | None:
    """Time per committed token over the matched bands, the band's arm over the compared one."""
    pooled = _pooled(comparisons, lambda band: band.tpct)
    return pooled[0] / pooled[1] if pooled is not None else None
