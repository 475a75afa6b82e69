"""The production guard's hysteresis: windows read one by one, the state changing only after a run."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from specpilot.api.spec import Saturation
from specpilot.api.status import ProductionGuard
from specpilot.controller.core.guard import Reading, guard_production, headroom_message, saturation_message

START = datetime(2026, 1, 1, tzinfo=UTC)
INTERVAL = timedelta(minutes=1)
SATURATED = "production's baseline had 1.0 requests waiting per replica over the last window"


def run(pattern: str, policy: Saturation) -> list[bool]:
    """The guard's state after each window of `pattern` (S: saturated, H: headroom)."""
    guard: ProductionGuard | None = None
    states = []
    for i, mark in enumerate(pattern):
        reading = Reading(START + i * INTERVAL, SATURATED if mark == "S" else None)
        guard = guard_production(guard, reading, policy=policy, interval=INTERVAL)
        assert guard is not None
        states.append(guard.saturated)
    return states


def changes(states: list[bool]) -> int:
    return sum(1 for before, after in zip([False, *states], states, strict=False) if before != after)


def test_a_baseline_at_the_edge_toggled_every_window_without_hysteresis_and_no_longer_does() -> None:
    edge = "SH" * 25  # fifty windows, saturated every other one
    assert changes(run(edge, Saturation(enter_after=1, leave_after=1))) == 50, "the guard as it was"
    assert changes(run(edge, Saturation())) == 0


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("SHSHSHHSHSHS", "............"),  # never two saturated in a row: never enters
        ("SSHHSHHHH", ".XXXXXX.."),  # enters on the second; a lone saturated window resets the count to leave
        ("SSSHHH", ".XXXX."),
        ("SSHSSHSSH", ".XXXXXXXX"),  # at the edge, but saturated more often than not: stays saturated
        ("HHHH", "...."),
    ],
    ids=["alternating", "reset-by-one", "enter-and-leave", "mostly-saturated", "headroom"],
)
def test_state_changes_after_enter_after_saturated_or_leave_after_headroom_windows_in_a_row(
    pattern: str, expected: str
) -> None:
    states = run(pattern, Saturation(enter_after=2, leave_after=3))
    assert "".join("X" if s else "." for s in states) == expected


def test_a_tick_within_the_interval_reads_no_new_window() -> None:
    policy = Saturation(enter_after=2, leave_after=3)
    first = guard_production(None, Reading(START, SATURATED), policy=policy, interval=INTERVAL)
    soon = guard_production(first, Reading(START + INTERVAL / 3, SATURATED), policy=policy, interval=INTERVAL)
    assert soon == first and soon is not None and not soon.saturated and soon.streak == 1
    later = guard_production(soon, Reading(START + INTERVAL, SATURATED), policy=policy, interval=INTERVAL)
    assert later is not None and later.saturated and later.streak == 0


def test_no_reading_keeps_the_guard_as_it_was() -> None:
    policy = Saturation()
    held = ProductionGuard(saturated=True, streak=1, read_at=START, reason=SATURATED)
    assert guard_production(held, None, policy=policy, interval=INTERVAL) is held
    assert guard_production(None, None, policy=policy, interval=INTERVAL) is None


def test_messages_say_the_state_and_how_far_the_windows_went_the_other_way() -> None:
    policy = Saturation(enter_after=2, leave_after=3)
    assert saturation_message(None, policy) is None
    assert headroom_message(None, policy) == "production's baseline has headroom"
    pending = ProductionGuard(saturated=False, streak=1, read_at=START, reason=SATURATED)
    assert saturation_message(pending, policy) is None
    assert "1 of 2 windows in a row saturated so far" in headroom_message(pending, policy)
    leaving = ProductionGuard(saturated=True, streak=2, read_at=START, reason=SATURATED)
    assert saturation_message(leaving, policy) == f"{SATURATED} (2 of 3 windows with headroom so far)"
