"""The health of a pilot's arms and router, from their Deployments and pods as the cluster shows them: what
keeps the pilot from Ready, the worst first, and its phase. Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from specpilot.api.reasons import Reason
from specpilot.api.status import Phase
from specpilot.controller.core.arm_objects import ArmPlan
from specpilot.controller.core.observe import DeploymentState, PodTrouble
from specpilot.wire.names import ROUTER_COMPONENT

_IMAGE_REASONS = frozenset({"ImageNotRunnable", "ErrImagePull", "ImagePullBackOff", "InvalidImageName"})


@dataclass(frozen=True, kw_only=True)
class Observed:
    """The pilot's children as the cluster shows them."""

    deployments: Mapping[str, DeploymentState]
    troubles: Sequence[PodTrouble] = ()


@dataclass(frozen=True)
class Health:
    ready: bool
    fatal: bool
    reason: Reason
    message: str


def _component_health(
    label: str, state: DeploymentState | None, replicas: int, troubles: Sequence[PodTrouble], *, router: bool
) -> Health:
    progressing = Reason.ROUTER_PROGRESSING if router else Reason.ARMS_PROGRESSING
    unavailable = Reason.ROUTER_UNAVAILABLE if router else Reason.ARM_UNAVAILABLE
    fatal = [t for t in troubles if t.fatal]
    if fatal:
        hint = _hint(fatal[0], router=router)
        return Health(False, True, unavailable, f"{label}: {fatal[0].describe()}{hint}")
    if state is None:
        return Health(False, False, progressing, f"{label}: Deployment not observed yet")
    if state.deadline_exceeded:
        return Health(False, True, unavailable, f"{label}: rollout missed its progress deadline")
    if state.rolled_out:
        return Health(True, False, Reason.ARMS_AVAILABLE, f"{label} {state.ready}/{replicas} ready")
    waiting = "; ".join(t.describe() for t in troubles[:2])
    detail = f" ({waiting})" if waiting else ""
    return Health(False, False, progressing, f"{label} {state.ready}/{replicas} ready, {state.updated} updated{detail}")


def _hint(trouble: PodTrouble, *, router: bool) -> str:
    if router:
        return "; check the operator's --router-image"
    if trouble.reason in _IMAGE_REASONS:
        return "; fix spec.engine.image (the nodes cannot run it)"
    return "; check spec.engine.command, spec.engine.extraArgs and the container's log"


def health_of(
    arms: Sequence[ArmPlan], router_replicas: int, router_deployment: str, observed: Observed
) -> tuple[list[Health], Health]:
    def troubles(component: str) -> list[PodTrouble]:
        return [t for t in observed.troubles if t.component == component]

    arm_health = [
        _component_health(
            f"arm {plan.arm.value}",
            observed.deployments.get(plan.name),
            plan.replicas,
            troubles(plan.arm.value),
            router=False,
        )
        for plan in arms
    ]
    router = _component_health(
        "router",
        observed.deployments.get(router_deployment),
        router_replicas,
        troubles(ROUTER_COMPONENT),
        router=True,
    )
    return arm_health, router


@dataclass(frozen=True)
class PilotHealth:
    """The health of the arms and the router, and whether every scope has settled."""

    arms: Sequence[Health]
    router: Health
    settled: bool

    @property
    def arms_ready(self) -> bool:
        return all(h.ready for h in self.arms)

    @property
    def ready(self) -> bool:
        return self.arms_ready and self.router.ready

    @property
    def fatal(self) -> list[Health]:
        return [h for h in [*self.arms, self.router] if h.fatal]

    @property
    def blocking(self) -> list[Health]:
        """What keeps the pilot from Ready, the worst first."""
        not_ready = [h for h in self.arms if not h.ready]
        return self.fatal or not_ready or ([] if self.router.ready else [self.router])

    def phase(self, *, suspended: bool) -> Phase:
        if self.fatal:
            return Phase.DEGRADED
        if suspended:
            return Phase.SUSPENDED
        return Phase.HEALTHY if self.ready and self.settled else Phase.PROGRESSING
