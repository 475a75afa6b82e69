"""What each step of the mock engine runs, chosen the way vLLM's V1 scheduler chooses it.

Running requests first, in order, preempting the newest when KV-cache blocks run out; then waiting
requests in arrival order up to `max_num_seqs`, prefills chunked to the token budget. A preempted
request goes back to the front of the queue and prefills its prompt and output so far again.
"""

from __future__ import annotations

import collections
import math
import random
from collections.abc import Collection
from dataclasses import dataclass

from specpilot.mockvllm.config import EngineLimits
from specpilot.mockvllm.costmodel import blocks_for
from specpilot.mockvllm.faults import FaultBoard
from specpilot.mockvllm.metrics import CacheCounters, KvResidency, SchedulerGauges
from specpilot.mockvllm.request import Request

# The requests a step decodes, and the prefill chunks it runs.
Batch = tuple[list[Request], list[tuple[Request, int]]]


@dataclass(frozen=True)
class QueueLimits:
    """`--max-num-queued-reqs` and `--max-num-queued-tokens`: how much may wait (None: no limit)."""

    max_reqs: int | None
    max_tokens: int | None

    def refusal(self, waiting: Collection[Request], prompt_tokens: int) -> str | None:
        """The limit that refuses a new request of `prompt_tokens` behind `waiting`, if one does."""
        if self.max_reqs is not None and len(waiting) >= self.max_reqs:
            return "max_num_queued_reqs"
        if self.max_tokens is not None and sum(r.prompt_tokens for r in waiting) + prompt_tokens > self.max_tokens:
            return "max_num_queued_tokens"
        return None


class KvCache:
    """The KV-cache blocks: those requests hold, those a memory fault holds away, and the rest free."""

    def __init__(
        self, num_gpu_blocks: int, faults: FaultBoard, residency: KvResidency | None, *, sample: float, seed: int
    ) -> None:
        self.num_gpu_blocks = num_gpu_blocks
        self.used = 0
        self._faults = faults
        self._residency = residency
        self._sample = sample
        self._rng = random.Random(seed)

    def usable(self) -> int:
        return self.num_gpu_blocks - 1  # vLLM keeps one null block

    def held(self, now: float) -> int:
        """The blocks memory-pressure faults hold away at `now`."""
        return math.floor(self._faults.held_fraction(now) * self.usable())

    def free(self, now: float) -> int:
        return self.usable() - self.held(now) - self.used

    def usage(self, now: float) -> float:
        """The share of usable blocks taken, by requests or faults."""
        return (self.used + self.held(now)) / self.usable()

    def take(self, request: Request, blocks: int) -> None:
        request.blocks += blocks
        self.used += blocks

    def release(self, request: Request, now: float) -> None:
        """Free a request's blocks, sampling each one's lifetime since the request was scheduled."""
        if self._residency is not None:
            for _ in range(request.blocks):
                if self._rng.random() < self._sample:
                    self._residency.block_lifetime.observe(now - request.scheduled_at)
        self.used -= request.blocks
        request.blocks = 0

    def stats(self, now: float) -> dict[str, int]:
        return {"num_gpu_blocks": self.num_gpu_blocks, "used_blocks": self.used, "held_blocks": self.held(now)}


class Scheduler:
    """The running and waiting requests (and those leaked), and the batch each step runs."""

    def __init__(
        self,
        limits: EngineLimits,
        kv: KvCache,
        counters: CacheCounters,
        *,
        chunked_prefill: bool,
        queue_limits: QueueLimits,
    ) -> None:
        self.limits = limits
        self.kv = kv
        self.running: list[Request] = []
        self.waiting: collections.deque[Request] = collections.deque()
        self.leaked: list[Request] = []  # dropped by their clients, yet holding a slot and their blocks
        self._counters = counters
        self._chunked = chunked_prefill
        self.queue_limits = queue_limits

    def schedule(self, now: float) -> Batch | None:
        """The batch of a step starting at `now` (None: nothing can run); its blocks are taken."""
        block_size = self.limits.block_size
        budget = self.limits.max_num_batched_tokens
        free = self.kv.free(now)
        decodes: list[Request] = []
        prefills: list[tuple[Request, int]] = []
        preempted = False
        index = 0
        while index < len(self.running):
            request = self.running[index]
            pending = request.prefill_target - request.kv_tokens
            want = min(pending, budget) if pending > 0 else 1 + self.limits.num_speculative_tokens
            if want > budget or want <= 0:
                index += 1
                continue
            need = blocks_for(request.kv_tokens + want, block_size) - request.blocks
            while need > free and self.running[-1] is not request:
                free += self._preempt(self.running[-1], now)
                preempted = True
            if need > free:
                self._preempt(request, now)
                preempted = True
                break
            free -= need
            self.kv.take(request, need)
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
            if request.arrival > now or (not self._chunked and pending > budget):
                break
            want = min(pending, budget)
            need = blocks_for(want, block_size)
            if need > free:
                break
            self.waiting.popleft()
            self.running.append(request)
            request.prefill_target = pending
            request.scheduled_at = now
            self.kv.take(request, need)
            free -= need
            budget -= want
            prefills.append((request, want))
            if request.first_scheduled is None:
                request.first_scheduled = now
                self._counters.prefix_queries.inc(request.prompt_tokens)
        return (decodes, prefills) if decodes or prefills else None

    def _preempt(self, request: Request, now: float) -> int:
        """Move a running request back to the front of the queue; return the blocks it freed."""
        self.running.remove(request)
        freed = request.blocks
        self.kv.release(request, now)
        request.kv_tokens = 0
        request.preemptions += 1
        self.waiting.appendleft(request)
        self._counters.preemptions.inc()
        return freed

    def abort(self, request: Request, now: float) -> None:
        """Drop a request, freeing its blocks if it runs."""
        request.aborted = True
        if request in self.waiting:
            self.waiting.remove(request)
        if request in self.running:
            self.running.remove(request)
            self.kv.release(request, now)

    def leak(self, request: Request, now: float) -> None:
        """Drop a request but keep its slot and blocks taken for good, if it runs; one not yet scheduled
        is aborted."""
        if request not in self.running:
            self.abort(request, now)
            return
        request.aborted = True
        self.running.remove(request)
        self.leaked.append(request)

    def abort_all(self) -> None:
        """Drop every request, as a crashed engine does, and wake their handlers."""
        for request in [*self.running, *self.waiting]:
            request.aborted = True
            request.wake()
        self.running.clear()
        self.waiting.clear()
        self.leaked.clear()

    def finish(self, now: float) -> list[Request]:
        """Release the requests that finished in the step committed at `now`; return them, in batch order."""
        finished = [r for r in self.running if r.finish_reason is not None]
        for request in finished:
            self.kv.release(request, now)
        if finished:
            self.running = [r for r in self.running if not r.done]
        return finished

    def show(self, gauges: SchedulerGauges, now: float) -> None:
        """Set the scheduler gauges; a leaked request still counts as running."""
        gauges.show(
            running=len(self.running) + len(self.leaked), waiting=len(self.waiting), kv_usage=self.kv.usage(now)
        )

    def stats(self, now: float) -> dict[str, int]:
        """The requests by state and the KV-cache blocks by holder."""
        return {
            "running": len(self.running),
            "waiting": len(self.waiting),
            "leaked": len(self.leaked),
            **self.kv.stats(now),
        }
