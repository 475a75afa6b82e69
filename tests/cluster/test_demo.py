"""`make demo` stays true: the operator runs the demo pilot to its outcomes on the local cluster."""

from __future__ import annotations

import subprocess
import sys
import uuid

from tests.cluster.conftest import ROOT, Cluster


def test_demo_adopts_chat_and_flips_code_back_for_speed_and_longform_for_kv_pressure(cluster: Cluster) -> None:
    namespace = f"demo-{uuid.uuid4().hex[:6]}"
    env = {**cluster.env(), "SPECPILOT_DEMO_NAMESPACE": namespace, "SPECPILOT_DEMO_TIMEOUT": "240"}
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
        assert "longform: KvCachePressure on kvCacheUsage" in summary, summary
        assert "RoutesTaken" in summary, summary
        remaining = cluster.get_json("deployments", "-n", namespace, "-l", "specpilot.io/pilot")["items"]
        assert remaining == [], "the demo deletes the pilot and everything it made"
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
