"""The mock engine driven in virtual time: the same scheduler, cost model and acceptance draws as a
served mock, with no clock to wait for, so an hour of load at an offered rate takes seconds.

The engine steps as it does when served (`Engine.next_step`, `Engine.end_step`); a request arrives
at its planned model time, joins the queue, and is scheduled from the first step that starts after
it, as one that reached a served engine's socket mid-step would be. What a served mock adds, HTTP
and the wall clock's jitter, never reaches its model-time figures, so a sweep run here measures the
engine a direct sweep over HTTP does, with as many requests as the reference needs.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specpilot.mockvllm.config import parse_args
from specpilot.mockvllm.engine import Engine, ModelClock
from specpilot.mockvllm.profile import parse_profile
from specpilot.mockvllm.request import Request
from specpilot.mockvllm.server import MockServer
from specpilot.mockvllm.textgen import TokenSource


class VirtualClock(ModelClock):
    """Model time set by the driver: nothing sleeps."""

    def __init__(self) -> None:
        super().__init__(1.0)
        self.at = 0.0

    def now(self) -> float:
        return self.at

    async def sleep_until(self, model_time: float) -> float:
        self.at = max(self.at, model_time)
        return 0.0


@dataclass(frozen=True)
class Arrival:
    """A planned request: when it arrives (model seconds), its scope and lengths."""

    at: float
    scope: str
    prompt_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class Served:
    """A request the engine finished: when it arrived, its first and last token, its output length."""

    arrival: Arrival
    first_token: float
    end: float
    output_tokens: int

    @property
    def e2e(self) -> float:
        return self.end - self.arrival.at


def engine(
    profile: Mapping[str, Any],
    speculative: Mapping[str, Any] | None = None,
    *,
    seed: int = 0,
    flags: Sequence[str] = (),
) -> Engine:
    """An engine as `mock-vllm` builds it for `profile` (and `--speculative-config` and other `flags`), on a
    virtual clock."""
    argv = ["sim-model", "--seed", str(seed), *flags]
    if speculative is not None:
        argv += ["--speculative-config", json.dumps(dict(speculative))]
    built = MockServer(parse_args(argv), parse_profile(dict(profile)), on_crash=_crashed, env={}).engine
    built.clock = VirtualClock()
    return built


def _crashed(exit_code: int) -> None:
    raise RuntimeError(f"the simulated engine crashed (exit code {exit_code}): a profile fault is not simulated")


def poisson(
    rates: Sequence[float], seconds: float, *, scope: str, lengths: Iterator[tuple[int, int]], rng: random.Random
) -> list[Arrival]:
    """Poisson arrivals whose rate climbs through `rates`, `seconds` of model time at each."""
    out, at = [], 0.0
    for level, rate in enumerate(rates):
        end = (level + 1) * seconds
        while (at := at + rng.expovariate(rate)) < end:
            prompt, output = next(lengths)
            out.append(Arrival(at=at, scope=scope, prompt_tokens=prompt, output_tokens=output))
        at = end
    return out


def serve(target: Engine, arrivals: Iterable[Arrival], *, until: float) -> list[Served]:
    """Run `target` on `arrivals` (in time order) up to model time `until`: the requests it finished."""
    clock = target.clock
    if not isinstance(clock, VirtualClock):
        raise TypeError("serve() drives an engine built by simulate.engine()")
    planned = iter(arrivals)
    upcoming = next(planned, None)
    submitted: list[tuple[Arrival, Request]] = []
    while True:
        step = target.next_step()
        if step is not None:
            end = target.time() + step.duration
        elif upcoming is not None and upcoming.at < until:
            end = upcoming.at  # idle until the next arrival
        else:
            break
        while upcoming is not None and upcoming.at <= end and upcoming.at < until:
            clock.at = max(clock.at, upcoming.at)
            request = target.submit(  # a greedy request for exactly its output tokens, as loadgen sends
                scope=upcoming.scope,
                prompt_tokens=upcoming.prompt_tokens,
                max_tokens=upcoming.output_tokens,
                tokens=TokenSource(len(submitted), mean_length=upcoming.output_tokens),
                stop=(),
                ignore_eos=True,
            )
            submitted.append((upcoming, request))
            upcoming = next(planned, None)
        if step is not None:
            if end > until:
                break
            target.end_step(step, end)
            clock.at = max(clock.at, end)
    return [
        Served(arrival=arrival, first_token=first, end=request.last_token, output_tokens=request.output_tokens)
        for arrival, request in submitted
        if request.finish_reason is not None and (first := request.first_token) is not None
    ]


def time_per_committed_token(served: Iterable[Served], *, after: float = 0.0) -> float:
    """Decode time per committed token (the first, from prefill, left out) of the requests that arrived
    after model time `after`, accumulated over them as the pilot does."""
    done = [s for s in served if s.arrival.at > after and s.output_tokens > 1]
    if not done:
        raise ValueError("no request with decoded tokens arrived after the warm-up")
    return sum(s.end - s.first_token for s in done) / sum(s.output_tokens - 1 for s in done)
