"""Ready endpoints of each arm, read from EndpointSlice objects (plain dicts from the API)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from specpilot.router.core.choice import Endpoint
from specpilot.wire.names import SERVICE_NAME_LABEL, Arm, arm_of_service

PORT_NAME = "http"


def slice_port(eps: Mapping[str, Any]) -> int | None:
    """The slice's port named ``http``, or its only port when it has exactly one."""
    ports = [p for p in eps.get("ports") or () if isinstance(p, Mapping) and isinstance(p.get("port"), int)]
    named = [p["port"] for p in ports if p.get("name") == PORT_NAME]
    if named:
        return int(named[0])
    return int(ports[0]["port"]) if len(ports) == 1 else None


def ready_endpoints(pilot: str, slices: Iterable[Mapping[str, Any]]) -> dict[Arm, tuple[Endpoint, ...]]:
    """Endpoints whose ``conditions.ready`` is true, per arm, sorted and without duplicates."""
    found: dict[Arm, set[Endpoint]] = {arm: set() for arm in Arm}
    for eps in slices:
        labels = (eps.get("metadata") or {}).get("labels") or {}
        arm = arm_of_service(pilot, str(labels.get(SERVICE_NAME_LABEL, "")))
        port = slice_port(eps)
        if arm is None or port is None or eps.get("addressType") not in {"IPv4", "IPv6"}:
            continue
        for endpoint in eps.get("endpoints") or ():
            if (endpoint.get("conditions") or {}).get("ready") is not True:
                continue
            found[arm].update(Endpoint(str(address), port) for address in endpoint.get("addresses") or ())
    return {arm: tuple(sorted(eps, key=lambda e: (e.host, e.port))) for arm, eps in found.items()}
