"""Probe answers are read with a cap: an engine pod answering without end fails the probe call, naming
the cap, and the operator holds no more of the answer than the cap while it reads."""

from __future__ import annotations

import tracemalloc

import aiohttp
import pytest
from aiohttp import web
from tests.component.loopback import Serve

from specpilot.api.spec import ProbeCase, Probes
from specpilot.controller.quality_gates import run_probes
from specpilot.fetch.bodies import PROBE_ANSWER_BYTES, TooLarge, read_body

ANSWER_BYTES = 48 * 1024 * 1024
PIECE = b'data: {"choices": [{"index": 0, "text": "' + b"x" * 65_000 + b'"}]}\n\n'
BUFFERED = 1024 * 1024  # what the socket and aiohttp's stream may hold beyond what was read


async def endless(request: web.Request) -> web.StreamResponse:
    """48 MiB of well-formed events, chunked: no Content-Length warns the reader."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for _ in range(ANSWER_BYTES // len(PIECE) + 1):
        await response.write(PIECE)
    return response


async def unended(request: web.Request) -> web.StreamResponse:
    """One line of 48 MiB that never ends: a cancel case reads lines."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for _ in range(ANSWER_BYTES // 65_536):
        await response.write(b"x" * 65_536)
    return response


async def gauge(request: web.Request) -> web.Response:
    return web.Response(text="vllm:num_requests_running 0\n")


@pytest.fixture
async def engine(serve: Serve) -> str:
    app = web.Application()
    app.router.add_post("/v1/completions", endless)
    app.router.add_post("/v1/chat/completions", unended)
    app.router.add_get("/metrics", gauge)
    return (await serve(app)).url


@pytest.mark.parametrize(
    "case",
    [
        {"kind": "greedy", "prompt": "p", "chat": False},
        {"kind": "cancel", "prompt": "p", "chat": True, "afterChunks": 3},
    ],
    ids=["whole-and-streamed", "cancel"],
)
async def test_an_answer_past_the_cap_fails_the_probe_call_naming_the_cap(engine: str, case: dict[str, object]) -> None:
    parsed = [ProbeCase.from_wire(case)]
    async with aiohttp.ClientSession() as session:
        result = await run_probes(
            session, baseline=engine, speculative=engine, probes=Probes(cases=parsed), cases=parsed, model="m"
        )
    assert result.error == f"probes failed: answer over {PROBE_ANSWER_BYTES} bytes refused " + (
        "(the operator reads no more of a body)"
    )
    assert not result.tallies


async def test_the_reader_holds_no_more_than_the_cap_of_a_48_mib_answer(engine: str) -> None:
    async with aiohttp.ClientSession() as session:
        tracemalloc.start()
        try:
            async with session.post(f"{engine}/v1/completions", json={}) as response:
                with pytest.raises(TooLarge) as refused:
                    await read_body(response, PROBE_ANSWER_BYTES)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert refused.value.limit == PROBE_ANSWER_BYTES
    assert peak < PROBE_ANSWER_BYTES + BUFFERED, f"{peak} bytes held reading a {ANSWER_BYTES}-byte answer"
