"""A scheduled pilot's report: its bands beside the followed pilot's plain speculation, the switch on the
load axis, and what the report says when there is no followed pilot to compare with."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from specpilot.analysis.evidence import Evidence
from specpilot.api.pilot import FOLLOWS_ANNOTATION
from specpilot.report.build import build
from specpilot.report.followed import PLAIN_BAND_FIELDS, FollowedPilot, switch_load
from specpilot.report.package import write_package
from tests.unit.analysis.crossover import pilot as crossover_pilot
from tests.unit.report.evidence import pilot

ROOT = Path(__file__).resolve().parents[3]
ALPHAS = {"always": 0.95, "low": 0.5}
SWITCH = 3

Json = dict[str, Any]


def plain() -> Json:
    """The demo pilot with one scope per acceptance, drafting at every batch."""
    doc: Json = yaml.safe_load((ROOT / "manifests/demo/pilot.yaml").read_text())
    doc["metadata"]["namespace"] = "team-a"
    stages = [{"weight": 50, "minRequests": 10, "minDuration": "10s"}]
    doc["spec"]["scopes"] = [{"name": name, "stages": stages} for name in ALPHAS]
    return doc


def scheduled(*, follows: str | None = "demo") -> Json:
    """The follow-up: the same pilot with a draft that stops drafting above SWITCH."""
    doc = copy.deepcopy(plain())
    doc["metadata"]["name"] = "demo-follow-up"
    if follows is not None:
        doc["metadata"]["annotations"] = {FOLLOWS_ANNOTATION: follows}
    doc["spec"]["speculative"]["draft"]["schedule"] = [
        {"start": 1, "end": SWITCH, "numSpeculativeTokens": 2},
        {"start": SWITCH + 1, "end": SWITCH + 1, "numSpeculativeTokens": 0},
    ]
    return doc


@pytest.fixture(scope="module")
def plain_evidence() -> Evidence:
    return pilot(ALPHAS, per_load=2)


@pytest.fixture(scope="module")
def scheduled_evidence() -> Evidence:
    return pilot(ALPHAS, per_load=3)


def read(folder: Path) -> tuple[Json, str, list[str]]:
    report = json.loads((folder / "report.json").read_text())
    return report, (folder / "report.md").read_text(), sorted(p.name for p in (folder / "plots").iterdir())


def test_the_followed_pilots_plain_speculation_is_set_beside_the_schedule(
    tmp_path: Path, plain_evidence: Evidence, scheduled_evidence: Evidence
) -> None:
    followed = FollowedPilot(plain(), plain_evidence)
    report, md, plots = read(write_package(scheduled(), scheduled_evidence, tmp_path, followed=followed))
    assert {f"schedule-{name}.png" for name in ALPHAS} <= set(plots)
    own = build(plain(), plain_evidence)
    section = report["followed"]
    assert (section["name"], section["found"], section["outcome"]) == ("demo", True, own["decision"]["outcome"])
    assert own["decision"]["reasons"][0].startswith(section["reason"].rstrip("."))
    for scope in own["scopes"]:
        bands = scope["bands"]["speculative"]
        assert bands
        assert section["bands"][scope["name"]] == [
            {
                "load": b["load"],
                "timePerCommittedTokenSeconds": b["timePerCommittedTokenSeconds"],
                "timePerCommittedTokenStandardError": b["timePerCommittedTokenStandardError"],
            }
            for b in bands
        ]
    # the followed pilot's windows, not this pilot's own
    mine = {
        s["name"]: [{key: b[key] for key in PLAIN_BAND_FIELDS} for b in s["bands"]["speculative"]]
        for s in report["scopes"]
    }
    assert any(section["bands"][name] != mine[name] for name in ALPHAS)
    assert "## The piloted schedule" in md
    assert "come from demo's windows (a different run, same engines and stages, not the same windows)" in md
    assert "![schedule-low.png](plots/schedule-low.png)" in md
    assert md.count("plots/schedule-low.png") == 1  # under the schedule section, not again among the plots


@pytest.mark.parametrize(
    ("follows", "said"),
    [
        pytest.param(None, f"follows no pilot (no `{FOLLOWS_ANNOTATION}` annotation)", id="no-annotation"),
        pytest.param("demo", "It follows demo, which is no longer in the namespace", id="followed-gone"),
    ],
)
def test_without_a_followed_pilot_the_plot_is_drawn_and_the_report_says_why_it_has_no_plain_line(
    tmp_path: Path, scheduled_evidence: Evidence, follows: str | None, said: str
) -> None:
    report, md, plots = read(write_package(scheduled(follows=follows), scheduled_evidence, tmp_path))
    assert {f"schedule-{name}.png" for name in ALPHAS} <= set(plots)
    assert report["followed"] == (
        None if follows is None else {"name": "demo", "found": False, "outcome": None, "reason": None, "bands": {}}
    )
    (line,) = [line for line in md.splitlines() if said in line]
    assert line.endswith("the plots show no plain speculation.")


def test_a_pilot_without_a_schedule_gets_no_schedule_plot(tmp_path: Path, plain_evidence: Evidence) -> None:
    report, md, plots = read(write_package(plain(), plain_evidence, tmp_path))
    assert report["switch"] is None
    assert not [name for name in plots if name.startswith("schedule-")]
    assert "The piloted schedule" not in md


def test_the_switch_lies_where_the_scheduled_arm_held_its_batch_in_flight() -> None:
    # in flight equals the offered load here, so batch 3 is held at a load of 3, which no band lies at
    evidence = crossover_pilot(ALPHAS, loads=(1, 1.5, 2, 2.5, 3.5, 5, 6), per_load=2)
    report = build(scheduled(), evidence)
    switch = report["switch"]
    assert switch["batch"] == SWITCH
    assert "num_speculative_tokens_per_batch_size" in switch["schedule"]
    for scope in report["scopes"]:
        loads = [b["load"] for b in scope["bands"]["speculative"]]
        assert min(loads) < SWITCH < max(loads) and SWITCH not in loads
        assert switch["scopes"][scope["name"]] == {"load": pytest.approx(SWITCH), "where": "interpolated"}


@pytest.mark.parametrize(
    ("bands", "found"),
    [
        pytest.param([(1.0, 2.0), (2.0, 6.0)], {"load": 1.5, "where": "interpolated"}, id="between-two-bands"),
        pytest.param([(2.0, 6.0), (1.0, 2.0)], {"load": 1.5, "where": "interpolated"}, id="bands-in-any-order"),
        pytest.param([(1.0, 1.0), (2.0, 4.0), (3.0, 9.0)], {"load": 2.0, "where": "interpolated"}, id="at-a-band"),
        pytest.param(
            [(1.0, 2.0), (1.5, None), (3.0, 6.0)], {"load": 2.0, "where": "interpolated"}, id="no-in-flight-skipped"
        ),
        pytest.param([(1.0, 5.0), (2.0, 8.0)], {"load": 1.0, "where": "belowLowest"}, id="exceeded-at-lowest"),
        pytest.param([(1.0, 1.0), (2.0, 2.0)], {"load": 2.0, "where": "notReached"}, id="never-reached"),
        pytest.param([(1.0, None)], None, id="no-in-flight-figure"),
    ],
)
def test_the_switch_load_is_interpolated_from_the_in_flight_figures(
    bands: list[tuple[float, float | None]], found: Json | None
) -> None:
    assert switch_load(bands, 4) == found
