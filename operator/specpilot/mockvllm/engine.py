"""The mock's continuous-batching engine: one asyncio task steps it, like vLLM's engine core.

Each step takes the batch the scheduler chooses (`scheduler`), asks the cost model how long the
step takes (`step`), and commits the step's tokens when it ends (`commit`): one per decoding
request, or 1 + accepted drafts per speculative round, plus the first token of every prefill that
completes.

Time. `ModelClock` maps model seconds to wall seconds, wall = origin + model * time_scale, so
`--time-scale 0.1` runs ten times faster than real time. The engine advances its model clock by
exactly each step's modelled duration and only *sleeps* in scaled wall time, against an absolute
schedule: sleep granularity and scheduling jitter never reach the metrics, they show up only as
lag (how far the wall clock ran past a step's end), reported by `Engine.stats`. Every timestamp
and every metric is in model seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Unpack

from specpilot.mockvllm.commit import commit_step, record_finished
from specpilot.mockvllm.config import EngineLimits
from specpilot.mockvllm.faults import FaultBoard
from specpilot.mockvllm.metrics import EngineMetrics
from specpilot.mockvllm.profile import Profile
from specpilot.mockvllm.request import Request, Submission
from specpilot.mockvllm.scheduler import KvCache, QueueLimits, Scheduler
from specpilot.mockvllm.step import Step, plan_step, step_work

# How often (wall seconds) an idle, hung or blocked engine looks again at its faults.
IDLE_POLL_S = 0.05


class QueueFull(Exception):
    """A new request refused by `--max-num-queued-reqs` or `--max-num-queued-tokens`."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class EngineDead(Exception):
    """The engine crashed; the server can no longer serve."""


class ModelClock:
    """Model time to wall time: wall = origin + model * time_scale."""

    def __init__(self, time_scale: float) -> None:
        self.time_scale = time_scale
        self._origin = time.monotonic()

    def now(self) -> float:
        """The model time the wall clock has reached."""
        return (time.monotonic() - self._origin) / self.time_scale

    async def sleep_until(self, model_time: float) -> float:
        """Sleep until the wall time of `model_time`; return how late we woke (wall seconds)."""
        target = self._origin + model_time * self.time_scale
        await asyncio.sleep(max(0.0, target - time.monotonic()))
        return max(0.0, time.monotonic() - target)


@dataclass
class Pacing:
    """The steps taken, and how late the wall clock woke the engine at their ends: its timing fidelity."""

    steps: int = 0
    lag_sum: float = 0.0
    lag_max: float = 0.0

    def woke(self, lag: float) -> None:
        self.lag_sum += lag
        self.lag_max = max(self.lag_max, lag)

    def stats(self) -> dict[str, float | int]:
        return {
            "steps": self.steps,
            "lag_mean_s": self.lag_sum / self.steps if self.steps else 0.0,
            "lag_max_s": self.lag_max,
        }


class Engine:
    """The step loop of one mock engine: requests in, steps scheduled, paced and committed."""

    def __init__(
        self,
        *,
        limits: EngineLimits,
        profile: Profile,
        metrics: EngineMetrics,
        faults: FaultBoard,
        clock: ModelClock,
        seed: int,
        tensor_parallel_size: int = 1,
        enable_chunked_prefill: bool = True,
        max_num_queued_reqs: int | None = None,
        max_num_queued_tokens: int | None = None,
        kv_cache_metrics_sample: float = 0.0,
        enable_mfu_metrics: bool = False,
        on_crash: Callable[[int], None],
    ) -> None:
        self.profile = profile
        self.metrics = metrics
        self.faults = faults
        self.clock = clock
        self.limits = limits  # its draft_tokens_by_batch, built once at start-up, gives each step's k
        self._last_k: int | None = None  # the k of the last step ended, for the switch_stall fault
        self.alive = True
        kv = KvCache(limits.num_gpu_blocks, faults, metrics.residency, sample=kv_cache_metrics_sample, seed=seed + 1)
        self.scheduler = Scheduler(
            limits,
            kv,
            metrics.cache,
            chunked_prefill=enable_chunked_prefill,
            queue_limits=QueueLimits(max_num_queued_reqs, max_num_queued_tokens),
        )
        self._tp = tensor_parallel_size
        self._mfu = enable_mfu_metrics
        self._on_crash = on_crash
        self._rng = random.Random(seed)
        self._now = 0.0
        self._wakeup = asyncio.Event()
        self.pacing = Pacing()

    def time(self) -> float:
        """Model time now: the engine's clock, or the wall clock's while the engine waits."""
        return max(self._now, self.clock.now())

    def next_seed(self) -> int:
        """A seed for per-request randomness, drawn in arrival order (deterministic runs)."""
        return self._rng.getrandbits(64)

    def submit(self, **asked: Unpack[Submission]) -> Request:
        """Queue a new request, unless the engine is dead or a queue limit refuses it."""
        if not self.alive:
            raise EngineDead()
        refusal = self.scheduler.queue_limits.refusal(self.scheduler.waiting, asked["prompt_tokens"])
        if refusal is not None:
            self.metrics.outcomes.rejections[refusal].inc()
            raise QueueFull(refusal)
        request = Request(**asked, arrival=self.time(), seed=self.next_seed())
        self.scheduler.waiting.append(request)
        self._wakeup.set()
        return request

    def abort(self, request: Request) -> None:
        """Drop a request whose client went away; like vLLM, it is not counted as finished."""
        if not request.done:
            self.scheduler.abort(request, self._now)
            self._wakeup.set()

    def leak(self, request: Request) -> None:
        """Drop a request whose client went away but keep its slot and KV blocks taken for good, as an
        engine that misses the abort does (a cancel_leak fault); a request not yet scheduled is aborted."""
        if not request.done:
            self.scheduler.leak(request, self._now)
            self._wakeup.set()

    def wake(self) -> None:
        """Make the loop look at its faults now (after an admin change)."""
        self._wakeup.set()

    async def run(self) -> None:
        """Step until the engine crashes (or the task is cancelled)."""
        while True:
            crash = self.faults.crash(self.time())
            if crash is not None:
                self._crash(crash.exit_code)
                return
            step = None if self.faults.hung(self.time()) else self.next_step()
            if step is None:
                await self._idle()
                continue
            end = self._now + self.faults.stretch(step.duration, self._now)
            self.pacing.woke(await self.clock.sleep_until(end))
            self.end_step(step, end)

    def next_step(self) -> Step | None:
        """Schedule the next step from the requests that have arrived (None: nothing to run); it starts
        at the engine's model time, or at the first arrival when the engine was idle."""
        running, waiting = self.scheduler.running, self.scheduler.waiting
        if not running and not waiting:
            return None
        if not running:
            self._now = max(self._now, waiting[0].arrival)
        if (batch := self.scheduler.schedule(self._now)) is None:
            return None
        step = plan_step(self.profile, self.limits, *batch)
        if self._last_k is not None and step.k != self._last_k:
            step.duration = self.faults.switched(step.duration, self._now)
        return step

    def end_step(self, step: Step, end: float) -> None:
        """Commit `step` at model time `end`, when it ends."""
        self._now = end
        self._last_k = step.k
        self.pacing.steps += 1
        alpha = self.profile.alpha
        commit_step(step, end, self.metrics, k=step.k, alpha=lambda scope: self.faults.alpha(scope, alpha(scope), end))
        if self._mfu:
            self.metrics.work.add(step_work(self.profile, step.k, step, self._tp))
        for request in self.scheduler.finish(end):
            record_finished(self.metrics, request, end)
        self._update_gauges()

    async def _idle(self) -> None:
        self._update_gauges()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(IDLE_POLL_S):
                await self._wakeup.wait()
        self._wakeup.clear()
        self._now = max(self._now, self.clock.now())

    def _crash(self, exit_code: int) -> None:
        self.alive = False
        self.scheduler.abort_all()
        self._on_crash(exit_code)

    def _update_gauges(self) -> None:
        self.scheduler.show(self.metrics.scheduler, self._now)

    def stats(self) -> dict[str, float | int | bool]:
        """Engine state and timing fidelity, for the admin endpoint and benchmarks."""
        return {
            "alive": self.alive,
            "model_time_s": self._now,
            "wall_model_time_s": self.clock.now(),
            "time_scale": self.clock.time_scale,
            **self.pacing.stats(),
            **self.scheduler.stats(self._now),
        }
