"""What a scheduled pilot's report sets its bands beside: the pilot it follows (`kubectl specpilot
follow-up` names it in the FOLLOWS_ANNOTATION), whose speculative arm ran the same draft without the
schedule, and where the schedule's switch lies on the load axis.

The switch is a batch, the axis an offered load: the switch's load is where this pilot's speculative
arm held the switch's batch in flight per replica, interpolated between its bands' in-flight figures,
never extrapolated past them. Pure: report.json's numbers, from which markdown and plots draw.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from specpilot.analysis.decision import ScopeFindings
from specpilot.analysis.evidence import Evidence
from specpilot.analysis.replay import rounded
from specpilot.analysis.scheduled import ScheduledArm
from specpilot.api.pilot import FOLLOWS_ANNOTATION
from specpilot.wire.names import Arm

Json = dict[str, Any]
PLAIN_BAND_FIELDS = ("load", "timePerCommittedTokenSeconds", "timePerCommittedTokenStandardError")


@dataclass(frozen=True)
class FollowedPilot:
    """The followed pilot as the API server returned it, and its evidence store."""

    pilot: Mapping[str, Any]
    evidence: Evidence


def first_sentence(text: str) -> str:
    head, dot, _ = " ".join(text.split()).partition(". ")
    return head + "." if dot else head


def follows(pilot: Mapping[str, Any]) -> str | None:
    """The name of the pilot `pilot` follows, from its annotation; None where it follows none."""
    return (pilot.get("metadata", {}).get("annotations") or {}).get(FOLLOWS_ANNOTATION)


def followed_json(name: str | None, report: Json | None) -> Json | None:
    """report.json's `followed`: the followed pilot's name, decision (outcome and first sentence) and its
    speculative arm's bands per scope, as its own report gives them (`report`, None where it is gone).
    None where the pilot follows none."""
    if name is None:
        return None
    if report is None:
        return {"name": name, "found": False, "outcome": None, "reason": None, "bands": {}}
    decision = report["decision"]
    reasons = decision.get("reasons") or []
    return {
        "name": name,
        "found": True,
        "outcome": decision["outcome"],
        "reason": first_sentence(reasons[0]) if reasons else None,
        "bands": {
            scope["name"]: [{key: b[key] for key in PLAIN_BAND_FIELDS} for b in scope["bands"]["speculative"]]
            for scope in report["scopes"]
        },
    }


def switch_load(bands: Iterable[tuple[float, float | None]], switch: int) -> Json | None:
    """Where a speculative arm held `switch` requests in flight per replica, from its bands' (load, in
    flight) figures: interpolated between the last band below and the first at or above it; at the lowest
    band where that one already held more (`belowLowest`); at the highest where none reached it
    (`notReached`). None without an in-flight figure."""
    points = sorted((load, in_flight) for load, in_flight in bands if in_flight is not None)
    if not points:
        return None
    if points[0][1] >= switch:
        return {"load": rounded(points[0][0], 3), "where": "belowLowest"}
    for (low, below), (high, above) in pairwise(points):
        if above >= switch:
            load = low + (high - low) * (switch - below) / (above - below)
            return {"load": rounded(load, 3), "where": "interpolated"}
    return {"load": rounded(points[-1][0], 3), "where": "notReached"}


def switch_json(scheduled: ScheduledArm | None, findings: Sequence[ScopeFindings]) -> Json | None:
    """report.json's `switch`: the schedule, its switch batch and, per scope, the load it lies at; None
    for a pilot whose draft carries no schedule."""
    if scheduled is None:
        return None
    return {
        "batch": scheduled.switch,
        "schedule": scheduled.schedule,
        "scopes": {
            f.scope: switch_load(((b.load, b.in_flight) for b in f.bands.get(Arm.SPECULATIVE, ())), scheduled.switch)
            for f in findings
        },
    }
