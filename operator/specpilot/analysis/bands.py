"""Load bands learned from the loads observed, matched comparisons, and the crossover load.

The store keeps fine fixed bins of offered load (`evidence`); a band merges adjacent bins of the
speculative arm, lowest load first, until it holds `MIN_BAND_WINDOWS` windows' worth of distinct
requests (overlapping windows share theirs). So bands follow the loads the pilot actually saw,
without the SRE guessing them in the spec beforehand. A sparse tail above the last full band stands
alone, shown but too thin to decide on or to read a crossover against (`Comparison.powered`): joined
to the band below, the few windows of a climb's next stage before its flip would dilute that band's win
into a mixed figure.

Each speculative band is compared with the compared arm's windows in the same bins, and nowhere else:
no value is read between or beyond the loads the compared arm was measured at. With a control arm the
pair is binned at one load, so every band is matched, and the two arms are compared window by window:
the control arm serves a copy of each speculative request at the same moment, so the spread of each
window's difference leaves out what they share (the requests' lengths, the load's drift across a band)
and is what a difference is tested against (`Comparison.excess`); without one, a band whose bins the
baseline never ran in is unmeasured, an unmeasured band never wins, and the arms' windows are taken as
independent. The crossover is the load at which the difference between the arms turns from
speculation's favour, read between adjacent matched bands. Its interval is a parametric bootstrap: each
band's difference is redrawn from a normal with its standard error (overlapping windows count once per
window/interval), the crossing found again, and the interval read from the draws' quantiles. Seeded,
so the same evidence always gives the same interval.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from statistics import NormalDist

from specpilot.analysis.evidence import BinArm, Moments, bin_bounds
from specpilot.wire.buckets import FineCounts
from specpilot.wire.names import Arm

MIN_BAND_WINDOWS = 3
MIN_GAIN = 1.03  # a band is a win only when speculation is at least 3% faster there
MIN_INDEPENDENT = MIN_BAND_WINDOWS  # and only on as many windows' worth of requests no two windows share
MIN_RELATIVE_SE = 0.01  # no band mean is known better than 1%: the windows overlap and drift
# Nor a pair's difference better than half that: the drift cancels out of it, but windows a few seconds
# apart share the engines' queues. At 1% a 3% margin could be shown at three standard errors at most,
# which the level spent over a revised decision's looks outgrows by its fourth (`scheduled.noninferior_level`).
MIN_PAIRED_RELATIVE_SE = 0.005
DRAWS = 1000


@dataclass(frozen=True, kw_only=True)
class Band:
    """Adjacent bins of one arm merged: their load range and the arm's figures there."""

    first: int  # index of the lowest bin
    last: int  # index of the highest bin
    low: float  # lower edge of the lowest bin
    high: float  # upper edge of the highest bin
    load: float  # mean load of its windows
    in_flight: float | None  # mean router requests in flight per replica
    windows: int
    independent: float  # windows / overlap: how many windows' worth of distinct requests it holds
    tpct: float  # time per committed token over its windows' tokens (`BinArm.time_per_token`), seconds
    tpct_se: float  # its standard error
    ttft: Mapping[int, int]  # times to first token per fine bucket (`wire.buckets`), once per window
    ttft_width: int  # fine buckets each key of `ttft` spans (`Evidence.ttft_width`)
    ttft_p99: float | None  # p99 time to first token over its requests, seconds
    e2e: float | None  # mean end-to-end time of ok requests, seconds
    routed: int
    on_time: int
    paired_se: Mapping[Arm, float] = field(default_factory=dict)
    """The standard error of its time per committed token less each other arm's, read from the windows
    both measured (`BinArm.paired`), where they are `MIN_BAND_WINDOWS` or more."""


def _merge(cells: Sequence[BinArm]) -> BinArm:
    out = BinArm()
    for cell in cells:
        out = out.merge(cell)
    return out


def counts_quantile(counts: Mapping[int, int], q: float, width: int = 1) -> float | None:
    """The q-quantile (nearest rank) of values counted per TTFT bucket (each key spanning `width` fine
    buckets), placed within its bucket by rank (`FineCounts.placed`), so that a store compacted into
    wider buckets reads nearly what it read before."""
    return FineCounts(counts, width).placed(q)


def _se(tpct: Moments, overlap: float, pooled_cv: float | None) -> float:
    mean = tpct.mean or 0.0
    effective = max(1.0, tpct.n / max(1.0, overlap))
    sd = tpct.sd
    if sd is None:
        sd = (pooled_cv or 0.1) * mean
    return max(sd / math.sqrt(effective), MIN_RELATIVE_SE * mean)


def _paired_se(paired: Mapping[Arm, Moments], overlap: float, mean: float) -> dict[Arm, float]:
    """Each within-window difference's standard error, on as many windows as its requests fill, no
    smaller than `MIN_PAIRED_RELATIVE_SE` of the band's mean; an arm paired in fewer than `MIN_BAND_WINDOWS`
    windows is left out."""
    out = {}
    for arm, moments in paired.items():
        if moments.n >= MIN_BAND_WINDOWS and moments.sd is not None:
            effective = max(1.0, moments.n / max(1.0, overlap))
            out[arm] = max(moments.sd / math.sqrt(effective), MIN_PAIRED_RELATIVE_SE * mean)
    return out


def bands(
    bins: Mapping[int, BinArm], *, overlap: float = 1.0, min_windows: float = MIN_BAND_WINDOWS, ttft_width: int = 1
) -> list[Band]:
    """The arm's bands, lowest load first, each holding `min_windows` windows' worth of distinct requests
    (so `min_windows` x overlap windows); a short tail stands alone above them. `ttft_width` is the
    store's (`Evidence.ttft_width`)."""
    target = min_windows * max(1.0, overlap)
    groups: list[list[int]] = []
    current: list[int] = []
    for index in sorted(bins):
        if bins[index].tpct.n == 0:
            continue
        current.append(index)
        if sum(bins[i].tpct.n for i in current) >= target - 1e-9:
            groups.append(current)
            current = []
    if current:
        groups.append(current)
    merged = [(group, _merge([bins[i] for i in group])) for group in groups]
    cvs = [cell.tpct.sd / cell.tpct.mean for _, cell in merged if cell.tpct.sd is not None and cell.tpct.mean]
    pooled = math.sqrt(sum(cv * cv for cv in cvs) / len(cvs)) if cvs else None
    out = []
    for group, cell in merged:
        tpct = cell.time_per_token
        load = cell.load.mean
        if tpct is None or load is None:
            continue
        out.append(
            Band(
                first=group[0],
                last=group[-1],
                low=bin_bounds(group[0])[0],
                high=bin_bounds(group[-1])[1],
                load=load,
                in_flight=cell.in_flight.mean,
                windows=cell.tpct.n,
                independent=cell.tpct.n / max(1.0, overlap),
                tpct=tpct,
                tpct_se=_se(cell.tpct, overlap, pooled),
                ttft=cell.ttft,
                ttft_width=ttft_width,
                ttft_p99=counts_quantile(cell.ttft, 0.99, ttft_width) if cell.ttft else cell.ttft_p99.mean,
                e2e=cell.e2e.mean,
                routed=cell.routed,
                on_time=cell.on_time,
                paired_se=_paired_se(cell.paired, overlap, tpct),
            )
        )
    return out


def matched(band: Band, bins: Mapping[int, BinArm], *, overlap: float = 1.0) -> Band | None:
    """The compared arm's windows in the band's own bins, as one band; None where it has none."""
    inside = {index: cell for index, cell in bins.items() if band.first <= index <= band.last}
    found = bands(inside, overlap=overlap, min_windows=math.inf, ttft_width=band.ttft_width)  # one band of them all
    return found[0] if found else None


@dataclass(frozen=True, kw_only=True)
class Comparison:
    """The speculative arm at one of its bands against the compared arm in the same bins."""

    band: Band
    compared: Band | None  # None: the compared arm was never measured at these loads
    confidence: float = 0.95  # of a win: one-sided, against the difference's standard error (`excess`)
    against: Arm | None = None  # the compared arm: the band's within-window differences from it are read

    @property
    def ratio(self) -> float | None:
        """Speculative over compared time per committed token; None where unmeasured."""
        return self.band.tpct / self.compared.tpct if self.compared is not None and self.compared.tpct else None

    @property
    def measured(self) -> bool:
        return self.ratio is not None

    @property
    def powered(self) -> bool:
        """The speculative band holds `MIN_INDEPENDENT` windows' worth of distinct requests: enough to
        decide on (only a short tail above the full bands holds fewer)."""
        return self.band.independent >= MIN_INDEPENDENT

    @property
    def wins(self) -> bool:
        """Speculation is faster here by `MIN_GAIN` or more, on `MIN_INDEPENDENT` windows' worth of
        requests or more, beyond the difference's standard error at `confidence`: two identical arms
        never win by chance alone (overlapping windows share requests, so a few of them understate it)."""
        ref = self.compared
        return self._faster and ref is not None and min(self.band.independent, ref.independent) >= MIN_INDEPENDENT

    @property
    def thin_win(self) -> bool:
        """Faster as a win is, on fewer than `MIN_INDEPENDENT` windows' worth of requests: evidence that
        more windows at that load would settle, never a win decided on."""
        return self._faster and not self.wins

    @property
    def _faster(self) -> bool:
        """Faster by `MIN_GAIN` or more, beyond the difference's standard error (`excess`) at `confidence`."""
        found = self.excess()
        if found is None or self.ratio is None or self.ratio > 1 / MIN_GAIN:
            return False
        return -found[0] > NormalDist().inv_cdf(self.confidence) * found[1]

    def excess(self, margin: float = 0.0) -> tuple[float, float] | None:
        """How far the speculative band's time per committed token lies past `1 + margin` times the
        compared one's (negative: inside it), and its standard error; None where unmeasured. The error is
        read from the band's within-window differences from the compared arm where it holds them
        (`Band.paired_se`, plus the margin's share of the compared arm's own, which bounds the sum's),
        else from both arms' windows as if independent."""
        spec, ref = self.band, self.compared
        if ref is None or not ref.tpct:
            return None
        value = spec.tpct - (1 + margin) * ref.tpct
        if self.against is not None and self.paired:
            return value, spec.paired_se[self.against] + margin * ref.tpct_se
        return value, math.hypot(spec.tpct_se, (1 + margin) * ref.tpct_se)

    @property
    def paired(self) -> bool:
        """The band's difference from the compared arm is read window by window (`Band.paired_se`)."""
        return self.against is not None and self.compared is not None and self.against in self.band.paired_se


def compare(
    speculative: Sequence[Band],
    compared: Mapping[int, BinArm],
    *,
    overlap: float = 1.0,
    confidence: float = 0.95,
    against: Arm | None = None,
) -> list[Comparison]:
    """Each speculative band against the compared arm's (`against`'s) windows in the same bins; every
    band's win is tested at `confidence` shared among the bands (Bonferroni), so that a pilot of many
    bands is no more likely to find a win by chance than one of a single band."""
    each = 1 - (1 - confidence) / max(1, len(speculative))
    return [
        Comparison(band=band, compared=matched(band, compared, overlap=overlap), confidence=each, against=against)
        for band in speculative
    ]


@dataclass(frozen=True, kw_only=True)
class Crossover:
    """The load above which ordinary decoding wins, and its interval at the confidence asked."""

    load: float
    low: float
    high: float
    confidence: float
    draws_crossing: float  # share of bootstrap draws that cross at all
    non_monotone: bool  # speculation wins again above the crossover somewhere


def first_crossing(points: Sequence[tuple[float, float]]) -> float | None:
    """The first load at which the difference (speculative - compared) goes from negative to
    non-negative, linear between adjacent matched bands."""
    for (x0, d0), (x1, d1) in pairwise(points):
        if d0 < 0 <= d1:
            return x0 + (x1 - x0) * (-d0) / (d1 - d0) if d1 != d0 else x0
    return None


def crossover(
    comparisons: Sequence[Comparison], *, confidence: float, draws: int = DRAWS, seed: int = 0
) -> Crossover | None:
    """Where speculation stops winning, when it wins at some matched load and loses at a higher one, read
    between full bands only (a thin band's few windows understate its spread); with no `draws`, the point
    alone (its interval collapsed on it)."""
    pairs = [(c.band.load, excess) for c in comparisons if c.powered and (excess := c.excess()) is not None]
    if len(pairs) < 2:
        return None
    points = [(load, difference) for load, (difference, _) in pairs]
    point = first_crossing(points)
    if point is None:
        return None
    rng = random.Random(seed)
    found = []
    for _ in range(draws):
        drawn = [(load, rng.gauss(difference, se)) for load, (difference, se) in pairs]
        x = first_crossing(drawn)
        if x is not None:
            found.append(x)
    found.sort()
    tail = (1 - confidence) / 2
    low = found[int(tail * (len(found) - 1))] if found else point
    high = found[math.ceil((1 - tail) * (len(found) - 1))] if found else point
    return Crossover(
        load=point,
        low=min(low, point),
        high=max(high, point),
        confidence=confidence,
        draws_crossing=len(found) / draws if draws else 0.0,
        non_monotone=any(d < 0 for x, d in points if x > point),
    )
