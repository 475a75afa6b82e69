"""Loopback fixtures: a router in this process with a fake upstream per arm (harness.py), on asyncio's own
loop and on uvloop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import uvloop
from tests.component.loopback import Serve
from tests.component.router.harness import PILOT, FakeVllm, Harness, HarnessFactory

from specpilot.router.app import Router
from specpilot.wire.routerconfig import RouterConfig
from specpilot.wire.routes import ROUTES_KEY, RoutingTable, render_routes


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> dict[str, Callable[[], Any]]:
    """Every router test runs on asyncio's own loop and on uvloop, which the router runs on."""
    return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}


@pytest.fixture
async def make_router(tmp_path: Path, serve: Serve) -> AsyncIterator[HarnessFactory]:
    """Start a router on loopback with fake baseline and speculative arms, and a control arm with `control`."""
    started: list[Harness] = []

    async def make(
        *extra_args: str, routes: RoutingTable | None = None, spec_endpoints: str | None = None, control: bool = False
    ) -> Harness:
        baseline, speculative, control_arm = FakeVllm("baseline"), FakeVllm("speculative"), FakeVllm("control")
        for fake in (baseline, speculative, control_arm):
            await fake.start(serve)
        routes_file = tmp_path / f"routes-{len(started)}.json"
        routes_file.write_text(render_routes(routes or Harness.table(Harness.scope("code", spec=100)))[ROUTES_KEY])
        spec = spec_endpoints if spec_endpoints is not None else speculative.address
        config = RouterConfig.parse(
            [
                "--pilot",
                PILOT,
                "--listen",
                "127.0.0.1:0",
                "--admin-listen",
                "127.0.0.1:0",
                "--static-routes",
                str(routes_file),
                "--static-endpoints",
                f"baseline={baseline.address}",
                "--static-endpoints",
                f"speculative={spec}",
                *(["--static-endpoints", f"control={control_arm.address}"] if control else []),
                *extra_args,
            ],
            {},
        )
        router = Router(config)
        await router.start()
        harness = Harness(router, baseline, speculative, control_arm, aiohttp.ClientSession())
        started.append(harness)
        await Harness.wait_for(lambda: router.state.ready)
        return harness

    yield make
    for harness in started:
        await harness.client.close()
        await harness.router.stop()
