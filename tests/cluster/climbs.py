"""Climbs past the crossover of the "mid" scope of specpilot.testing.decision_profile: its live load through
a pilot's router, the engines' own crossover in virtual time (the reference a climb's decision is held
to), and waiting for a climb's flip and its decision."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from specpilot.mockvllm import simulate
from specpilot.testing.decision_profile import DRAFT_TOKENS, LENGTHS, PROFILE
from specpilot.testing.waiting import wait_until
from tests.cluster.local import ROOT, Cluster
from tests.cluster.operator_process import Operator, pilot


def live_load(cluster: Cluster, router: str, tmp: Path, *, rate: float, seconds: int) -> subprocess.Popen[str]:
    """mid's requests through the router at `router`: Poisson at `rate` per second, for `seconds`."""
    mix = tmp / "mix.json"
    mix.write_text(json.dumps({"scopes": [{"name": "mid", "deadline_s": 60, **LENGTHS}]}))
    argv = [sys.executable, "-m", "specpilot.cli", "loadgen", "--url", f"http://{router}:8080", "--mix", str(mix)]
    argv += ["--arrivals", "poisson", "--rate", str(rate), "--seed", "3", "--duration", str(seconds)]
    argv += ["--timeout", "60", "--no-progress"]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=cluster.env())


def engines_crossover(tmp: Path, low: float, high: float, *, seeds: int = 1) -> float:
    """Where the engines' time per committed token crosses between `low` and `high` (requests per second
    per replica): 9 loads, `seeds` runs of 1,500 model seconds each, in virtual time (about 20 s of one
    core a seed)."""
    out = tmp / "reference.json"
    argv = [sys.executable, str(ROOT / "bench/crossover_reference.py"), "--profile", json.dumps(PROFILE)]
    argv += ["--scope", "mid", "--draft-tokens", str(DRAFT_TOKENS), "--grid", f"{low:.3f}:{high:.3f}:9"]
    argv += ["--seconds", "1500", "--seeds", str(seeds), "--climbs", "0"]
    lengths = [f"{LENGTHS[key]['min']}:{LENGTHS[key]['max']}" for key in ("input_tokens", "output_tokens")]
    argv += ["--input-tokens", lengths[0], "--output-tokens", lengths[1], "--json", str(out)]
    done = subprocess.run(argv, check=True, capture_output=True, text=True, timeout=600)
    found = json.loads(out.read_text())["crossover"]
    assert found is not None, done.stdout
    return float(found)


def engines_in_flight(load: float, *, seconds: float = 1500.0, warm_up: float = 100.0) -> float:
    """The requests a speculative mid engine (DRAFT_TOKENS drafts, every step) holds in flight at `load`
    requests per second, in virtual time: their end-to-end seconds over the time they were finished in,
    after `warm_up` (Little's law, as the operator reads the router's count). About a second of one core."""
    draw = random.Random(1)
    prompt, output = LENGTHS["input_tokens"], LENGTHS["output_tokens"]

    def lengths() -> Iterator[tuple[int, int]]:
        while True:
            yield draw.randint(prompt["min"], prompt["max"]), draw.randint(output["min"], output["max"])

    arrivals = simulate.poisson([load], seconds, scope="mid", lengths=lengths(), rng=random.Random(0))
    draft = {"method": "draft_model", "model": "draft", "num_speculative_tokens": DRAFT_TOKENS}
    served = simulate.serve(simulate.engine(PROFILE, draft), arrivals, until=seconds)
    return sum(s.e2e for s in served if s.end >= warm_up) / (seconds - warm_up)


def flipped_back(cluster: Cluster, operator: Operator, namespace: str, name: str = "demo") -> dict[str, Any]:
    """mid's flip back, once recorded."""

    def found() -> dict[str, Any] | None:
        status = pilot(cluster, namespace, name).get("status", {})
        return next(iter(status.get("fallbacks", [])), None)

    try:
        flip: dict[str, Any] = wait_until("mid flipped back", found, timeout=300, every=2)
    except AssertionError as error:
        raise AssertionError(f"{error}: {pilot(cluster, namespace, name).get('status')}\n{operator.tail(60)}") from None
    return flip


def decided(cluster: Cluster, namespace: str, name: str = "demo") -> dict[str, Any]:
    """The pilot's decision, asked for and unchanged for 20 s (the windows hold the last requests for a
    window's length after the load stops)."""
    cluster.kubectl("annotate", "-n", namespace, f"speculationpilot/{name}", "specpilot.io/decide=now", "--overwrite")
    seen: list[Any] = []

    def settled() -> dict[str, Any] | None:
        status = pilot(cluster, namespace, name).get("status", {})
        scopes: list[dict[str, Any]] = status.get("scopes", [])
        mid = scopes[0].get("decision") if scopes else None
        seen.append(mid)
        return status if mid and len(seen) > 20 and all(item == mid for item in seen[-20:]) else None

    status: dict[str, Any] = wait_until("mid's decision stated and unchanged for 20 s", settled, timeout=120, every=1)
    return status
