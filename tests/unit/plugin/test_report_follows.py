"""`kubectl specpilot report` of a follow-up pilot reads the pilot it follows, while that one is still in
the namespace (against a fake of the plugin's client holding pilots and their evidence)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from specpilot.analysis.evidence import Evidence
from specpilot.api.pilot import FOLLOWS_ANNOTATION
from specpilot.plugin.client import PluginError
from specpilot.plugin.kubectl import main
from tests.unit.report.evidence import pilot

ROOT = Path(__file__).resolve().parents[3]
ALPHAS = {"low": 0.5}

Json = dict[str, Any]


class FakeClient:
    """The calls `report` makes: pilots by name, the namespace's list, and their evidence stores."""

    def __init__(self, pilots: dict[str, tuple[Json, Evidence]]) -> None:
        self.namespace = "team-a"
        self.stored = pilots
        self.evidence_read: list[str] = []

    def pilot(self, name: str) -> Json:
        if name not in self.stored:
            raise PluginError(f"speculationpilot {name!r} not found in namespace 'team-a'")
        return copy.deepcopy(self.stored[name][0])

    def pilots(self) -> list[Json]:
        return [copy.deepcopy(doc) for doc, _ in self.stored.values()]

    def evidence(self, name: str) -> Evidence | None:
        self.evidence_read.append(name)
        return self.stored[name][1]


def manifest(name: str, *, follows: str | None = None) -> Json:
    doc: Json = yaml.safe_load((ROOT / "manifests/demo/pilot.yaml").read_text())
    doc["metadata"] |= {"name": name, "namespace": "team-a"}
    doc["spec"]["scopes"] = [{"name": scope, "stages": [{"weight": 50, "minRequests": 10}]} for scope in ALPHAS]
    if follows is not None:
        doc["metadata"]["annotations"] = {FOLLOWS_ANNOTATION: follows}
        doc["spec"]["speculative"]["draft"]["schedule"] = [
            {"start": 1, "end": 3, "numSpeculativeTokens": 2},
            {"start": 4, "end": 4, "numSpeculativeTokens": 0},
        ]
    return doc


@pytest.fixture(scope="module")
def evidence() -> Evidence:
    return pilot(ALPHAS, per_load=2)


@pytest.mark.parametrize("present", [True, False], ids=["followed-present", "followed-gone"])
def test_the_report_of_a_follow_up_reads_the_pilot_it_follows_while_it_is_there(
    tmp_path: Path, evidence: Evidence, present: bool
) -> None:
    pilots = {"demo-follow-up": (manifest("demo-follow-up", follows="demo"), evidence)}
    if present:
        pilots["demo"] = (manifest("demo"), evidence)
    fake = FakeClient(pilots)
    folder = tmp_path / "out"
    code = main(["report", "demo-follow-up", "-n", "team-a", "-o", str(folder)], connect_to=lambda **_: fake)
    assert code == 0
    followed = json.loads((folder / "report.json").read_text())["followed"]
    assert (followed["name"], followed["found"], bool(followed["bands"].get("low"))) == ("demo", present, present)
    assert fake.evidence_read == (["demo-follow-up", "demo"] if present else ["demo-follow-up"])
    assert (folder / "plots" / "schedule-low.png").exists()
