"""The collection and probe rounds, apart from the reconcile and each on its own schedule: they hand the
reconcile frozen measurements and probe results through the pilot's memory."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from specpilot.analysis.quality import accumulated, probe_groups, round_cases
from specpilot.api.spec import SpeculationPilotSpec
from specpilot.controller.core.measurements import cadence, compared_arm
from specpilot.controller.core.policy import Policy
from specpilot.controller.core.progress import probe_due, probe_wait, window_due
from specpilot.controller.core.snapshot import Observation, status_of
from specpilot.controller.core.workload_ref import served_model
from specpilot.controller.gather import external_names, pilot_ref, with_baseline
from specpilot.controller.memory import PilotMemory
from specpilot.controller.ports import KubeApi, QualityGates
from specpilot.wire.names import MEASURED_ARMS, REHEARSAL_ROUTER_COMPONENT, ROUTER_COMPONENT, Arm


def admitted(policy: Policy, body: Mapping[str, Any], namespace: str) -> SpeculationPilotSpec | None:
    """The pilot's spec when it parses and the operator's policy admits it: nothing is measured or
    called for it otherwise."""
    try:
        spec = policy.admit(SpeculationPilotSpec.from_wire(body["spec"]), namespace)
    except ValidationError:
        return None
    return None if isinstance(spec, list) else spec


async def probe_round(
    quality: QualityGates,
    memory: PilotMemory,
    spec: SpeculationPilotSpec,
    seen: Observation,
    *,
    clock: Callable[[], datetime],
    namespace: str,
) -> float:
    """A probe round if one is due, apart from collection: a round held up by a slow score webhook or a
    cancel case's bound never delays a collection, and shows in the round's own time
    (`ProbeResult.seconds`). Score webhooks' Secrets are read from the pilot's `namespace`. Seconds until
    the probe schedule looks again."""
    probes, now = spec.quality.probes, clock()
    assert probes is not None  # only a spec with probes is probed
    arms = {arm: seen.ready(arm.value) for arm in MEASURED_ARMS}
    # probes compare like with like: the control arm serves a copy of the same traffic
    compared = compared_arm(spec)
    probed_at = memory.probe[1] if memory.probe else None
    if not probe_due(probes, arms, probed_at, now, compared=compared):
        return probe_wait(probes, probed_at, now, poll=cadence(spec.analysis))
    workload = memory.workload
    result = await quality.probe(
        baseline=arms[compared][0][1],
        speculative=arms[Arm.SPECULATIVE][0][1],
        probes=probes,
        cases=round_cases(spec),
        model=served_model(workload) if workload is not None else spec.served_model,
        namespace=namespace,
    )
    latest = replace(result, since=now, seconds=(clock() - now).total_seconds())
    before = memory.probe[0] if memory.probe else None
    memory.probe = (accumulated(before, latest, groups=probe_groups(spec)), now)
    return probe_wait(probes, now, clock(), poll=cadence(spec.analysis))


async def measurable(
    kube: KubeApi, policy: Policy, memory: PilotMemory, body: Mapping[str, Any], seen: Observation
) -> tuple[PilotMemory, SpeculationPilotSpec, Observation] | None:
    """What collection and probing read: the pilot's memory, its spec when the policy admits it, and
    the observation with production's pods where a workload is piloted; None while there is nothing
    to measure (an invalid spec, a workload not read yet or refused)."""
    spec = admitted(policy, body, body["metadata"]["namespace"])
    if spec is None or (spec.workload_ref is not None and memory.workload is None):
        return None
    if await external_names(kube, policy, body["metadata"]["namespace"], spec):
        return None  # the reconcile says why
    if memory.workload is not None and spec.workload_ref is not None:
        seen = await with_baseline(kube, pilot_ref(body), seen, memory.workload)
    return memory, spec, seen


async def collection(
    memory: PilotMemory,
    spec: SpeculationPilotSpec,
    seen: Observation,
    body: Mapping[str, Any],
    *,
    clock: Callable[[], datetime],
) -> float:
    """One collection of the pilot's measurements into `memory`; seconds to the next. A due window wakes
    the reconcile at once, so that it is judged on what was just collected."""
    now = clock()
    memory.measurements = await memory.collector.collect(
        arms={arm: seen.ready(arm.value) for arm in MEASURED_ARMS},
        # the rehearsal router's samples too: its requests are the arms' load while it runs
        routers=[*seen.ready(ROUTER_COMPONENT), *seen.ready(REHEARSAL_ROUTER_COMPONENT)],
        analysis=spec.analysis,
        rehearsal=spec.rehearsal,
        pilot=(body["metadata"]["namespace"], body["metadata"]["name"]),
        now=now,
    )
    if window_due(memory.status or status_of(body), spec, memory.measurements.collected_at, now):
        memory.wakeup.set(urgent=True)
    return cadence(spec.analysis)
