"""Always-valid tests that the speculative arm fails more often than the arm it is compared with, read
after every probe round without spending a level away. Pure, stdlib only.

The data are strata: one per probe round and case, `failed` of the speculative arm's `trials` answers
failing (a greedy text that parts from the baseline's, a broken contract, a kept slot, a sampled pair
lost) beside `other_failed` of the other arm's `other_trials`. Given the stratum's total failures, the
speculative count is hypergeometric when both arms fail at the same rate, whatever that rate (Fisher's
exact test), and Fisher's noncentral hypergeometric when the speculative arm's odds of failing are
`odds` times the other's. The ratio of the two likelihoods has expectation one with equal arms (at most
one when the speculative arm fails less), so its product over strata is a nonnegative supermartingale:
a rate that moves with load or batching from round to round cancels out, and nothing rests on a
normal approximation, which a probe at a 1% rate, with a handful of failures, could not lean on. A
sampled round's untied pairs are strata of one trial a side, so the same ratio is the sign test's.

Two tests read those products, one per odds ratio in ODDS:

- The mixture sequential probability ratio test (Robbins 1970; Johari, Koomen, Pekelis and Walsh,
  "Always Valid Inference: Continuous Monitoring of A/B Tests", Operations Research 70(3), 2022): the
  WEIGHTS-mixture of the products since the first round. By Ville's inequality it ever reaches 1/a
  with equal arms at most a of the time, however often it is read, so 1/mixture is a p-value valid at
  every round.
- Page's CUSUM (Page, "Continuous inspection schemes", Biometrika 41, 1954) for a change after many
  clean rounds, which the mixture since round one is slow to see (the clean rounds' failures dilute
  the new ones): per odds ratio, the largest product since a block boundary (every BLOCK rounds, and
  each restart of the operator). Each boundary's product is a supermartingale of its own, so by Ville
  and a union bound over the boundaries and the odds ratios (Lorden, Annals of Mathematical
  Statistics 42, 1971), the chance that any crosses STARTS / (a w) within HORIZON rounds with equal
  arms is at most a (each restart adds a boundary, and a / STARTS to that). Boundaries every BLOCK
  rounds rather than every round make that union STARTS products rather than HORIZON, at the price of
  up to BLOCK clean rounds in the product that catches a change. Its delay is about
  log(STARTS / (a w)) over the information a faulty round carries, against log(1 / (a w)) for the
  mixture from the first round: a few hundred rounds for a greedy divergence at twice a 10% rate
  (`bench/probes_aa.py` measures it). A fault on every ask against none on the other arm takes the
  mixture 4 rounds at 2 asks a round however late it begins: a round where neither arm failed leaves
  both tests where they were.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

# Odds ratios the tests look for, and their weights. A greedy divergence at twice the baseline's rate
# shows as odds of 1.5 to 1.8 on the comparisons (a comparison differs when either answer does), and takes
# hundreds of rounds to show: those odds keep most of the weight. A behaviour broken on every ask (a leaked
# slot, a tool call that does not parse) shows as odds past any bound, and a round whose k asks fail on the
# speculative arm alone has one chance in C(2k, k) with equal arms (6 at 2 asks), so no test of a round's
# stratum gains more than that factor from it. The largest odds get what it takes for the mixture test to
# reach its level (a quarter of 1%) after 4 such rounds at 2 asks, the fewest any weights allow (6^3 < 400),
# and 2 at 4 asks; the medium ones, for a fault on some of the asks, the rest.
ODDS = (1.5, 2.0, 3.0, 6.0, 10_000.0)
WEIGHTS = (0.3, 0.3, 0.05, 0.05, 0.3)
BLOCK = 100  # rounds between the CUSUM's boundaries
HORIZON = 2000  # rounds over which the CUSUM's false alarms are bounded (two weeks of 10-minute rounds)
STARTS = HORIZON // BLOCK  # boundaries within the horizon

Stratum = tuple[int, int, int, int]  # failed, trials, other_failed, other_trials
_ZERO = (0.0,) * len(ODDS)


@lru_cache(maxsize=4096)
def log_ratios(failed: int, trials: int, other_failed: int, other_trials: int) -> tuple[float, ...]:
    """Per odds ratio in ODDS: log of the noncentral over the central hypergeometric probability of
    `failed` given the stratum's total failures. Zero when the total leaves one possibility."""
    if not (0 <= failed <= trials and 0 <= other_failed <= other_trials):
        raise ValueError("failures must lie between 0 and their trials")
    total = failed + other_failed
    support = range(max(0, total - other_trials), min(trials, total) + 1)
    terms = [_log_choose(trials, k) + _log_choose(other_trials, total - k) for k in support]
    null = _log_sum_exp(terms)
    out = []
    for odds in ODDS:
        log_odds = math.log(odds)
        tilted = _log_sum_exp([term + k * log_odds for term, k in zip(terms, support, strict=True)])
        out.append(failed * log_odds - tilted + null)
    return tuple(out)


@dataclass(frozen=True)
class Sequential:
    """Both tests' state over a run of rounds: a few numbers per odds ratio, whatever the rounds."""

    ratios: tuple[float, ...] = _ZERO
    """Per odds ratio, the log product since the first round: the mixture test's."""
    cusum: tuple[float, ...] = _ZERO
    """Per odds ratio, the CUSUM at the latest boundary: the largest log product from an earlier
    boundary to it, or zero."""
    block: tuple[float, ...] = _ZERO
    """Per odds ratio, the log product since the latest boundary."""
    rounds: int = 0

    def step(self, strata: Iterable[Stratum]) -> Sequential:
        """One more round, of these strata (one per case; a sampled case's untied pairs, one each)."""
        step = _ZERO
        for stratum in strata:
            step = _add(step, log_ratios(*stratum))
        ratios, block, rounds = _add(self.ratios, step), _add(self.block, step), self.rounds + 1
        if rounds % BLOCK:
            return Sequential(ratios, self.cusum, block, rounds)
        return Sequential(ratios, self._closed(block), _ZERO, rounds)

    def then(self, later: Sequential) -> Sequential:
        """These rounds followed by `later`'s, which another run of the operator counted from zero: the
        restart is a boundary, and later's CUSUM is what it would have been started from this one's."""
        if not self.rounds:
            return later
        start = self._closed(self.block)
        return Sequential(
            ratios=_add(self.ratios, later.ratios),
            cusum=tuple(
                max(c, s + r - b) for s, c, r, b in zip(start, later.cusum, later.ratios, later.block, strict=True)
            ),
            block=later.block,
            rounds=self.rounds + later.rounds,
        )

    def mixture_p(self) -> float:
        """The mixture test's p-value, valid at every round: 1 / the mixture of the products."""
        return math.exp(min(0.0, -_log_sum_exp([math.log(w) + r for w, r in zip(WEIGHTS, self.ratios, strict=True)])))

    def change_p(self) -> float:
        """The change detector's p-value over HORIZON rounds: STARTS / the largest weighted product since
        a boundary."""
        log_p = math.log(STARTS) - max(
            math.log(w) + c + b for w, c, b in zip(WEIGHTS, self.cusum, self.block, strict=True)
        )
        return math.exp(min(0.0, log_p))

    def _closed(self, block: tuple[float, ...]) -> tuple[float, ...]:
        return tuple(max(0.0, c + b) for c, b in zip(self.cusum, block, strict=True))


def _add(one: tuple[float, ...], other: tuple[float, ...]) -> tuple[float, ...]:
    return tuple(a + b for a, b in zip(one, other, strict=True))


def _log_sum_exp(values: list[float]) -> float:
    top = max(values)
    return top + math.log(math.fsum(math.exp(v - top) for v in values))


def _log_choose(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
