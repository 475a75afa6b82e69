"""`make demo` stays true: the demo runs end to end on the local cluster (short phases)."""

from __future__ import annotations

import subprocess
import sys
import uuid

from tests.cluster.conftest import ROOT, Cluster


def test_demo_runs_both_stages_and_flips_code_back(cluster: Cluster) -> None:
    namespace = f"demo-{uuid.uuid4().hex[:6]}"
    env = {**cluster.env(), "SPECPILOT_DEMO_NAMESPACE": namespace, "SPECPILOT_DEMO_SECONDS": "6"}
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
        stage2 = out.stdout.split("== Stage 2", 1)[1]
        assert "chat   speculative" in stage2
        assert "code   baseline" in stage2 and "code   speculative" not in stage2
        assert "the router applied the new table" in out.stdout
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
