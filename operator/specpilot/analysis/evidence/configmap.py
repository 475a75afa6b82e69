"""The store as its ConfigMap holds it: compact JSON within the ConfigMap's budget (coarser TTFT counts
where it would outgrow it), and back."""

from __future__ import annotations

from specpilot.analysis.evidence.store import BinArm, Evidence
from specpilot.wire.buckets import coarse_key

STORE_BUDGET = 768 * 1024  # bytes of JSON: a ConfigMap holds at most 1 MiB, metadata included


MAX_TTFT_WIDTH = 8  # three TTFT buckets to the octave, each 26% wide


def coarsened(evidence: Evidence) -> Evidence:
    """The store with every TTFT count merged into keys twice as wide; nothing else changes."""

    def merged(cell: BinArm) -> BinArm:
        counts: dict[int, int] = {}
        for index, count in cell.ttft.items():
            key = coarse_key(index, 2 * evidence.ttft_width)
            counts[key] = counts.get(key, 0) + count
        return cell.model_copy(update={"ttft": counts})

    scopes = {
        name: scope.model_copy(
            update={"bins": {arm: {i: merged(c) for i, c in cells.items()} for arm, cells in scope.bins.items()}}
        )
        for name, scope in evidence.scopes.items()
    }
    return evidence.model_copy(update={"scopes": scopes, "ttft_width": 2 * evidence.ttft_width})


def fit(evidence: Evidence, budget: int = STORE_BUDGET) -> Evidence:
    """The store within `budget` bytes of JSON where coarser TTFT counts bring it there: many scopes over
    a wide range of loads, each bin counting a wide spread of TTFTs, would outgrow a ConfigMap."""
    while evidence.ttft_width < MAX_TTFT_WIDTH and len(dump(evidence)) > budget:
        evidence = coarsened(evidence)
    return evidence


def dump(evidence: Evidence) -> str:
    """The store as the ConfigMap holds it: compact JSON, keys in a stable order."""
    return evidence.model_dump_json(by_alias=True, exclude_defaults=False)


def load(text: str) -> Evidence:
    """The store from its ConfigMap text; raises `ValueError` naming what is wrong."""
    return Evidence.model_validate_json(text)
