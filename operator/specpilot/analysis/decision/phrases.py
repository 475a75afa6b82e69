"""The phrases a decision's sentences share: a load, the compared arm's name, the ratios read, a flip's
figures and sentence, and the sentences on coverage, production's share, the decode share and what
users saw. A phrase only one rule says stays beside that rule."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from specpilot.analysis.bands import Comparison
from specpilot.analysis.decision.gains import DecodeShare
from specpilot.analysis.evidence import bin_bounds, production_quantile
from specpilot.api.spec import QuantileRatio
from specpilot.api.status import FallbackRecord
from specpilot.wire.names import Arm


def _load(value: float) -> str:
    return f"{value:.2f} requests per second per replica"


# What the arm speculation is compared with is called, in decisions and reports.
COMPARED_NAMES = {Arm.CONTROL: "the control arm", Arm.BASELINE: "the production baseline"}


def _arm(arm: Arm) -> str:
    return COMPARED_NAMES[arm]


def _coverage_sentence(comparisons: Sequence[Comparison], compared: Arm) -> str | None:
    """A caveat when the compared arm never ran at some of the speculative arm's loads."""
    unmeasured = [c for c in comparisons if not c.measured]
    if not unmeasured:
        return None
    loads = ", ".join(f"{c.band.low:.2f} to {c.band.high:.2f}" for c in unmeasured)
    return (
        f"{len(unmeasured)} of {len(comparisons)} speculative load band(s) ({loads}) are unmeasured: "
        f"{_arm(compared)} never ran there, and nothing is read beyond the loads it ran at."
    )


def _production_sentence(production: Mapping[int, int], top: float) -> tuple[str | None, float | None]:
    """How much of production's observed time lies at or below `top`, and the sentence saying so."""
    total = sum(production.values())
    if not total:
        return None, None
    # A bin counts as covered when its geometric middle lies at or below the top.
    covered = sum(n for index, n in production.items() if math.prod(bin_bounds(index)) ** 0.5 <= top) / total
    p50, p95, high = (production_quantile(production, q) for q in (0.5, 0.95, 1.0))
    sentence = (
        f"Production's baseline ran at or below {_load(top)} in {covered:.0%} of its windows "
        f"(p50 {p50:.2f}, p95 {p95:.2f}, max {high:.2f})."
    )
    return sentence, covered


def _share_sentence(share: DecodeShare | None) -> str | None:
    if share is None or share.decode_gain is None or share.implied_gain is None:
        return None
    observed = f" (observed {share.observed_gain:.2f}x)" if share.observed_gain else ""
    return (
        f"Decoding is {share.share:.0%} of its request time on the compared arm ({share.decode:.2f} s of "
        f"{share.e2e:.2f} s): the decode-only gain of {share.decode_gain:.2f}x implies "
        f"{share.implied_gain:.2f}x end to end{observed}."
    )


def _observed(record: FallbackRecord) -> str:
    if record.observed is None or record.threshold is None:
        return ""
    return f", {record.observed:.3g} against {record.threshold:.3g}"


def _flip_sentence(flip: FallbackRecord, load: float | None) -> str:
    """What a flip said, at the load it was placed at (`flip_load`) where its record holds one."""
    at = f" at {_load(load)}" if load is not None else ""
    return (
        f"its windows flipped it back to ordinary decoding{at} ({flip.reason.value} on "
        f"{flip.metric.value}{_observed(flip)})"
    )


def _ratios(comparisons: Sequence[Comparison]) -> str:
    return ", ".join(f"{c.ratio:.2f}x at {c.band.load:.2f}" for c in comparisons if c.ratio is not None)


def _seen_sentence(
    gain: float | None, tail: float | None, ttft: QuantileRatio, compared: Arm, top: float
) -> str | None:
    """What users saw at the loads adopted (up to `top`), as the report shows it."""
    parts = []
    if gain is not None:
        parts.append(f"requests finished {gain:.2f}x as fast end to end as on {_arm(compared)}")
    if tail is not None:
        parts.append(
            f"time to first token p{ttft.quantile * 100:g} ran {tail:.2f}x {_arm(compared)}'s "
            f"(limit {ttft.max_ratio:.2f}x)"
        )
    return f"At the loads adopted (measured up to {top:.2f}), {' and '.join(parts)}." if parts else None
