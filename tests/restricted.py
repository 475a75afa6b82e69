"""The restricted Pod Security Standard as the API server's admission checks it, for tests of rendered pods:
the project's own refusals (`api.podsecurity`) and what restricted asks of every container besides."""

from __future__ import annotations

from typing import Any

from specpilot.api.podsecurity import pod_refusals


def restricted(pod: dict[str, Any]) -> list[str]:
    """What in a pod spec the restricted Pod Security Standard refuses (a read-only root is no part of it)."""
    found = [f"{where}: {why}" for where, why in pod_refusals(pod, "spec")]
    context = pod.get("securityContext", {})
    for c in [*pod.get("initContainers", []), *pod["containers"]]:
        own = c.get("securityContext", {})
        if own.get("runAsNonRoot", context.get("runAsNonRoot")) is not True:
            found.append(f"{c['name']}: runAsNonRoot")
        if own.get("seccompProfile", context.get("seccompProfile", {})).get("type") not in (
            "RuntimeDefault",
            "Localhost",
        ):
            found.append(f"{c['name']}: seccompProfile")
        if own.get("allowPrivilegeEscalation") is not False:
            found.append(f"{c['name']}: allowPrivilegeEscalation")
        if "ALL" not in own.get("capabilities", {}).get("drop", []):
            found.append(f"{c['name']}: capabilities.drop")
    return found
