"""Write the handover package as a folder: report.md, report.json, plots/, replay/."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from specpilot.analysis.evidence import Evidence
from specpilot.report.build import build, pilot_manifest
from specpilot.report.followed import FollowedPilot
from specpilot.report.markdown import markdown
from specpilot.report.plots import draw


def write_package(
    pilot: Mapping[str, Any], evidence: Evidence, folder: Path, *, followed: FollowedPilot | None = None
) -> Path:
    """The package for `pilot` and its evidence, in `folder` (created; files there are replaced); `followed`:
    the pilot it follows, where that one is still there (its plain speculation is set beside the schedule)."""
    report = build(pilot, evidence, followed=followed)
    folder.mkdir(parents=True, exist_ok=True)
    plots = draw(report, folder / "plots")
    (folder / "report.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    (folder / "report.md").write_text(markdown(report, plots))
    replay = folder / "replay"
    replay.mkdir(exist_ok=True)
    (replay / "pilot.yaml").write_text(yaml.safe_dump(pilot_manifest(pilot), sort_keys=False))
    (replay / "workload.yaml").write_text(replay_workload_text(report))
    return folder


def replay_workload_text(report: Mapping[str, Any]) -> str:
    """The report's replay workload as a loadgen mix file, headed by the command that replays it."""
    rate = report["replay"]["ratePerSecond"]
    header = (
        "# The workload this pilot observed, as a loadgen mix: weights are the scopes' arrival rates (per second),\n"
        "# lengths lognormal fits of the engine's token counts within the observed bounds. Replay with:\n"
        f"#   specpilot loadgen --url ROUTER_URL --mix workload.yaml --rate {rate} --arrivals poisson\n"
    )
    return header + yaml.safe_dump(report["replay"]["mix"], sort_keys=False)
