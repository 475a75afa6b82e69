"""report.md's section on a schedule the pilot ran: its switch, and the plot that sets the scheduled arm
beside the compared arm and the followed pilot's plain speculation at the same offered load."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specpilot.api.pilot import FOLLOWS_ANNOTATION

Json = dict[str, Any]
SCHEDULE_PLOT_PREFIX = "schedule-"


def _followed(report: Json) -> str:
    """Where plain speculation's figures come from, or why the plot has none."""
    followed = report["followed"]
    if followed is None:
        return (
            f"The pilot follows no pilot (no `{FOLLOWS_ANNOTATION}` annotation): the plots show no plain speculation."
        )
    if not followed["found"]:
        return (
            f"It follows {followed['name']}, which is no longer in the namespace: the plots show no plain speculation."
        )
    reason = f": {followed['reason']}" if followed["reason"] else ""
    return (
        f"Plain speculation's figures come from {followed['name']}'s windows (a different run, same engines and "
        f"stages, not the same windows); {followed['name']} decided {followed['outcome']}{reason}"
    )


def piloted_schedule(report: Json, plots: Sequence[str]) -> list[str]:
    """The schedule the pilot's speculative arm ran, where it lies on the load axis per scope, and the plots;
    nothing for a pilot whose draft carries no schedule."""
    switch = report.get("switch")
    if switch is None:
        return []
    compared = report["compared"]["name"]
    lines = [
        "## The piloted schedule",
        "",
        f"The speculative arm ran `{switch['schedule']}`: it drafts up to a batch of {switch['batch']} and decodes "
        "ordinarily above. Each plot compares time per committed token against offered load per replica for "
        f"{compared} and the scheduled speculative arm of this pilot, and plain speculation of the pilot it follows; "
        f"the dotted line is the switch, where the scheduled arm held {switch['batch']} requests in flight per "
        "replica (interpolated between its bands' in-flight figures; at its highest band where it never held "
        "that many, at its lowest where that one already held more).",
        "",
        _followed(report),
        "",
    ]
    shown = [name for name in plots if name.startswith(SCHEDULE_PLOT_PREFIX)]
    return [*lines, *(f"![{name}](plots/{name})" for name in shown), ""]
