"""Serving through a Service clients already use (`spec.router.takeover`). Its original selector and
ports are recorded in status first; the next tick re-points it at the routers, once they are ready.
It is put back exactly as it was when the pilot is deleted, its spec goes invalid, the takeover is
removed, or every scope is aborted (a resume takes it over again). Pure: the shell reads the Service
and sends the patches."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from specpilot.analysis.rollout import Event, EventType
from specpilot.api.reasons import Reason
from specpilot.api.spec import Takeover
from specpilot.api.status import ScopeState, ScopeStatus, TakeoverPhase, TakeoverStatus
from specpilot.wire.names import ROUTER_PORT, router_selector

Json = dict[str, Any]
HELD = (TakeoverPhase.RECORDED, TakeoverPhase.TAKEN)  # the Service is, or may be, re-pointed


@dataclass(frozen=True)
class ServicePatch:
    """A JSON merge patch of the taken-over Service."""

    service: str
    body: Json


@dataclass(frozen=True)
class TakeoverTick:
    status: TakeoverStatus | None
    patch: ServicePatch | None = None
    events: tuple[Event, ...] = ()


def _selector(want: Mapping[str, str], have: Mapping[str, str]) -> dict[str, str | None]:
    """A merge patch's selector that turns `have` into `want` (null removes a key)."""
    return {**dict.fromkeys((key for key in have if key not in want), None), **want}


def take(pilot: str, original: TakeoverStatus) -> ServicePatch:
    """The Service re-pointed at the routers, on its own ports."""
    ports = [{**port, "targetPort": ROUTER_PORT} for port in original.ports]
    body = {"spec": {"selector": _selector(router_selector(pilot), original.selector), "ports": ports}}
    return ServicePatch(original.service, body)


def restore(pilot: str, original: TakeoverStatus) -> ServicePatch:
    """The Service as it was before the takeover."""
    body = {"spec": {"selector": _selector(original.selector, router_selector(pilot)), "ports": original.ports}}
    return ServicePatch(original.service, body)


def restoring(pilot: str, previous: TakeoverStatus | None, why: str, now: datetime) -> TakeoverTick:
    """Put the Service back, where it is (or may be) taken over; else nothing."""
    if previous is None or previous.phase not in HELD:
        return TakeoverTick(previous)
    message = f"Service {previous.service} restored to its original selector and ports: {why}"
    status = previous.model_copy(update={"phase": TakeoverPhase.RESTORED, "at": now, "message": message})
    return TakeoverTick(status, restore(pilot, previous), (Event(EventType.NORMAL, Reason.SERVICE_RESTORED, message),))


def takeover_tick(
    pilot: str,
    wanted: Takeover | None,
    previous: TakeoverStatus | None,
    service: Mapping[str, Any] | None,
    *,
    routers_ready: bool,
    scopes: Sequence[ScopeStatus],
    now: datetime,
) -> TakeoverTick:
    """The takeover's next step."""
    if previous is not None and previous.phase in HELD and (wanted is None or wanted.service != previous.service):
        return restoring(pilot, previous, "spec.router.takeover no longer names it", now)
    if wanted is None:
        return TakeoverTick(previous)
    mine = previous if previous is not None and previous.service == wanted.service else None
    if mine is not None and mine.phase is TakeoverPhase.TAKEN:
        return TakeoverTick(mine)
    if mine is not None and mine.phase is TakeoverPhase.RECORDED:
        message = f"Service {wanted.service} selects the routers (its original selector and ports are kept here)"
        status = mine.model_copy(update={"phase": TakeoverPhase.TAKEN, "at": now, "message": message})
        return TakeoverTick(status, take(pilot, mine), (Event(EventType.NORMAL, Reason.SERVICE_TAKEN, message),))
    if (
        mine is not None
        and mine.phase is TakeoverPhase.RESTORED
        and all(scope.state is ScopeState.ROLLED_BACK for scope in scopes)
    ):
        return TakeoverTick(mine)  # restored when every scope was aborted: a resume takes it again
    why = _waiting(wanted.service, service, routers_ready)
    if why is not None:
        status = TakeoverStatus(service=wanted.service, phase=TakeoverPhase.WAITING, at=now, message=why)
        if mine is not None and mine.phase is TakeoverPhase.WAITING and mine.message == why:
            return TakeoverTick(mine)
        return TakeoverTick(status, None, (Event(EventType.NORMAL, Reason.SERVICE_WAITING, why),))
    assert service is not None
    spec = service.get("spec") or {}
    recorded = TakeoverStatus(
        service=wanted.service,
        phase=TakeoverPhase.RECORDED,
        selector=dict(spec.get("selector") or {}),
        ports=[dict(port) for port in spec.get("ports") or []],
        at=now,
        message=f"Service {wanted.service}'s selector and ports are recorded; it is re-pointed at the routers next",
    )
    return TakeoverTick(recorded)


def _waiting(name: str, service: Mapping[str, Any] | None, routers_ready: bool) -> str | None:
    if service is None:
        return f"no Service {name} in the pilot's namespace to take over"
    if not (service.get("spec") or {}).get("selector"):
        return f"Service {name} has no selector (its endpoints are managed by hand): it cannot be re-pointed"
    if not routers_ready:
        return f"Service {name} is taken over once the routers are ready"
    return None
