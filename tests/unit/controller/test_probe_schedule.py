"""Probe rounds run on their own schedule, beside the collection loop, in virtual time (looptime):
the operator's loops as its daemon runs them, on the fakes of `specpilot.testing.fakes`."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from specpilot.api.spec import SpeculationPilotSpec
from specpilot.controller.core.measurements import cadence
from specpilot.controller.schedule import repeat
from specpilot.testing.harness import Harness, pilot_doc

TIMEOUT = 60.0  # a score webhook's timeout: the round waits that long for an answer that never comes


class Flag:
    """The daemon's stop flag, as Kopf's DaemonStopped reads."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def __bool__(self) -> bool:
        return self.event.is_set()

    async def wait(self) -> None:
        await self.event.wait()


@pytest.mark.looptime
async def test_a_probe_round_whose_webhook_hangs_for_its_whole_timeout_never_delays_a_collection() -> None:
    h = Harness(pilot_doc(probes=True))
    await h.reconcile()
    h.ready_pods = True
    await h.reconcile()
    loop = asyncio.get_running_loop()
    start, at = loop.time(), h.clock.now
    h.controller.clock = lambda: at + timedelta(seconds=loop.time() - start)  # the loops' clock is the loop's
    collected: list[float] = []
    engines = h.engines.read

    async def read(*args: object, **kwargs: object) -> object:
        collected.append(loop.time() - start)
        return await engines(*args, **kwargs)  # type: ignore[arg-type]

    h.engines.read = read  # type: ignore[method-assign]
    h.quality.hang = TIMEOUT
    stopped = Flag()
    every = cadence(SpeculationPilotSpec.from_wire(h.body["spec"]).analysis)
    loops = [
        asyncio.create_task(repeat(lambda: h.controller.collect(h.body, h.observe()), stopped, what="measuring")),
        asyncio.create_task(repeat(lambda: h.controller.probe(h.body, h.observe()), stopped, what="probing")),
    ]
    await asyncio.sleep(99)  # 99 s of virtual time with both schedules running
    stopped.event.set()
    await asyncio.gather(*loops)

    # A collection every cadence, on time, all through the rounds that hung: none waited for them.
    assert collected == [pytest.approx(every * i) for i in range(int(99 // every) + 1)]
    # The rounds ran on their own schedule (one at once, the next as soon as the first, which outlasted
    # the probe interval, ended), and the time they took shows in the probes' own result.
    assert h.quality.probed == 2
    memory = h.controller.memory(h.ref)
    assert memory.probe is not None and memory.probe[0].seconds == pytest.approx(TIMEOUT)
