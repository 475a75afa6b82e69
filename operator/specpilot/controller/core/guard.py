"""The production guard: whether production's baseline is saturated, with hysteresis over windows.

Each analysis window reads production's baseline once (`production_saturation`: saturated, with its
sentence, or headroom). The guard holds a state, ProductionSaturated or not, and changes it only after
spec.baseline.saturation.enterAfter saturated windows in a row (to enter) or leaveAfter windows with
headroom in a row (to leave); a window that reads the way the state already is resets the count. So a
baseline at the edge, saturated one window and not the next, leaves the condition as it is instead of
toggling it (and a Warning Event with it) every window, as Argo Rollouts' consecutiveErrorLimit and the
HorizontalPodAutoscaler's stabilization window do. A reading counts once per window: a tick sooner than
the analysis interval (a rehearsal step) reads no new window.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from specpilot.api.spec import Saturation
from specpilot.api.status import ProductionGuard

# Reconciles land a little after the interval: a window read at 0.9 intervals or more is a new one.
_NEW_WINDOW = 0.9


@dataclass(frozen=True)
class Reading:
    """One window of production's baseline: why it was saturated, or None for headroom."""

    end: datetime
    saturated: str | None


def guard_production(
    previous: ProductionGuard | None, reading: Reading | None, *, policy: Saturation, interval: timedelta
) -> ProductionGuard | None:
    """The guard after `reading` (None: no window was read, the guard stays as it was)."""
    if reading is None:
        return previous
    guard = previous if previous is not None else ProductionGuard()
    if guard.read_at is not None and reading.end - guard.read_at < interval * _NEW_WINDOW:
        return guard
    against = (reading.saturated is not None) != guard.saturated
    streak = guard.streak + 1 if against else 0
    limit = policy.leave_after if guard.saturated else policy.enter_after
    flips = against and streak >= limit
    return ProductionGuard(
        saturated=guard.saturated != flips,
        streak=0 if flips else streak,
        read_at=reading.end,
        reason=reading.saturated if reading.saturated is not None else guard.reason,
    )


def saturation_message(guard: ProductionGuard | None, policy: Saturation) -> str | None:
    """Why production counts as saturated, or None when it has headroom (the guard's state, not the last
    window's), with how far the last windows went the other way."""
    if guard is None:
        return None
    if guard.saturated:
        pending = f" ({guard.streak} of {policy.leave_after} windows with headroom so far)" if guard.streak else ""
        return f"{guard.reason}{pending}"
    return None


def headroom_message(guard: ProductionGuard | None, policy: Saturation) -> str:
    """The ProductionSaturated condition's message while production has headroom."""
    if guard is not None and guard.streak:
        return (
            f"production's baseline has headroom; {guard.streak} of {policy.enter_after} windows in a row "
            f"saturated so far ({guard.reason})"
        )
    return "production's baseline has headroom"
