"""The engine loop without HTTP: batching limits, KV-cache pressure, finishing, faults, determinism."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from specpilot.mockvllm.config import parse_args
from specpilot.mockvllm.engine import QueueFull
from specpilot.mockvllm.faults import parse_fault
from specpilot.mockvllm.profile import parse_profile
from specpilot.mockvllm.request import FinishReason, Request
from specpilot.mockvllm.server import MockServer
from specpilot.mockvllm.textgen import TokenSource, text_seed
from specpilot.testing.waiting import eventually

LABELS = {"model_name": "m", "engine": "0"}
Start = Callable[..., Awaitable[MockServer]]


@pytest.fixture
async def start() -> AsyncIterator[Start]:
    """Start engines (no listeners) that step 1000 times faster than real time."""
    tasks: list[asyncio.Task[None]] = []

    async def start_engine(
        *flags: str, profile: dict[str, Any] | None = None, crashes: list[int] | None = None
    ) -> MockServer:
        config = parse_args(["m", "--time-scale", "0.001", *flags])
        server = MockServer(
            config, parse_profile(profile), env={}, on_crash=(crashes if crashes is not None else []).append
        )
        tasks.append(asyncio.create_task(server.engine.run()))
        return server

    yield start_engine
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def submit(
    server: MockServer,
    prompt: str,
    *,
    prompt_tokens: int = 32,
    max_tokens: int = 64,
    stop: tuple[str, ...] = (),
    ignore_eos: bool = True,
    scope: str = "default",
) -> Request:
    tokens = TokenSource(text_seed(prompt, 0), mean_length=20)
    return server.engine.submit(
        scope=scope, prompt_tokens=prompt_tokens, max_tokens=max_tokens, tokens=tokens, stop=stop, ignore_eos=ignore_eos
    )


async def finish(*requests: Request) -> None:
    async def drain(request: Request) -> None:
        while not request.done:
            await request.next_text()

    await asyncio.wait_for(asyncio.gather(*(drain(r) for r in requests)), timeout=20)


def value(server: MockServer, name: str, **labels: str) -> float:
    sample = server.registry.get_sample_value(name, {**LABELS, **labels})
    assert sample is not None, name
    return sample


async def test_max_num_seqs_bounds_the_batch(start: Start) -> None:
    server = await start("--max-num-seqs", "4")
    requests = [submit(server, f"p{i}") for i in range(10)]
    batches: list[int] = []

    def batch_until_done() -> bool:
        batches.append(len(server.engine.scheduler.running))
        return all(r.done for r in requests)

    await eventually("every request finished", batch_until_done, every=0)
    peak = max(batches)
    assert peak == 4
    assert value(server, "vllm:request_success_total", finished_reason="length") == 10


async def test_a_full_kv_cache_queues_and_preempts_yet_every_request_completes(start: Start) -> None:
    # 40 usable blocks of 16 tokens; each request needs up to (32 + 200) / 16 = 15 blocks.
    server = await start(profile={"memory": {"num_gpu_blocks": 41, "block_size": 16}, "model": {"max_model_len": 512}})
    requests = [submit(server, f"p{i}", max_tokens=200) for i in range(6)]
    usage: list[float] = []

    def usage_until_done() -> bool:
        usage.append(value(server, "vllm:kv_cache_usage_perc"))
        return all(r.done for r in requests)

    await eventually("every request finished", usage_until_done, every=0)
    peak_usage = max(usage)
    assert all(r.output_tokens == 200 and r.finish_reason is FinishReason.LENGTH for r in requests)
    assert value(server, "vllm:num_preemptions_total") > 0
    assert sum(r.preemptions for r in requests) == value(server, "vllm:num_preemptions_total")
    assert 0.8 < peak_usage <= 1.0
    assert value(server, "vllm:kv_cache_usage_perc") == 0.0
    assert value(server, "vllm:request_queue_time_seconds_sum") > 0


async def test_a_memory_pressure_fault_holds_kv_blocks(start: Start) -> None:
    server = await start(profile={"memory": {"num_gpu_blocks": 101}, "model": {"max_model_len": 1024}})
    server.faults.add(parse_fault({"kind": "memory", "fraction": 0.7}), 0.0)
    requests = [submit(server, f"p{i}", max_tokens=150) for i in range(4)]
    await finish(*requests)
    assert value(server, "vllm:num_preemptions_total") > 0
    assert value(server, "vllm:kv_cache_usage_perc") == pytest.approx(0.7)


async def test_generation_finishes_on_length_eos_and_stop_strings(start: Start) -> None:
    server = await start()
    length = submit(server, "a", max_tokens=5)
    eos = submit(server, "b", max_tokens=500, ignore_eos=False)
    await finish(length, eos)
    assert (length.finish_reason, length.output_tokens) == (FinishReason.LENGTH, 5)
    assert eos.finish_reason is FinishReason.STOP and eos.output_tokens == eos.tokens.eos_at + 1
    word = length.text.split()[2]
    stopped = submit(server, "a", max_tokens=5, stop=(f" {word}",))
    await finish(stopped)
    assert stopped.finish_reason is FinishReason.STOP and stopped.stop_reason == f" {word}"
    assert length.text.startswith(stopped.text) and f" {word}" not in stopped.text


async def test_an_aborted_request_frees_its_blocks_and_is_not_counted(start: Start) -> None:
    server = await start()
    request = submit(server, "a", max_tokens=1000)
    while request.output_tokens < 3:
        await request.next_text()
    server.engine.abort(request)
    assert server.engine.stats()["used_blocks"] == 0
    aborted_at = server.engine.stats()["model_time_s"]
    await eventually(
        "the engine's clock past the step in flight at the abort",
        lambda: server.engine.stats()["model_time_s"] > aborted_at,
    )
    total = sum(value(server, "vllm:request_success_total", finished_reason=r) for r in ("stop", "length", "abort"))
    assert total == 0


async def test_queue_limits_reject_with_a_reason(start: Start) -> None:
    server = await start("--max-num-queued-reqs", "2", "--max-num-seqs", "1")
    first = submit(server, "a")
    await eventually("the first request taken from the queue", lambda: first not in server.engine.scheduler.waiting)
    # the first is running; two may wait
    submit(server, "b")
    submit(server, "c")
    with pytest.raises(QueueFull):
        submit(server, "d")
    sample = server.registry.get_sample_value(
        "vllm:admission_rejections_total", {"model_name": "m", "reason": "max_num_queued_reqs"}
    )
    assert sample == 1
    await finish(first)


async def test_the_same_seed_and_arrivals_give_the_same_run(start: Start) -> None:
    spec = ("-sc", '{"model": "d", "num_speculative_tokens": 4}')
    runs = []
    for _ in range(2):
        server = await start(*spec)
        requests = [submit(server, f"p{i}", max_tokens=100) for i in range(3)]
        await finish(*requests)
        runs.append([value(server, "vllm:spec_decode_num_accepted_tokens_total"), [r.text for r in requests]])
    assert runs[0] == runs[1]


async def test_acceptance_follows_the_scope(start: Start) -> None:
    server = await start(
        "-sc",
        '{"model": "d", "num_speculative_tokens": 4}',
        profile={"acceptance": {"default": 0.0, "scopes": {"easy": 1.0}}},
    )
    easy = submit(server, "a", max_tokens=101, scope="easy")
    await finish(easy)
    assert value(server, "vllm:spec_decode_num_drafts_total") == 20  # 1 prefill token + 20 rounds of 5
    hard = submit(server, "b", max_tokens=11)
    await finish(hard)
    assert value(server, "vllm:spec_decode_num_drafts_total") == 30
    assert value(server, "vllm:spec_decode_num_accepted_tokens_total") == 80
    assert value(server, "vllm:spec_decode_num_accepted_tokens_per_pos_total", position="3") == 20


async def test_a_hang_stalls_steps_until_it_is_cleared(start: Start) -> None:
    server = await start()
    hang = server.faults.add(parse_fault({"kind": "hang"}), 0.0)
    request = submit(server, "a", max_tokens=3)
    await eventually(
        "the hung engine's clock 100 model seconds past the request's arrival",
        lambda: server.engine.stats()["model_time_s"] >= request.arrival + 100,
    )
    assert request.output_tokens == 0
    server.faults.remove(hang.id)
    server.engine.wake()
    await finish(request)
    assert value(server, "vllm:request_queue_time_seconds_sum") > 50  # model seconds spent hung


async def test_a_crash_fault_kills_the_engine(start: Start) -> None:
    crashes: list[int] = []
    server = await start(crashes=crashes)
    request = submit(server, "a", max_tokens=10_000)
    server.faults.add(parse_fault({"kind": "crash", "exit_code": 7}), 0.0)
    await finish(request)
    assert crashes == [7]
    assert request.aborted and not server.engine.alive
