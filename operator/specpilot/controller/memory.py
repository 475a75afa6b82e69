"""What the shell keeps of each pilot between ticks (`PilotMemory`), and what wakes its loop early
(`Wakeup`). All of it can be lost: status holds what a restart needs."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime

from specpilot.analysis.quality import ProbeResult
from specpilot.api.status import SpeculationPilotStatus
from specpilot.controller.collect import Collector
from specpilot.controller.core.measurements import Measurements
from specpilot.controller.core.snapshot import Written
from specpilot.controller.core.workload_ref import Workload


class Wakeup:
    """Why a pilot's loop should look again before its next tick: a change (gathered for a moment,
    as a rollout changes many objects at once), or a window due (at once: its flip should not wait)."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self.urgent = False

    def set(self, *, urgent: bool = False) -> None:
        self.urgent = self.urgent or urgent
        self._event.set()

    def clear(self) -> None:
        self._event.clear()
        self.urgent = False

    async def wait(self) -> None:
        await self._event.wait()


@dataclass
class PilotMemory:
    """What the shell keeps of one pilot between ticks. All of it can be lost: status holds what a
    restart needs. The reconcile reads it once into a snapshot and records what it wrote; the
    collection replaces `measurements`, and a probe round `probe`, with new frozen values."""

    collector: Collector
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    wakeup: Wakeup = field(default_factory=Wakeup)
    written: Written = field(default_factory=Written)
    status: SpeculationPilotStatus | None = None  # the last status written, newer than a lagging watch
    measurements: Measurements = field(default_factory=Measurements)
    probe: tuple[ProbeResult, datetime] | None = None  # the probe rounds so far, and when the latest began
    workload: Workload | None = None  # spec.workloadRef's Deployment as the last reconcile read it
    restored: bool = False  # the taken-over Service was put back by this teardown
