"""The rehearsal tests' pilot (the decisions' "mid" scope, rehearsed past its crossover) and its live load."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from specpilot.testing.decision_profile import DRAFT_TOKENS, LENGTHS, PROFILE
from tests.cluster.local import Cluster
from tests.cluster.pilots import judged_pilot, use_profile

PEAK = 4.0  # requests per second per replica: well past the crossover
LIVE_RATE = 2.0  # the live traffic: 0.5 per second per replica on each compared arm at a quarter share
MODEL_LOAD_SECONDS = 8


def rehearsed_pilot() -> dict[str, Any]:
    doc = copy.deepcopy(judged_pilot())
    spec = doc["spec"]
    use_profile(spec, PROFILE)
    # a restarted engine loads its model first: the restart fallback's replacement takes this long at least
    spec["engine"]["extraArgs"].append(f"--model-load-seconds={MODEL_LOAD_SECONDS}")
    spec["speculative"]["draft"]["numSpeculativeTokens"] = DRAFT_TOKENS
    spec["scopes"] = [
        {"name": "mid", "deadline": "20s", "stages": [{"weight": 25, "minRequests": 5, "minDuration": "10s"}]}
    ]
    spec["analysis"]["failureLimit"] = 12
    spec["analysis"]["minSamples"] = 5
    # Production takes the whole live load while the rehearsal runs: two replicas keep it clear of the
    # saturation guard (one replica of this profile at the live rate sits at its edge, and stops it).
    spec["baseline"] = {"replicas": 2}
    spec["rehearsal"] = {
        "peak": {"perReplica": PEAK},
        "steps": 4,
        "stepDuration": "30s",
        # a crossover step needs steps long enough to form bands of their own: the sweep test's (long) runs them
        "crossoverSteps": 0,
        "maxDuration": "6m",
    }
    return doc


def live_load(cluster: Cluster, router: str, tmp: Path, seconds: int) -> subprocess.Popen[bytes]:
    mix = tmp / "mix.json"
    mix.write_text(json.dumps({"scopes": [{"name": "mid", "deadline_s": 20, **LENGTHS}]}))
    argv = [sys.executable, "-m", "specpilot.cli", "loadgen", "--url", f"http://{router}:8080", "--mix", str(mix)]
    argv += ["--arrivals", "poisson", "--rate", str(LIVE_RATE), "--duration", str(seconds), "--timeout", "60"]
    return subprocess.Popen([*argv, "--no-progress"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
