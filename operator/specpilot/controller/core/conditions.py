"""The status's conditions: set one (its lastTransitionTime moves only when its status changes), read one,
and the Events their transitions call for, so that a restarted operator that reads its status back emits
none twice. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from specpilot.analysis.rollout import Event, EventType
from specpilot.api.reasons import Reason
from specpilot.api.status import Condition, ConditionStatus, ConditionType, SpeculationPilotStatus


def whole_second(now: datetime) -> datetime:
    return now.replace(microsecond=0)  # metav1.Time has second precision


def set_condition(
    conditions: Sequence[Condition],
    *,
    type: ConditionType,
    status: ConditionStatus,
    reason: Reason,
    message: str,
    generation: int,
    now: datetime,
) -> list[Condition]:
    """`conditions` with `type` set; its lastTransitionTime moves only when its status changes."""
    old = next((c for c in conditions if c.type == type), None)
    moved = old is None or old.status != status
    new = Condition(
        type=type,
        status=status,
        observed_generation=generation,
        last_transition_time=whole_second(now) if moved or old is None else old.last_transition_time,
        reason=reason,
        message=message[:32768],
    )
    return (
        [*(c for c in conditions if c.type != type), new]
        if old is None
        else [new if c.type == type else c for c in conditions]
    )


def set_all(
    conditions: Sequence[Condition],
    updates: Sequence[tuple[ConditionType, bool, Reason, str]],
    *,
    generation: int,
    now: datetime,
) -> list[Condition]:
    """`conditions` with each (type, holds, reason, message) of `updates` set."""
    out = list(conditions)
    for type_, holds, reason, message in updates:
        status = ConditionStatus.TRUE if holds else ConditionStatus.FALSE
        out = set_condition(
            out, type=type_, status=status, reason=reason, message=message, generation=generation, now=now
        )
    return out


def condition(status: SpeculationPilotStatus | None, type: ConditionType) -> Condition | None:
    return next((c for c in status.conditions if c.type == type), None) if status is not None else None


# Condition transitions worth an Event, and the Event's type when the condition turns True / False.
_WATCHED: tuple[tuple[ConditionType, EventType | None, EventType | None], ...] = (
    (ConditionType.INVALID_SPEC, EventType.WARNING, EventType.NORMAL),
    (ConditionType.DEGRADED, EventType.WARNING, None),
    (ConditionType.READY, EventType.NORMAL, EventType.NORMAL),  # unready for a bad reason: Degraded warns
    (ConditionType.SUSPENDED, EventType.NORMAL, EventType.NORMAL),
    (ConditionType.PRODUCTION_SATURATED, EventType.WARNING, EventType.NORMAL),
    (ConditionType.SPEED_ONLY, EventType.WARNING, EventType.NORMAL),
)


def transition_events(previous: SpeculationPilotStatus | None, status: SpeculationPilotStatus) -> list[Event]:
    """One Event per watched condition whose status changed (a first False is no transition)."""
    events = []
    for type_, on_true, on_false in _WATCHED:
        old, new = condition(previous, type_), condition(status, type_)
        if new is None or (old is not None and old.status == new.status):
            continue
        if type_ is not ConditionType.INVALID_SPEC and new.reason == Reason.SPEC_INVALID:
            continue  # the InvalidSpec Event says it
        kind = on_true if new.status is ConditionStatus.TRUE else (on_false if old is not None else None)
        if kind is not None:
            events.append(Event(kind, Reason(new.reason), new.message))
    return events
