"""What the shell reads for a tick besides the pilot and its indexed children: spec.workloadRef's
Deployment and production's pods, the Services a spec's URLs lead through, the forecast's ConfigMap, and the
webhooks' answers about the windows due."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from specpilot.api.spec import SpeculationPilotSpec, Webhook
from specpilot.api.validate import Problem
from specpilot.controller.core.objects import Json, PilotRef
from specpilot.controller.core.observe import baseline_pod_view
from specpilot.controller.core.policy import Policy, outbound_urls
from specpilot.controller.core.progress import window_summary
from specpilot.controller.core.snapshot import Observation, Pilot, Snapshot
from specpilot.controller.core.windows import windows_due
from specpilot.controller.core.workload_ref import Workload, read_workload
from specpilot.controller.kube import ApiError
from specpilot.controller.ports import KubeApi, QualityGates

log = logging.getLogger("specpilot.operator")
EXTERNAL_NAME_HOPS = 4  # ExternalName Services followed in a row, at most


def pilot_ref(body: Mapping[str, Any]) -> PilotRef:
    meta = body["metadata"]
    return PilotRef(name=meta["name"], namespace=meta["namespace"], uid=meta["uid"])


async def piloted_workload(
    kube: KubeApi, policy: Policy, ref: PilotRef, spec: SpeculationPilotSpec
) -> Workload | list[Problem]:
    """spec.workloadRef's Deployment as read now, or why it cannot be piloted."""
    assert spec.workload_ref is not None
    obj = await kube.get("apps/v1", "Deployment", ref.namespace, spec.workload_ref.name)
    found = read_workload(obj, spec.workload_ref)
    if isinstance(found, list):
        return found
    return list(policy.image_problems(found.image, "spec.workloadRef.name")) or found


async def followed(kube: KubeApi, policy: Policy, pilot: Pilot) -> Pilot:
    """The pilot, refused where a URL of its spec leads through ExternalName Services to a host the
    operator may not call (`external_names`)."""
    spec = pilot.spec if not pilot.deleting else None
    refused = await external_names(kube, policy, pilot.ref.namespace, spec) if spec is not None else []
    return replace(pilot, spec=None, problems=tuple(refused)) if refused else pilot


async def external_names(kube: KubeApi, policy: Policy, namespace: str, spec: SpeculationPilotSpec) -> list[Problem]:
    """The spec's URLs that name a Service of the pilot's namespace of type ExternalName, judged by where it
    leads: a pilot may call its own Services, not whatever one of them names."""
    found = [(where, await _leads_to(kube, policy, namespace, url)) for where, url in outbound_urls(spec)]
    return [Problem(where, refused) for where, refused in found if refused is not None]


async def _leads_to(kube: KubeApi, policy: Policy, namespace: str, written: str) -> str | None:
    """Why the operator may not call where `written` leads through ExternalName Services (followed through
    EXTERNAL_NAME_HOPS at most); None where it may."""
    url = written
    for _ in range(EXTERNAL_NAME_HOPS):
        service = policy.own_service(url, namespace)
        obj = await kube.get("v1", "Service", namespace, service.name) if service is not None else None
        target = ((obj or {}).get("spec") or {}).get("externalName")
        if service is None or not isinstance(target, str) or not target:
            return None
        url, refused = policy.followed(url, service, target, namespace)
        if refused is not None:
            return refused
    return f"more than {EXTERNAL_NAME_HOPS} ExternalName Services in a row: name the host they lead to"


async def with_baseline(kube: KubeApi, ref: PilotRef, seen: Observation, workload: Workload) -> Observation:
    """The observation with the workload's pods, production's baseline, which the index does not hold."""
    pods = await kube.pods(ref.namespace, workload.selector)
    return replace(seen, pods=(*seen.pods, *(baseline_pod_view(pod) for pod in pods)))


async def read_forecast_config(kube: KubeApi, ref: PilotRef, spec: SpeculationPilotSpec) -> Json | None:
    """spec.analysis.forecast's ConfigMap; None where none is named, or it is missing or unreadable (which
    the status then says, and the pilot carries on without a forecast)."""
    forecast = spec.analysis.forecast
    if forecast is None or forecast.config_map is None:
        return None
    try:
        return await kube.get("v1", "ConfigMap", ref.namespace, forecast.config_map)
    except ApiError as error:
        log.warning("%s/%s: ConfigMap %s unreadable: %s", ref.namespace, ref.name, forecast.config_map, error)
        return None


async def asked(quality: QualityGates, snapshot: Snapshot, hooks: Sequence[Webhook]) -> Snapshot:
    """The snapshot with the webhooks' answers about each window due."""
    windows, ref = windows_due(snapshot), snapshot.pilot.ref
    answers = await asyncio.gather(
        *(
            quality.ask(hooks, window_summary(ref.name, ref.namespace, window), namespace=ref.namespace)
            for window in windows.values()
        )
    )
    return replace(snapshot, webhooks=dict(zip(windows, answers, strict=True)))
