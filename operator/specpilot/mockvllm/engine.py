"""The mock's continuous-batching engine: one asyncio task steps it, like vLLM's engine core.

Each step schedules work the way vLLM's V1 scheduler does (running requests first, in order,
preempting the newest when KV-cache blocks run out; then waiting requests in arrival order up to
`max_num_seqs`, prefills chunked to the token budget), asks the cost model how long the step
takes, and commits the step's tokens when it ends: one per decoding request, or 1 + accepted
drafts per speculative round, plus the first token of every prefill that completes.

Time. `ModelClock` maps model seconds to wall seconds, wall = origin + model * time_scale, so
`--time-scale 0.1` runs ten times faster than real time. The engine advances its model clock by
exactly each step's modelled duration and only *sleeps* in scaled wall time, against an absolute
schedule: sleep granularity and scheduling jitter never reach the metrics, they show up only as
lag (how far the wall clock ran past a step's end), reported by `Engine.stats`. Every timestamp
and every metric is in model seconds.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import enum
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from specpilot.mockvllm.config import EngineLimits
from specpilot.mockvllm.costmodel import GIB, blocks_for, draw_accepted, step_time
from specpilot.mockvllm.faults import FaultBoard
from specpilot.mockvllm.metrics import EngineMetrics
from specpilot.mockvllm.profile import Profile
from specpilot.mockvllm.textgen import Tokens

# How often (wall seconds) an idle, hung or blocked engine looks again at its faults.
IDLE_POLL_S = 0.05


class FinishReason(enum.StrEnum):
    """Why a request stopped, as vLLM reports it."""

    STOP = "stop"
    LENGTH = "length"


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


class Request:
    """One sequence in the engine, and the handle its API handler reads output from."""

    __slots__ = (
        "_event",
        "_held",
        "_sent",
        "aborted",
        "arrival",
        "blocks",
        "finish_reason",
        "first_scheduled",
        "first_token",
        "ignore_eos",
        "include_stop",
        "kv_tokens",
        "last_token",
        "max_tokens",
        "min_tokens",
        "output_tokens",
        "preemptions",
        "prefill_target",
        "prompt_tokens",
        "rng",
        "scheduled_at",
        "scope",
        "stop",
        "stop_reason",
        "stop_token_ids",
        "text",
        "tokens",
    )

    def __init__(
        self,
        *,
        scope: str,
        prompt_tokens: int,
        max_tokens: int,
        tokens: Tokens,
        stop: tuple[str, ...],
        ignore_eos: bool,
        arrival: float,
        seed: int,
        min_tokens: int = 0,
        stop_token_ids: frozenset[int] = frozenset(),
        include_stop: bool = False,
    ) -> None:
        self.scope = scope
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.min_tokens = min_tokens
        self.tokens = tokens
        self.stop = stop
        self.stop_token_ids = stop_token_ids
        self.include_stop = include_stop
        self.ignore_eos = ignore_eos
        self.arrival = arrival
        self.rng = random.Random(seed)
        self.kv_tokens = 0
        self.prefill_target = prompt_tokens
        self.blocks = 0
        self.output_tokens = 0
        self.text = ""
        self.preemptions = 0
        self.first_scheduled: float | None = None
        self.scheduled_at = 0.0
        self.first_token: float | None = None
        self.last_token = 0.0
        self.finish_reason: FinishReason | None = None
        self.stop_reason: str | int | None = None
        self.aborted = False
        # Streaming holds back text that could still turn out to start a stop string.
        self._held = 0 if include_stop else max((len(s) for s in stop), default=1) - 1
        self._sent = 0
        self._event = asyncio.Event()

    @property
    def done(self) -> bool:
        return self.finish_reason is not None or self.aborted

    def commit(self, count: int, now: float) -> int:
        """Append up to `count` output tokens; return how many were committed before a finish.

        As vLLM checks them: EOS, then stop token ids (neither can be sampled before `min_tokens`),
        then the stop strings in the new text (once past `min_tokens`), then the length cap.
        """
        committed = 0
        while committed < count:
            position = self.output_tokens
            self.output_tokens += 1
            committed += 1
            if position == max(self.tokens.eos_at, self.min_tokens) and not self.ignore_eos:
                self.finish_reason = FinishReason.STOP
                break
            start = len(self.text)
            token_id = self.tokens.token_id(position)
            stopped_by_id = position >= self.min_tokens and token_id in self.stop_token_ids
            if not stopped_by_id or self.include_stop:
                self.text += self.tokens.piece(position)
            if stopped_by_id:
                self.finish_reason = FinishReason.STOP
                self.stop_reason = token_id
                break
            if self.stop and self.output_tokens > self.min_tokens and self._hit_stop(start):
                break
            if self.output_tokens >= self.max_tokens:
                self.finish_reason = FinishReason.LENGTH
                break
        self.last_token = now
        self._event.set()
        return committed

    def _hit_stop(self, start: int) -> bool:
        """Truncate at the first stop string that the newest piece completes (after it, when included)."""
        for stop in self.stop:
            index = self.text.find(stop, max(0, start - len(stop) + 1))
            if index >= 0:
                self.text = self.text[: index + len(stop) if self.include_stop else index]
                self.finish_reason = FinishReason.STOP
                self.stop_reason = stop
                return True
        return False

    def wake(self) -> None:
        self._event.set()

    async def next_text(self) -> str:
        """Wait for output committed since the last call; '' once finished with nothing new."""
        while True:
            limit = len(self.text) if self.done else len(self.text) - self._held
            if limit > self._sent or self.done:
                delta = self.text[self._sent : limit]
                self._sent = max(self._sent, limit)
                return delta
            self._event.clear()
            await self._event.wait()


@dataclass
class Step:
    """One scheduled forward pass: the requests it decodes, the prefill chunks it runs, its model time."""

    decodes: list[Request]
    prefills: list[tuple[Request, int]]
    duration: float


def step_duration(profile: Profile, k: int, decodes: list[Request], prefills: list[tuple[Request, int]]) -> float:
    """The model time of a step that decodes `decodes` (k drafts each) and runs the prefill chunks `prefills`;
    the sequences read the tokens they have cached."""
    return step_time(
        profile.cost,
        k,
        decode_seqs=len(decodes),
        prefill_seqs=len(prefills),
        prefill_tokens=sum(chunk for _, chunk in prefills),
        context_tokens=sum(r.kv_tokens for r in decodes) + sum(r.kv_tokens for r, _ in prefills),
        draft=profile.draft,
    )


class Engine:
    """The scheduler, KV-cache accounting and step loop of one mock engine."""

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
        self.limits = limits
        self.profile = profile
        self.metrics = metrics
        self.faults = faults
        self.clock = clock
        self.k = limits.num_speculative_tokens
        self.alive = True
        self.running: list[Request] = []
        self.waiting: collections.deque[Request] = collections.deque()
        self.leaked: list[Request] = []  # dropped by their clients, yet holding a slot and their blocks
        self._tp = tensor_parallel_size
        self._chunked = enable_chunked_prefill
        self._max_queued_reqs = max_num_queued_reqs
        self._max_queued_tokens = max_num_queued_tokens
        self._kv_sample = kv_cache_metrics_sample
        self._mfu = enable_mfu_metrics
        self._on_crash = on_crash
        self._rng = random.Random(seed)
        self._sample_rng = random.Random(seed + 1)
        self._now = 0.0
        self._used_blocks = 0
        self._wakeup = asyncio.Event()
        self.steps = 0
        self.lag_sum = 0.0
        self.lag_max = 0.0

    # -- requests -----------------------------------------------------------------------------

    def time(self) -> float:
        """Model time now: the engine's clock, or the wall clock's while the engine waits."""
        return max(self._now, self.clock.now())

    def next_seed(self) -> int:
        """A seed for per-request randomness, drawn in arrival order (deterministic runs)."""
        return self._rng.getrandbits(64)

    def submit(
        self,
        *,
        scope: str,
        prompt_tokens: int,
        max_tokens: int,
        tokens: Tokens,
        stop: tuple[str, ...],
        ignore_eos: bool,
        min_tokens: int = 0,
        stop_token_ids: frozenset[int] = frozenset(),
        include_stop: bool = False,
    ) -> Request:
        """Queue a new request, unless the engine is dead or a queue limit refuses it."""
        if not self.alive:
            raise EngineDead()
        if self._max_queued_reqs is not None and len(self.waiting) >= self._max_queued_reqs:
            self.metrics.outcomes.rejections["max_num_queued_reqs"].inc()
            raise QueueFull("max_num_queued_reqs")
        if self._max_queued_tokens is not None and (
            sum(r.prompt_tokens for r in self.waiting) + prompt_tokens > self._max_queued_tokens
        ):
            self.metrics.outcomes.rejections["max_num_queued_tokens"].inc()
            raise QueueFull("max_num_queued_tokens")
        request = Request(
            scope=scope,
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens,
            tokens=tokens,
            stop=stop,
            ignore_eos=ignore_eos,
            arrival=self.time(),
            seed=self.next_seed(),
            min_tokens=min_tokens,
            stop_token_ids=stop_token_ids,
            include_stop=include_stop,
        )
        self.waiting.append(request)
        self._wakeup.set()
        return request

    def abort(self, request: Request) -> None:
        """Drop a request whose client went away; like vLLM, it is not counted as finished."""
        if request.done:
            return
        request.aborted = True
        if request in self.waiting:
            self.waiting.remove(request)
        if request in self.running:
            self.running.remove(request)
            self._free(request)
        self._wakeup.set()

    def leak(self, request: Request) -> None:
        """Drop a request whose client went away but keep its slot and KV blocks taken for good, as an
        engine that misses the abort does (a cancel_leak fault); a request not yet scheduled is aborted."""
        if request.done:
            return
        if request not in self.running:
            self.abort(request)
            return
        request.aborted = True
        self.running.remove(request)
        self.leaked.append(request)
        self._wakeup.set()

    def wake(self) -> None:
        """Make the loop look at its faults now (after an admin change)."""
        self._wakeup.set()

    # -- the loop -----------------------------------------------------------------------------

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
            lag = await self.clock.sleep_until(end)
            self.lag_sum += lag
            self.lag_max = max(self.lag_max, lag)
            self.end_step(step, end)

    def next_step(self) -> Step | None:
        """Schedule the next step from the requests that have arrived (None: nothing to run); it starts
        at the engine's model time, or at the first arrival when the engine was idle."""
        if not self.running and not self.waiting:
            return None
        if not self.running:
            self._now = max(self._now, self.waiting[0].arrival)
        return self._schedule()

    def end_step(self, step: Step, end: float) -> None:
        """Commit `step` at model time `end`, when it ends."""
        self._now = end
        self.steps += 1
        self._commit(step)

    async def _idle(self) -> None:
        self._update_gauges()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(IDLE_POLL_S):
                await self._wakeup.wait()
        self._wakeup.clear()
        self._now = max(self._now, self.clock.now())

    def _crash(self, exit_code: int) -> None:
        self.alive = False
        for request in [*self.running, *self.waiting]:
            request.aborted = True
            request.wake()
        self.running.clear()
        self.waiting.clear()
        self.leaked.clear()
        self._on_crash(exit_code)

    # -- scheduling ---------------------------------------------------------------------------

    def _usable_blocks(self) -> int:
        return self.limits.num_gpu_blocks - 1  # vLLM keeps one null block

    def _held_blocks(self) -> int:
        return math.floor(self.faults.held_fraction(self._now) * self._usable_blocks())

    def _schedule(self) -> Step | None:
        block_size = self.limits.block_size
        budget = self.limits.max_num_batched_tokens
        free = self._usable_blocks() - self._held_blocks() - self._used_blocks
        decodes: list[Request] = []
        prefills: list[tuple[Request, int]] = []
        preempted = False
        index = 0
        while index < len(self.running):
            request = self.running[index]
            pending = request.prefill_target - request.kv_tokens
            want = min(pending, budget) if pending > 0 else 1 + self.k
            if want > budget or want <= 0:
                index += 1
                continue
            need = blocks_for(request.kv_tokens + want, block_size) - request.blocks
            while need > free and self.running[-1] is not request:
                free += self._preempt(self.running[-1])
                preempted = True
            if need > free:
                self._preempt(request)
                preempted = True
                break
            free -= need
            request.blocks += need
            self._used_blocks += need
            budget -= want
            if pending > 0:
                prefills.append((request, want))
            else:
                decodes.append(request)
            index += 1
        slots = self.limits.max_num_seqs - len(self.leaked)
        while not preempted and self.waiting and budget > 0 and len(self.running) < slots:
            request = self.waiting[0]
            pending = request.prompt_tokens + request.output_tokens
            if request.arrival > self._now or (not self._chunked and pending > budget):
                break
            want = min(pending, budget)
            need = blocks_for(want, block_size)
            if need > free:
                break
            self.waiting.popleft()
            self.running.append(request)
            request.prefill_target = pending
            request.blocks = need
            request.scheduled_at = self._now
            self._used_blocks += need
            free -= need
            budget -= want
            prefills.append((request, want))
            if request.first_scheduled is None:
                request.first_scheduled = self._now
                self.metrics.cache.prefix_queries.inc(request.prompt_tokens)
        if not decodes and not prefills:
            return None
        return Step(decodes=decodes, prefills=prefills, duration=step_duration(self.profile, self.k, decodes, prefills))

    def _preempt(self, request: Request) -> int:
        """Move a running request back to the front of the queue; return the blocks it freed."""
        self.running.remove(request)
        freed = request.blocks
        self._free(request)
        request.kv_tokens = 0
        request.preemptions += 1
        self.waiting.appendleft(request)
        self.metrics.cache.preemptions.inc()
        return freed

    def _free(self, request: Request) -> None:
        residency = self.metrics.residency
        if residency is not None:
            for _ in range(request.blocks):
                if self._sample_rng.random() < self._kv_sample:
                    residency.block_lifetime.observe(self._now - request.scheduled_at)
        self._used_blocks -= request.blocks
        request.blocks = 0

    # -- committing a step --------------------------------------------------------------------

    def _commit(self, step: Step) -> None:
        now = self._now
        m = self.metrics
        generated = 0
        prompt_done = 0
        for request, chunk in step.prefills:
            if request.done:
                continue
            request.kv_tokens += chunk
            if request.kv_tokens < request.prefill_target:
                continue
            if request.first_token is None:
                request.first_token = now
                m.latencies.ttft.observe(now - request.arrival)
                m.tokens.prefilled(request.prompt_tokens)
                prompt_done += request.prompt_tokens
            else:
                m.latencies.itl.observe(now - request.last_token)
            generated += request.commit(1, now)
        if self.k:
            generated += self._commit_rounds(step.decodes, now)
        else:
            for request in step.decodes:
                if not request.done:
                    m.latencies.itl.observe(now - request.last_token)
                    request.kv_tokens += 1
                    generated += request.commit(1, now)
        if generated:
            m.tokens.generation_tokens.inc(generated)
            m.sizes.iteration_tokens.observe(prompt_done + generated)
        if self._mfu:
            self._count_work(step)
        if any(r.done for r in self.running):
            for request in self.running:
                if request.finish_reason is not None:
                    self._finish(request, now)
            self.running = [r for r in self.running if not r.done]
        self._update_gauges()

    def _commit_rounds(self, decodes: list[Request], now: float) -> int:
        """Verify one speculative round per decoding request; record the spec-decode counters."""
        m = self.metrics
        k = self.k
        alphas: dict[str, float] = {}
        rounds_by_accepted = [0] * (k + 1)
        generated = 0
        for request in decodes:
            if request.done:
                continue
            alpha = alphas.get(request.scope)
            if alpha is None:
                alpha = alphas[request.scope] = self.faults.alpha(request.scope, self.profile.alpha(request.scope), now)
            accepted = draw_accepted(request.rng, alpha, k)
            rounds_by_accepted[accepted] += 1
            m.latencies.itl.observe(now - request.last_token)
            request.kv_tokens += 1 + accepted
            generated += request.commit(1 + accepted, now)
        if m.spec is not None:
            m.spec.record(rounds_by_accepted)
        return generated

    def _finish(self, request: Request, now: float) -> None:
        self._free(request)
        m = self.metrics
        first_token = request.first_token if request.first_token is not None else now
        first_scheduled = request.first_scheduled if request.first_scheduled is not None else now
        decode = request.last_token - first_token
        output = request.output_tokens
        m.outcomes.success[str(request.finish_reason)].inc()
        m.latencies.e2e.observe(now - request.arrival)
        m.latencies.queue_time.observe(first_scheduled - request.arrival)
        m.latencies.prefill_time.observe(first_token - first_scheduled)
        m.latencies.decode_time.observe(decode)
        m.latencies.inference_time.observe(request.last_token - first_scheduled)
        m.latencies.tpot.observe(decode / (output - 1) if output > 1 else 0.0)
        m.sizes.request_prompt_tokens.observe(request.prompt_tokens)
        m.sizes.request_generation_tokens.observe(output)
        m.sizes.max_generation_tokens.observe(output)
        m.sizes.params_n.observe(1)
        m.sizes.params_max_tokens.observe(request.max_tokens)
        m.sizes.prefill_kv_computed.observe(request.prompt_tokens)
        m.latencies.request_preemptions.observe(request.preemptions)

    def _count_work(self, step: Step) -> None:
        """MFU estimates: 2 FLOPs per parameter per token; weights and KV read, new KV written."""
        memory = self.profile.memory
        tokens = len(step.decodes) * (self.k + 1) + sum(chunk for _, chunk in step.prefills)
        kv_read = sum(r.kv_tokens for r in step.decodes) * memory.kv_bytes_per_token
        self.metrics.work.flops.inc(2 * self.profile.model.params_billion * 1e9 * tokens / self._tp)
        self.metrics.work.read_bytes.inc((memory.weights_gib * GIB + kv_read) / self._tp)
        self.metrics.work.write_bytes.inc(tokens * memory.kv_bytes_per_token / self._tp)

    def _update_gauges(self) -> None:
        self.metrics.scheduler.show(
            running=len(self.running) + len(self.leaked),
            waiting=len(self.waiting),
            kv_usage=(self._used_blocks + self._held_blocks()) / self._usable_blocks(),
        )

    def stats(self) -> dict[str, float | int | bool]:
        """Engine state and timing fidelity, for the admin endpoint and benchmarks."""
        return {
            "alive": self.alive,
            "model_time_s": self._now,
            "wall_model_time_s": self.clock.now(),
            "time_scale": self.clock.time_scale,
            "steps": self.steps,
            "lag_mean_s": self.lag_sum / self.steps if self.steps else 0.0,
            "lag_max_s": self.lag_max,
            "running": len(self.running),
            "waiting": len(self.waiting),
            "leaked": len(self.leaked),
            "num_gpu_blocks": self.limits.num_gpu_blocks,
            "used_blocks": self._used_blocks,
            "held_blocks": self._held_blocks(),
        }
