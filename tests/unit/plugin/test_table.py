"""`kubectl specpilot get`'s table from pilot objects."""

from __future__ import annotations

from specpilot.plugin.table import render


def test_one_row_per_scope_with_state_weight_window_and_decision() -> None:
    pilot = {
        "metadata": {"name": "demo", "namespace": "team-a"},
        "spec": {"scopes": [{"name": "chat"}, {"name": "code"}, {"name": "new"}]},
        "status": {
            "phase": "Healthy",
            "decision": {"outcome": "AdoptInLowLoadWindows"},
            "scopes": [
                {
                    "name": "chat",
                    "state": "Speculative",
                    "stage": 1,
                    "weight": 50,
                    "lastWindow": {"ratio": 0.612, "offeredLoad": 4.127, "verdict": "Pass", "reason": ""},
                    "decision": {"outcome": "AdoptInLowLoadWindows", "crossoverLoad": 6.34},
                },
                {
                    "name": "code",
                    "state": "RolledBack",
                    "weight": 0,
                    "lastWindow": {"ratio": 1.31, "verdict": "Fail", "reason": "slower"},
                    "decision": {"outcome": "Defer", "deferReason": "NoNetGain"},
                },
            ],
        },
    }
    lines = render([pilot]).splitlines()
    assert lines[0] == "team-a/demo  phase Healthy  decision AdoptInLowLoadWindows"
    assert lines[1].split() == ["SCOPE", "STATE", "STAGE", "WEIGHT", "RATIO", "LOAD", "VERDICT", "DECISION", "WHY"]
    chat = ["chat", "Speculative", "2", "50%", "0.61", "4.13", "Pass", "AdoptInLowLoadWindows(<6.3)", "-"]
    assert lines[2].split() == chat
    assert lines[3].split() == ["code", "RolledBack", "-", "0%", "1.31", "-", "Fail", "Defer(NoNetGain)", "slower"]
    assert lines[4].split() == ["new", "-", "-", "0%", "-", "-", "-", "-", "-"]
