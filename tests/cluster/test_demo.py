"""`make demo` stays true: the operator runs the demo pilot to its outcomes on the local cluster."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

from tests.cluster.conftest import ROOT, Cluster


def test_demo_adopts_chat_and_flips_code_back_for_speed_and_longform_for_kv_pressure(
    cluster: Cluster, tmp_path: Path
) -> None:
    namespace = f"demo-{uuid.uuid4().hex[:6]}"
    env = {
        **cluster.env(),
        "SPECPILOT_DEMO_NAMESPACE": namespace,
        "SPECPILOT_DEMO_TIMEOUT": "240",
        "SPECPILOT_DEMO_REPORT": str(tmp_path / "report"),
    }
    try:
        out = subprocess.run(
            [sys.executable, str(ROOT / "e2e/local/demo.py")],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert out.returncode == 0, out.stdout + out.stderr
        summary = out.stdout.split("== Summary", 1)[1]
        assert "chat      Speculative  stage 2   50%" in summary, summary
        assert "code      RolledBack" in summary, summary
        assert "code: ThresholdExceeded on timePerCommittedTokenRatio" in summary, summary
        assert "longform  RolledBack" in summary, summary
        assert "RoutesTaken" in summary, summary
        # The decisions at matched load under the default latency limits, never contradicting their report.
        report = json.loads((tmp_path / "report" / "report.json").read_text())
        assert report["compared"]["arm"] == "control"
        scopes = {scope["name"]: scope for scope in report["scopes"]}
        code = scopes["code"]["decision"]
        assert (code["outcome"], code["deferReason"]) == ("Defer", "NoNetGain"), summary
        assert scopes["longform"]["decision"]["outcome"] == "Defer", summary
        chat = scopes["chat"]
        bands = chat["bands"]
        assert [b["load"] for b in bands["control"]] == [b["load"] for b in bands["speculative"]]  # matched
        # chat wins every band measured against control; it is adopted where its own report backs it (faster
        # end to end, its TTFT tail within the default limit over every request at the loads adopted), and
        # otherwise deferred for that tail only: shown above the limit, or above it within its noise (seen
        # on two shared cores; the engines alone run it at 1.03x)
        assert all(band["measured"] and band["speculationWins"] for band in chat["comparisons"]), chat
        decision = chat["decision"]
        if decision["outcome"] == "Defer":
            assert decision["deferReason"] in ("NoNetGain", "InsufficientEvidence"), decision
            assert "its time to first token p99 runs" in decision["reasons"][0], decision
        else:
            assert decision["outcome"] in ("AdoptWithinEnvelope", "AdoptInLowLoadWindows"), summary
            assert decision["observedGain"] > 1 and decision["ttftRatio"] <= 1.2, decision
        remaining = cluster.get_json("deployments", "-n", namespace, "-l", "specpilot.io/pilot")["items"]
        assert remaining == [], "the demo deletes the pilot and everything it made"
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
