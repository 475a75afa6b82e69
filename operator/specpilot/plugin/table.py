"""`kubectl specpilot get`'s table: one row per scope, under one line per pilot. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Json = dict[str, Any]
# RATIO and LOAD: the last window's time per committed token, speculative over ordinary, and the load (requests
# per second per replica) its evidence is filed at
COLUMNS = ("SCOPE", "STATE", "STAGE", "WEIGHT", "RATIO", "LOAD", "VERDICT", "DECISION", "WHY")


def _cell(value: Any, spec: str = "") -> str:
    return "-" if value is None or value == "" else format(value, spec)


def _row(scope: Json) -> tuple[str, ...]:
    window = scope.get("lastWindow") or {}
    decision = scope.get("decision") or {}
    outcome = decision.get("outcome")
    if outcome and decision.get("deferReason"):
        outcome = f"{outcome}({decision['deferReason']})"
    if outcome and decision.get("crossoverLoad") is not None:
        outcome = f"{outcome}(<{decision['crossoverLoad']:.1f})"
    stage = scope.get("stage")
    return (
        scope["name"],
        _cell(scope.get("state")),
        _cell(stage + 1 if stage is not None else None),
        f"{scope.get('weight', 0)}%",
        _cell(window.get("ratio"), ".2f"),
        _cell(window.get("offeredLoad"), ".2f"),
        _cell(window.get("verdict")),
        _cell(outcome),
        _cell(window.get("reason"))[:60],
    )


def render(pilots: Sequence[Json]) -> str:
    """The table for these pilots (as the API server returns them)."""
    blocks = []
    for pilot in pilots:
        status = pilot.get("status") or {}
        decision = status.get("decision") or {}
        meta = pilot["metadata"]
        head = f"{meta.get('namespace', '')}/{meta['name']}  phase {status.get('phase') or '-'}"
        head += f"  decision {decision.get('outcome') or 'not stated'}"
        names = [s["name"] for s in pilot["spec"].get("scopes", [])]
        by_name = {s["name"]: s for s in status.get("scopes", [])}
        rows = [COLUMNS, *(_row(by_name.get(name, {"name": name})) for name in names)]
        widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
        lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
        blocks.append("\n".join([head, *lines]))
    return "\n\n".join(blocks)


LIST_COLUMNS = ("NAMESPACE", "NAME", "PHASE", "SPECULATIVE", "DECISION", "LAST FALLBACK")


def render_list(pilots: Sequence[Json]) -> str:
    """One line per pilot, as `kubectl get` lays out a list."""
    rows = [LIST_COLUMNS]
    for pilot in pilots:
        status = pilot.get("status") or {}
        decision = status.get("decision") or {}
        fallbacks = status.get("fallbacks") or []
        last = f"{fallbacks[-1]['scope']}: {fallbacks[-1]['reason']}" if fallbacks else None
        rows.append(
            (
                pilot["metadata"].get("namespace", ""),
                pilot["metadata"]["name"],
                _cell(status.get("phase")),
                _cell(status.get("speculativeScopes")),
                _cell(decision.get("outcome")),
                _cell(last),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(LIST_COLUMNS))]
    return "\n".join("   ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows)
