"""Where speculation should stop paying for a scope, forecast from the arms' step costs.

Once a scope's early windows have measured its acceptance and lengths, the step costs of its target and
draft (`specpilot.wire.stepcost`) say at which offered load (requests per second per replica, the bands'
axis) the speculative arm's time per committed token rises through the ordinary arm's, before the pilot
ever runs there.

The model is a replica in steady state. At load lambda an arm decodes B sequences at once; a step of it
takes t(B) and commits E tokens per sequence (1 for ordinary decoding, 1 + the accepted drafts for a
round), and each request's prompt adds c(B), what its P prompt tokens add to a step. A request's O - 1
tokens after its first then take (O - 1) / E steps, so the load an arm holds at batch B is

    lambda(B) = 1 / ((O - 1) * t(B) / (B * E) + c(B))

and its time per committed token there is B / (lambda * (O - 1)): at one load, the arm that needs the
smaller batch is the faster. At one batch (B requests in flight in each arm, as a closed loop of B
clients holds them), the speculative arm's throughput over the ordinary arm's is the ratio of their
loads. The arms are equal where they hold the same load at the same batch; the crossover is the
ordinary arm's load at the first batch past which the speculative arm holds less. The sequences read
P + O / 2 cached tokens each, on average over their decoding.

The interval comes from the acceptance: the committed tokens per round at its confidence bounds (a
normal interval on the mean accepted drafts per round, from the per-position rates and the rounds
measured). The forecast reads the step costs only up to `max_batch` (the batches they were measured at):
past it, it says the speculative arm still pays there, never what lies beyond.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import NormalDist

from specpilot.wire.stepcost import StepCost, step_seconds

MAX_BATCH = 256  # the calibrated step costs were measured up to this batch
_BISECTIONS = 40


@dataclass(frozen=True, kw_only=True)
class Acceptance:
    """A scope's measured acceptance: `per_position[i]` is the share of rounds whose draft i + 1 was
    accepted (vLLM's per-position accepted count over the drafts), from `rounds` independent rounds."""

    per_position: tuple[float, ...]
    rounds: float

    @classmethod
    def geometric(cls, alpha: float, k: int, rounds: float = math.inf) -> Acceptance:
        """Each draft accepted with probability `alpha` when all before it were."""
        return cls(per_position=tuple(alpha ** (i + 1) for i in range(k)), rounds=rounds)

    @property
    def committed(self) -> float:
        """Mean committed tokens per round: 1 + the mean accepted drafts."""
        return 1.0 + sum(self.per_position)

    def committed_bounds(self, confidence: float) -> tuple[float, float]:
        """The committed tokens per round at `confidence` (two-sided), within [1, k + 1]."""
        mean = sum(self.per_position)
        square = sum((2 * i + 1) * p for i, p in enumerate(self.per_position))  # E[a^2] = sum (2i - 1) P(a >= i)
        se = math.sqrt(max(0.0, square - mean * mean) / self.rounds) if self.rounds > 0 else math.inf
        z = NormalDist().inv_cdf(0.5 + confidence / 2)
        top = 1.0 + len(self.per_position)
        return max(1.0, self.committed - z * se), min(top, self.committed + z * se)


@dataclass(frozen=True, kw_only=True)
class Lengths:
    """A scope's mean prompt and output lengths (tokens)."""

    prompt: float
    output: float

    @property
    def context(self) -> float:
        """Cached tokens a sequence reads per step, on average over its decoding."""
        return self.prompt + self.output / 2


@dataclass(frozen=True, kw_only=True)
class Crossing:
    """Where the arms cross at one committed-tokens-per-round figure; `load` None: not up to `max_batch`
    (the speculative arm still pays at `reach`, the ordinary arm's load there); 0: speculation never pays."""

    committed: float
    load: float | None
    batch: float | None
    reach: float


@dataclass(frozen=True, kw_only=True)
class Forecast:
    """The crossover at the measured acceptance, and at its confidence bounds (`low` the lower load)."""

    point: Crossing
    low: Crossing
    high: Crossing
    confidence: float

    def disagrees(self, measured: float | None) -> bool:
        """A measured crossover (None: none measured) outside the forecast's interval. Where the forecast
        finds none up to its reach, a measured one below that reach disagrees; none measured never does."""
        if measured is None:
            return False
        low = self.low.load if self.low.load is not None else self.low.reach
        if self.high.load is None:
            return measured < low
        return not low <= measured <= self.high.load


@dataclass(frozen=True)
class _Arm:
    step: Callable[[float], float]  # t(B)
    prompt: Callable[[float], float]  # c(B)
    committed: float

    def load(self, batch: float, output: float) -> float:
        return 1.0 / ((output - 1) * self.step(batch) / (batch * self.committed) + self.prompt(batch))


def _arms(target: StepCost, draft: StepCost, k: int, committed: float, lengths: Lengths) -> tuple[_Arm, _Arm]:
    ctx, p = lengths.context, lengths.prompt

    def step(batch: float, tokens: int, drafts: int, prefill: float, prefilling: int) -> float:
        b = max(1.0, batch)
        return step_seconds(
            target,
            seqs=b + prefilling,
            tokens=b * tokens,
            draft_tokens=b * drafts,
            prefill_tokens=prefill,
            context_tokens=b * ctx,
        )

    def drafting(batch: float) -> float:
        b = max(1.0, batch)
        return k * step_seconds(draft, seqs=b, tokens=b, context_tokens=b * ctx)

    ordinary = _Arm(
        step=lambda b: step(b, 1, 0, 0, 0),
        prompt=lambda b: step(b, 1, 0, p, 1) - step(b, 1, 0, 0, 0),
        committed=1.0,
    )
    speculative = _Arm(
        step=lambda b: step(b, k + 1, k, 0, 0) + drafting(b),
        prompt=lambda b: step(b, k + 1, k, p, 1) - step(b, k + 1, k, 0, 0) + draft.prefill_per_token_s * p,
        committed=committed,
    )
    return ordinary, speculative


def crossing(
    target: StepCost, draft: StepCost, *, k: int, committed: float, lengths: Lengths, max_batch: int = MAX_BATCH
) -> Crossing:
    """The crossover at `committed` tokens per round with `k` drafts."""
    ordinary, speculative = _arms(target, draft, k, committed, lengths)
    out = lengths.output

    def gap(batch: float) -> float:  # > 0: the speculative arm holds more load at this batch
        return speculative.load(batch, out) - ordinary.load(batch, out)

    reach = ordinary.load(max_batch, out)
    if gap(1) <= 0:
        return Crossing(committed=committed, load=0.0, batch=1.0, reach=reach)
    previous = 1
    for batch in range(2, max_batch + 1):
        if gap(batch) <= 0:
            low, high = float(previous), float(batch)
            for _ in range(_BISECTIONS):
                middle = (low + high) / 2
                low, high = (middle, high) if gap(middle) > 0 else (low, middle)
            return Crossing(committed=committed, load=ordinary.load(high, out), batch=high, reach=reach)
        previous = batch
    return Crossing(committed=committed, load=None, batch=None, reach=reach)


def forecast(
    target: StepCost,
    draft: StepCost,
    acceptance: Acceptance,
    lengths: Lengths,
    *,
    confidence: float = 0.95,
    max_batch: int = MAX_BATCH,
) -> Forecast:
    """The scope's crossover from the arms' step costs, with its interval from the acceptance."""
    k = len(acceptance.per_position)
    low, high = acceptance.committed_bounds(confidence)

    def at(committed: float) -> Crossing:
        return crossing(target, draft, k=k, committed=committed, lengths=lengths, max_batch=max_batch)

    return Forecast(point=at(acceptance.committed), low=at(low), high=at(high), confidence=confidence)


def _batch_at(arm: _Arm, load: float, output: float) -> float:
    """The batch at which `arm` holds `load` (its load grows with its batch)."""
    low, high = 1e-3, 1.0
    while arm.load(high, output) < load and high < 1e6:
        high *= 2
    for _ in range(_BISECTIONS):
        middle = (low + high) / 2
        low, high = (middle, high) if arm.load(middle, output) < load else (low, middle)
    return high


def speedups(
    target: StepCost, draft: StepCost, *, k: int, committed: float, lengths: Lengths, loads: Sequence[float]
) -> list[tuple[float, float, float]]:
    """(load, the ordinary arm's batch there, ordinary over speculative time per committed token there) at
    each offered load: the speedup curve over load; it falls towards 0 past the load the speculative arm
    can hold at any batch."""
    ordinary, speculative = _arms(target, draft, k, committed, lengths)
    out = []
    for load in loads:
        batch = _batch_at(ordinary, load, lengths.output)
        out.append((load, batch, batch / _batch_at(speculative, load, lengths.output)))
    return out


def batch_speedups(
    target: StepCost, draft: StepCost, *, k: int, committed: float, lengths: Lengths, batches: Sequence[float]
) -> list[tuple[float, float]]:
    """(batch, the speculative arm's committed tokens per second over the ordinary arm's) with `batch`
    requests in flight in each: the speedup curve over batch that a fixed concurrency measures."""
    ordinary, speculative = _arms(target, draft, k, committed, lengths)
    return [(b, speculative.load(b, lengths.output) / ordinary.load(b, lengths.output)) for b in batches]
