"""Load bands learned from the loads observed, and the crossover load with its uncertainty.

The store keeps fine fixed bins (`evidence`); a band merges adjacent bins, lowest load first, until
it holds `MIN_BAND_WINDOWS` windows. So bands follow the loads the pilot actually saw, whatever
they were, without the SRE guessing them in the spec beforehand, and a sparse tail never stands
alone on one window.

Each arm's time per committed token is a curve over its own load (the arms may carry different
loads: weights below 50%, different replica counts). The crossover is the load at which the
speculative curve rises through the baseline's, both read between band means by linear
interpolation. Its interval is a parametric bootstrap: each band mean is redrawn from a normal
with its standard error (the spread of its windows; overlapping windows count once per
window/interval), the crossing found again, and the interval read from the draws' quantiles.
Seeded, so the same evidence always gives the same interval.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

from specpilot.analysis.evidence import BinArm, Moments, bin_bounds

MIN_BAND_WINDOWS = 3
MIN_RELATIVE_SE = 0.01  # no band mean is known better than 1%: the windows overlap and drift
DRAWS = 1000


@dataclass(frozen=True, kw_only=True)
class Band:
    """Adjacent bins of one arm merged: their load range and the arm's figures there."""

    low: float  # lower edge of the lowest bin
    high: float  # upper edge of the highest bin
    load: float  # mean load of its windows
    in_flight: float | None  # mean router requests in flight per replica
    windows: int
    tpct: float  # mean time per committed token, seconds
    tpct_se: float  # its standard error
    ttft_p99: float | None
    e2e: float | None  # mean end-to-end time of ok requests, seconds
    routed: int
    on_time: int


def _merge(cells: Sequence[BinArm]) -> BinArm:
    out = BinArm()
    for cell in cells:
        out = BinArm(
            load=out.load.merge(cell.load),
            in_flight=out.in_flight.merge(cell.in_flight),
            tpct=out.tpct.merge(cell.tpct),
            ttft_p99=out.ttft_p99.merge(cell.ttft_p99),
            e2e=out.e2e.merge(cell.e2e),
            routed=out.routed + cell.routed,
            on_time=out.on_time + cell.on_time,
        )
    return out


def _se(tpct: Moments, overlap: float, pooled_cv: float | None) -> float:
    mean = tpct.mean or 0.0
    effective = max(1.0, tpct.n / max(1.0, overlap))
    sd = tpct.sd
    if sd is None:
        sd = (pooled_cv or 0.1) * mean
    return max(sd / math.sqrt(effective), MIN_RELATIVE_SE * mean)


def bands(bins: Mapping[int, BinArm], *, overlap: float = 1.0, min_windows: int = MIN_BAND_WINDOWS) -> list[Band]:
    """The arm's bands, lowest load first; a window short tail joins the band below it."""
    groups: list[list[int]] = []
    current: list[int] = []
    for index in sorted(bins):
        if bins[index].tpct.n == 0:
            continue
        current.append(index)
        if sum(bins[i].tpct.n for i in current) >= min_windows:
            groups.append(current)
            current = []
    if current:
        if groups:
            groups[-1].extend(current)
        else:
            groups.append(current)
    merged = [(group, _merge([bins[i] for i in group])) for group in groups]
    cvs = [cell.tpct.sd / cell.tpct.mean for _, cell in merged if cell.tpct.sd is not None and cell.tpct.mean]
    pooled = math.sqrt(sum(cv * cv for cv in cvs) / len(cvs)) if cvs else None
    out = []
    for group, cell in merged:
        tpct = cell.tpct.mean
        load = cell.load.mean
        if tpct is None or load is None:
            continue
        out.append(
            Band(
                low=bin_bounds(group[0])[0],
                high=bin_bounds(group[-1])[1],
                load=load,
                in_flight=cell.in_flight.mean,
                windows=cell.tpct.n,
                tpct=tpct,
                tpct_se=_se(cell.tpct, overlap, pooled),
                ttft_p99=cell.ttft_p99.mean,
                e2e=cell.e2e.mean,
                routed=cell.routed,
                on_time=cell.on_time,
            )
        )
    return out


def interpolate(points: Sequence[tuple[float, float]], x: float) -> float:
    """Piecewise-linear through (load, value) points sorted by load; flat beyond the ends."""
    if x <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in pairwise(points):
        if x <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return points[-1][1]


@dataclass(frozen=True, kw_only=True)
class Comparison:
    """The speculative arm at one of its bands against the baseline at the same load."""

    band: Band
    baseline_tpct: float  # interpolated at band.load
    ratio: float  # speculative / baseline
    extrapolated: bool = False  # band.load lies outside the loads the baseline was measured at

    @property
    def wins(self) -> bool:
        return self.ratio < 1.0


def compare(speculative: Sequence[Band], baseline: Sequence[Band]) -> list[Comparison]:
    """Each speculative band against the baseline's curve at its load."""
    if not baseline:
        return []
    curve = [(band.load, band.tpct) for band in baseline]
    out = []
    for band in speculative:
        base = interpolate(curve, band.load)
        outside = not baseline[0].low <= band.load <= baseline[-1].high
        out.append(Comparison(band=band, baseline_tpct=base, ratio=band.tpct / base, extrapolated=outside))
    return out


@dataclass(frozen=True, kw_only=True)
class Crossover:
    """The load above which ordinary decoding wins, and its interval at the confidence asked."""

    load: float
    low: float
    high: float
    confidence: float
    draws_crossing: float  # share of bootstrap draws that cross at all
    non_monotone: bool  # speculation wins again above the crossover somewhere


def _crossing(spec: Sequence[tuple[float, float]], base: Sequence[tuple[float, float]]) -> float | None:
    """The first load at which spec - base goes from negative to non-negative, on the spec loads."""
    diffs = [(x, y - interpolate(base, x)) for x, y in spec]
    for (x0, d0), (x1, d1) in pairwise(diffs):
        if d0 < 0 <= d1:
            return x0 + (x1 - x0) * (-d0) / (d1 - d0) if d1 != d0 else x0
    return None


def crossover(
    speculative: Sequence[Band], baseline: Sequence[Band], *, confidence: float, draws: int = DRAWS, seed: int = 0
) -> Crossover | None:
    """Where speculation stops winning, when it wins at some load and loses above it; else None."""
    if len(speculative) < 2 or not baseline:
        return None
    spec = [(b.load, b.tpct) for b in speculative]
    base = [(b.load, b.tpct) for b in baseline]
    point = _crossing(spec, base)
    if point is None:
        return None
    rng = random.Random(seed)
    found = []
    for _ in range(draws):
        spec_draw = [(b.load, rng.gauss(b.tpct, b.tpct_se)) for b in speculative]
        base_draw = [(b.load, rng.gauss(b.tpct, b.tpct_se)) for b in baseline]
        x = _crossing(spec_draw, base_draw)
        if x is not None:
            found.append(x)
    found.sort()
    tail = (1 - confidence) / 2
    low = found[int(tail * (len(found) - 1))] if found else point
    high = found[math.ceil((1 - tail) * (len(found) - 1))] if found else point
    above = [x for x, y in spec if x > point]
    non_monotone = any(y < interpolate(base, x) for x, y in spec if x in above)
    return Crossover(
        load=point,
        low=min(low, point),
        high=max(high, point),
        confidence=confidence,
        draws_crossing=len(found) / draws,
        non_monotone=non_monotone,
    )
