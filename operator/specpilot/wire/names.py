"""Names and labels of the objects a pilot owns, and the ports its pods listen on.

Every object a pilot owns is named after it (`<pilot>-baseline`, `<pilot>-routes`, ...) and carries
`specpilot.io/pilot=<pilot>`; engine pods also carry `specpilot.io/arm=<arm>`. The operator renders
these names, the router finds its arms and table by them, and tests and tools select by them.
"""

from __future__ import annotations

from enum import StrEnum

GROUP = "specpilot.io"
PILOT_LABEL = f"{GROUP}/pilot"
ARM_LABEL = f"{GROUP}/arm"
CONFIG_HASH_ANNOTATION = f"{GROUP}/config-hash"
COMPONENT_LABEL = "app.kubernetes.io/component"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
PART_OF_LABEL = "app.kubernetes.io/part-of"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"  # set by the EndpointSlice controller
MANAGER = "specpilot"  # value of app.kubernetes.io/managed-by, and the server-side-apply field manager

ENGINE_COMPONENT = "engine"
ROUTER_COMPONENT = "router"
REHEARSAL_ROUTER_COMPONENT = "rehearsal-router"  # the peak rehearsal's own router
REHEARSAL_LOAD_COMPONENT = "rehearsal-load"  # the load generator Job of a rehearsal step
REHEARSAL_RESTART_COMPONENT = "rehearsal-restart"  # a speculative replica restarted as ordinary decoding
CALIBRATION_COMPONENT = "calibration"  # `kubectl specpilot calibrate`'s Job and ConfigMap (no pilot's)

# Key of a calibration ConfigMap that holds the measured step costs (rows of model, batch, q, ctx, ms).
STEPCOST_KEY = "stepcost.json"

# Request header naming a scope explicitly (header names are case-insensitive).
SCOPE_HEADER = "x-specpilot-scope"

ENGINE_PORT = 8000  # `vllm serve --port`
ROUTER_PORT = 8080  # OpenAI-compatible traffic
ROUTER_ADMIN_PORT = 9090  # /metrics, /samples, /routes, /healthz, /readyz


class Arm(StrEnum):
    """A deployment of the shared frozen engine; only the speculative arm adds a draft model.

    The baseline is production's own deployment: it serves whatever the pilot does not take, and is
    watched, not compared. The control arm runs exactly the baseline's engine at the speculative arm's
    size and is sent a copy of every request the speculative arm takes, so the two are compared on the
    same requests at the same load.
    """

    BASELINE = "baseline"
    SPECULATIVE = "speculative"
    CONTROL = "control"
    ALTERNATIVE = "alternative"


# Arms whose engines and requests the operator measures: the compared pair, and production watched.
MEASURED_ARMS = (Arm.BASELINE, Arm.SPECULATIVE, Arm.CONTROL)


def arm_name(pilot: str, arm: Arm) -> str:
    """Name of an arm's Deployment and Service (and the EndpointSlice label value)."""
    return f"{pilot}-{arm.value}"


def arm_of_service(pilot: str, service: str) -> Arm | None:
    """The arm a Service name belongs to, or None if it is not one of the pilot's arms."""
    prefix = f"{pilot}-"
    if not service.startswith(prefix):
        return None
    try:
        return Arm(service[len(prefix) :])
    except ValueError:
        return None


def evidence_name(pilot: str) -> str:
    """Name of the ConfigMap holding the pilot's evidence store (read by `specpilot report`)."""
    return f"{pilot}-evidence"


EVIDENCE_LABEL = f"{GROUP}/evidence-of"  # on the evidence ConfigMap: the pilot (not PILOT_LABEL, which wakes it)
EVIDENCE_KEY = "evidence.json"


def routes_name(pilot: str) -> str:
    """Name of the ConfigMap holding the pilot's routing table."""
    return f"{pilot}-routes"


def router_name(pilot: str) -> str:
    """Name of the router's Deployment, Service, ServiceAccount, Role and RoleBinding."""
    return f"{pilot}-router"


REHEARSAL_SUFFIX = "-rehearsal"  # no pilot's own name ends so (the API refuses it)


def rehearsal_pilot(pilot: str) -> str:
    """The pilot name the rehearsal router runs under: its table is `routes_name` of it and its arms are
    the Services `arm_name` of it, which select the pilot's speculative and control pods. No Service
    of that name selects a production pod, so the rehearsal router cannot reach one."""
    return f"{pilot}{REHEARSAL_SUFFIX}"


def rehearsal_step_name(pilot: str, step: int) -> str:
    """Name of the load generator Job of a rehearsal step."""
    return f"{rehearsal_pilot(pilot)}-{step}"


def rehearsal_restart_name(pilot: str) -> str:
    """Name of the Deployment of the replica the restart fallback brings up as ordinary decoding."""
    return f"{rehearsal_pilot(pilot)}-restart"


def pilot_labels(pilot: str) -> dict[str, str]:
    """Labels every object the pilot owns carries."""
    return {PILOT_LABEL: pilot, MANAGED_BY_LABEL: MANAGER, PART_OF_LABEL: "specpilot"}


def arm_selector(pilot: str, arm: Arm) -> dict[str, str]:
    """Labels that select an arm's engine pods."""
    return {PILOT_LABEL: pilot, ARM_LABEL: arm.value}


def router_selector(pilot: str) -> dict[str, str]:
    """Labels that select the pilot's router pods."""
    return {PILOT_LABEL: pilot, COMPONENT_LABEL: ROUTER_COMPONENT}


def owned_names(pilot: str) -> frozenset[str]:
    """Every Deployment and Service the operator may make for a pilot, which it deletes by name."""
    rehearsal = rehearsal_pilot(pilot)
    return frozenset(
        {
            *(arm_name(pilot, arm) for arm in Arm),
            router_name(pilot),
            router_name(rehearsal),
            rehearsal_restart_name(pilot),
            *(arm_name(rehearsal, arm) for arm in Arm),
        }
    )
