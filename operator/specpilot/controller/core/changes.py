"""Which rendered objects a tick applies: what is missing, changed or drifted, and the routing table
once per refresh (so that a router never finds it stale). Pure: the shell applies what this returns.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from specpilot.analysis.rollout import Event, EventType
from specpilot.api.reasons import Reason
from specpilot.controller.core.objects import content_hash
from specpilot.controller.core.observe import MANAGED_FIELDS, drifted
from specpilot.controller.core.render import Rendered
from specpilot.controller.core.snapshot import Key, Observation, Written
from specpilot.wire.routes import RoutingTable

Json = dict[str, Any]


@dataclass(frozen=True)
class Apply:
    """One object to server-side apply. The routing table's ConfigMap carries its `table` and is
    written by the routing table's owner; every other change is dry-run first (`dry_run`), so that an
    object the server refuses leaves everything as it was."""

    obj: Json
    digest: str
    dry_run: bool = False
    table: RoutingTable | None = None

    @property
    def key(self) -> Key:
        return (self.obj["kind"], self.obj["metadata"]["name"])


def changes(
    rendered: Rendered,
    seen: Observation,
    written: Written,
    *,
    table: RoutingTable,
    routes_hash: str,
    now: datetime,
    refresh: timedelta,
) -> tuple[tuple[Apply, ...], list[Event]]:
    """The objects to apply, in render order, and an Event for each one put back after someone
    edited or deleted it."""
    out: list[Apply] = []
    events: list[Event] = []
    for obj in rendered.objects:
        kind, name = obj["kind"], obj["metadata"]["name"]
        digest, child, record = content_hash(obj), seen.children.get((kind, name)), written.applied.get((kind, name))
        unchanged = record is not None and record.digest == digest
        if obj is rendered.routes:
            last = written.routes
            if child is None or last is None or last[0] != routes_hash or now - last[1] >= refresh:
                out.append(Apply(obj, digest, table=table))
                restoring = child is None and last is not None
            else:
                continue
        elif child is None:
            out.append(Apply(obj, digest, dry_run=not _binds_absent_role(obj, seen)))
            restoring = unchanged
        elif kind == "Deployment":
            edited = record is not None and child.generation > record.generation
            if unchanged and not edited:
                continue
            out.append(Apply(obj, digest, dry_run=True))
            restoring = unchanged and edited
        else:
            desired = {f: obj.get(f) for f in MANAGED_FIELDS[kind]} | {"labels": obj["metadata"]["labels"]}
            if not drifted(desired, child.managed):
                continue
            out.append(Apply(obj, digest, dry_run=True))
            restoring = unchanged
        if restoring:
            events.append(
                Event(EventType.WARNING, Reason.CHILD_RESTORED, f"{kind} {name} was edited or deleted; put back")
            )
    return tuple(out), events


def _binds_absent_role(obj: Json, seen: Observation) -> bool:
    """A RoleBinding to a Role that does not exist yet, which a dry run cannot admit: without the
    `bind` verb, the API server admits a binding only once it can check that the operator holds
    every permission of the Role, and a dry-run Role is never there to check. Its real apply comes
    after the Role's (render order)."""
    if obj["kind"] != "RoleBinding":
        return False
    ref = obj["roleRef"]
    return ref["kind"] == "Role" and ("Role", ref["name"]) not in seen.children
