"""Bands at the edge of the evidence: a pilot whose stages straddle its crossover reads, in every load band,
the ratio the engines themselves give on the same requests.

The "mid" scope climbs three stages whose loads per replica of each compared arm fall at about 0.8x, 1.0x
and 1.25x of the engines' crossover (near 0.95 requests per second per replica), where the speculative
arm's time per committed token rises steeply with load. The truth at each band is the engines' own
reading of the very requests the pilot read there (tests/cluster/engine_replay.py): every request the
router sent each compared pod (its samples: when it arrived, its lengths) replayed through an engine
built from the pod's own command line and profile in virtual time, with the pod's seed, so that each
request draws the acceptances it drew in the pod; read in the windows the operator judged (each
`lastWindow` the status showed, in the band of the load it shows the window filed at) with the
operator's own window function. A single climb's band reads as its Poisson arrivals fell (a band of
this test has read 1.13 where the engines' long run at its load is 0.94, and so did the replay of its
requests), and two readings of the same arrivals with other acceptance draws differ by 0.03
(`bench/stage_bands.py --redraw`: the standard deviation, 0.08 at most); on the same requests with the
same draws what is left is the pilot's own measurement: the router's hop and HTTP, and two shared cores
waking the engines late. Every band, thin ones included, reads within TOLERANCE of the replay, and the
pilot's bands read again from the router's samples in the same windows match the report's, so the test
knows it compares the same windows. Each band prints the engines' long run at its load
(bench/crossover_reference.py's `long_run`) beside.

Limits: tests/cluster/pilots.py's judged pilot (its latency-tail ratios at 10x, for the reason given
there), minSamples 5 (a 15 s window at the first stage carries about 11 requests per arm, and a window
with fewer than minSamples is left out of the bins, which would keep the first stage's quieter windows
out of its bands) and a time-per-committed-token limit of 3: this test is about the bands, and the flip
has its own (tests/cluster/test_climb.py). Past the crossover every window fails the default limit of
1.0, and the scope would flip back before its last stage held a full band's windows: the band above the
crossover is the one this test needs. The last stage's minDuration outlasts the load, so the scope never
moves past it.

The router sends the control arm a copy of each request the speculative arm takes (`ScopeRoute.mirror`),
so both arms serve the scope's own Poisson arrivals, the same requests at the same moments, and every
window holds them at the same load; both arms' windows are binned at the pair's mean load
(`analysis.evidence.recording.matched_load`), which is then each arm's own. A thin band (fewer than
three windows' worth, the climb's last few windows at a load) must be marked thin, which keeps every
decision off it.
"""

from __future__ import annotations

import copy
import json
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from stage_bands import decision_setup, long_run_ratio

from specpilot.analysis.bands import MIN_BAND_WINDOWS
from specpilot.testing.decision_profile import DRAFT_TOKENS, LENGTHS, PROFILE
from specpilot.testing.waiting import wait_until
from specpilot.wire.names import Arm
from specpilot.wire.samples import RequestSample
from tests.cluster.engine_replay import JudgedWindow, engine_flags, in_band, pooled_ratio, replayed
from tests.cluster.local import Cluster, in_background
from tests.cluster.operator_process import Operator, pilot, running_operator, wait_ready
from tests.cluster.pilots import judged_pilot, report, router_ip, router_samples, use_profile

# Opt-in (-m long): three stages of 75 s, beyond the tier's budget.
pytestmark = [pytest.mark.cluster, pytest.mark.long]

RATE = 4.0  # mid's requests per second: 0.76, 0.96 and 1.2 per replica of each compared arm at 19, 24, 30%
STAGE_SECONDS = 75  # 12 judged windows of 15 s every 5 s after a stage's first: four bands' worth in all
STAGES = [
    {"weight": 19, "minRequests": 40, "minDuration": f"{STAGE_SECONDS}s"},
    {"weight": 24, "minRequests": 40, "minDuration": f"{STAGE_SECONDS}s"},
    {"weight": 30, "minRequests": 40, "minDuration": "10m"},  # the load ends first
]
WINDOW_SECONDS = 15.0
INTERVAL_SECONDS = 5.0
OVERLAP = 3  # windows of 15 s every 5 s (straddling_pilot checks)
MAX_RATIO = 3.0  # the time-per-committed-token limit: no flip (module docstring)
TOLERANCE = 0.05  # how far a band may read from the engines' own reading of its requests
SAME_WINDOWS = 0.005  # how far the router's samples, read again in the judged windows, may read from the band
LONG_RUN_SECONDS = 1000.0  # model seconds of Poisson arrivals per long run (printed beside, not held to)


@pytest.fixture(scope="module")
def operator(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    with running_operator(cluster, tmp_path_factory.mktemp("bands") / "operator.log") as running:
        yield running


def straddling_pilot() -> dict[str, Any]:
    doc = copy.deepcopy(judged_pilot())
    spec = doc["spec"]
    use_profile(spec, PROFILE)
    spec["speculative"]["draft"]["numSpeculativeTokens"] = DRAFT_TOKENS
    spec["scopes"] = [{"name": "mid", "stages": STAGES}]
    spec["analysis"]["minSamples"] = 5
    spec["analysis"]["thresholds"]["maxTimePerCommittedTokenRatio"] = MAX_RATIO
    windows = (spec["analysis"]["window"], spec["analysis"]["interval"])
    assert windows == (f"{WINDOW_SECONDS:g}s", f"{INTERVAL_SECONDS:g}s"), "STAGE_SECONDS counts these"
    return doc


def live_load(cluster: Cluster, router: str, tmp: Path, seconds: int) -> subprocess.Popen[str]:
    mix = tmp / "mix.json"
    mix.write_text(json.dumps({"scopes": [{"name": "mid", "deadline_s": 60, **LENGTHS}]}))
    argv = [sys.executable, "-m", "specpilot.cli", "loadgen", "--url", f"http://{router}:8080", "--mix", str(mix)]
    argv += ["--arrivals", "poisson", "--rate", str(RATE), "--seed", "5", "--duration", str(seconds)]
    argv += ["--timeout", "60", "--no-progress"]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=cluster.env())


@dataclass
class Judged:
    """Each window of mid's that the status showed, with the stage start shown beside it: the status written
    at the window's tick, after any move the tick made, as the operator files the window (one judged at
    the tick its stage moved shows the new stage's start, and stays out of the bands)."""

    seen: dict[float, tuple[dict[str, Any], float | None]] = field(default_factory=dict)  # by window end

    def saw(self, mid: dict[str, Any]) -> None:
        if (last := mid.get("lastWindow")) is not None:
            started = mid.get("stageStartedAt")
            self.seen.setdefault(_unix(last["end"]), (last, None if started is None else _unix(started)))

    def windows(self) -> list[JudgedWindow]:
        """The windows judged conclusive."""
        return [
            JudgedWindow(start=end - WINDOW_SECONDS, end=end, load=last.get("offeredLoad"), since=since)
            for end, (last, since) in sorted(self.seen.items())
            if last["verdict"] != "Inconclusive" and since is not None
        ]


def _unix(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def mid_status(cluster: Cluster, namespace: str) -> dict[str, Any]:
    status = pilot(cluster, namespace).get("status", {})
    if status.get("fallbacks"):
        raise AssertionError(f"mid flipped back: {status}")
    (mid,) = status.get("scopes") or [{}]
    return dict(mid)


@contextmanager
def watching(cluster: Cluster, namespace: str, judged: Judged) -> Iterator[None]:
    """Every second while the block runs, what the status shows of mid lands in `judged`."""

    def watch(stop: threading.Event) -> None:
        while not stop.wait(1):
            with suppress(subprocess.CalledProcessError):
                judged.saw(mid_status(cluster, namespace))

    with in_background(watch):
        yield


def climbed(cluster: Cluster, operator: Operator, namespace: str) -> dict[str, Any]:
    """mid's status once its last stage has run a stage's length: read while the load still runs, so that
    no window of the load's end (its arrivals stopping) reaches the bins."""

    def done() -> dict[str, Any] | None:
        mid = mid_status(cluster, namespace)
        started = mid.get("stageStartedAt")
        if mid.get("stage") != len(STAGES) - 1 or started is None:
            return None
        return mid if time.time() - _unix(started) >= STAGE_SECONDS else None

    try:
        found: dict[str, Any] = wait_until("mid through its last stage", done, timeout=360, every=2)
    except AssertionError as error:
        raise AssertionError(f"{error}\n{operator.tail(60)}") from None
    return found


def suspended(cluster: Cluster, namespace: str) -> None:
    """Judge no more windows (`spec.suspend`), and wait out the tick in flight: the report then holds every
    window the status showed."""
    cluster.kubectl(
        "patch", "speculationpilot", "demo", "-n", namespace, "--type=merge", "-p", '{"spec":{"suspend":true}}'
    )
    time.sleep(3 * INTERVAL_SECONDS)


@dataclass(frozen=True)
class BandReading:
    """One speculative band as the pilot read it, the router's samples read again in the same windows, the
    engines' own reading of those requests, and the engines' long run at its load."""

    load: float
    windows: int
    powered: bool
    ratio: float
    read_again: float | None
    windows_again: int
    replay: float | None
    long_run: float

    @property
    def difference(self) -> float:
        return self.ratio - (self.replay if self.replay is not None else float("nan"))

    @property
    def line(self) -> str:
        thin = "" if self.powered else ", thin"
        return (
            f"  load {self.load:.3f} ({self.windows} windows{thin}): ratio {self.ratio:.3f}; read again "
            f"{_figure(self.read_again)} ({self.windows_again} windows); the engines on the same requests "
            f"{_figure(self.replay)}, difference {self.difference:+.3f}; their long run {self.long_run:.3f}"
        )


def _figure(value: float | None) -> str:
    return "none" if value is None else f"{value:.3f}"


def band_reading(
    comparison: dict[str, Any],
    band: dict[str, Any],
    windows: list[JudgedWindow],
    served: tuple[list[RequestSample], list[RequestSample]],
) -> BandReading:
    """A comparison of the report, with its speculative band, beside the same windows read from the
    router's samples (`served[0]`) and from the engines' replay of them (`served[1]`)."""
    # a control arm: every band matched, and paired where it holds three windows or more (a thin tail may not)
    assert comparison["measured"] and (comparison["paired"] or band["windows"] < 3), comparison
    assert comparison["load"] == band["load"], (comparison, band)
    inside = in_band(windows, (band["loadLow"], band["loadHigh"]))
    return BandReading(
        load=comparison["load"],
        windows=band["windows"],
        powered=comparison["powered"],
        ratio=comparison["ratio"],
        read_again=pooled_ratio(inside, served[0], "mid"),
        windows_again=len(inside),
        replay=pooled_ratio(inside, served[1], "mid"),
        long_run=long_run_ratio(decision_setup(), comparison["load"], seconds=LONG_RUN_SECONDS, seeds=1),
    )


def request_agreement(samples: list[RequestSample], replay: list[RequestSample]) -> str:
    """How closely each request's decode time in the pods matched its replay: the median and the 90th
    percentile of their relative differences, per compared arm."""
    engine = {(s.arm, s.seq): s for s in replay}
    lines = []
    for arm in (Arm.SPECULATIVE, Arm.CONTROL):
        off = sorted(
            abs(s.decode / twin.decode - 1)
            for s in samples
            if s.arm is arm and s.decode and (twin := engine.get((arm, s.seq))) is not None and twin.decode
        )
        quantiles = statistics.quantiles(off, n=10)
        lines.append(f"{arm.value}: {len(off)} requests, median {statistics.median(off):.3f}, p90 {quantiles[-1]:.3f}")
    return "per request, |pod decode / replay decode - 1|: " + "; ".join(lines)


def test_every_band_of_a_climb_across_the_crossover_reads_the_engines_own_reading_of_its_requests(
    cluster: Cluster, operator: Operator, namespace: str, tmp_path: Path
) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(straddling_pilot()))
    wait_ready(cluster, operator, namespace)
    router = router_ip(cluster, namespace)
    load = live_load(cluster, router, tmp_path, seconds=600)
    judged = Judged()
    try:
        with watching(cluster, namespace, judged):
            mid = climbed(cluster, operator, namespace)
            suspended(cluster, namespace)
        body = json.loads(report(cluster, namespace, tmp_path / "report")["report.json"])
        served = router_samples(router)
    finally:
        load.terminate()
        load.wait()
    flags = {**engine_flags(cluster, namespace, Arm.SPECULATIVE), **engine_flags(cluster, namespace, Arm.CONTROL)}
    kept = tmp_path / "climb.json"  # what the table below is read from, for a failure's reader
    kept.write_text(
        json.dumps(
            {
                "judged": sorted(judged.seen.items()),
                "flags": flags,
                "report": body,
                "samples": [s.to_json() for s in served],
            }
        )
    )
    print(f"the climb's windows, samples and report: {kept}")
    assert len(flags) == 2, flags  # one replica per compared arm
    samples = [s for s in served if s.arm in (Arm.SPECULATIVE, Arm.CONTROL)]
    replay = replayed(samples, profile=PROFILE, flags=flags)
    print(request_agreement(samples, replay))
    windows = judged.windows()
    (scope,) = body["scopes"]
    pairs = zip(scope["comparisons"], scope["bands"]["speculative"], strict=True)
    bands = [band_reading(comparison, band, windows, (samples, replay)) for comparison, band in pairs]
    table = "\n".join(band.line for band in bands)
    seen = f"{len(judged.seen)} windows seen"
    print(f"mid at stage {mid['stage']} ({mid['state']}), {seen}, {len(bands)} bands:\n{table}")
    # the full bands straddle the crossover: the engines gain below it and lose above it in the long run
    full = [band for band in bands if band.powered]
    assert any(band.long_run < 1 for band in full) and any(band.long_run >= 1 for band in full), table
    # the same windows as the operator's: its bands read again from the router's samples
    assert all(b.read_again is not None and abs(b.read_again - b.ratio) <= SAME_WINDOWS for b in bands), table
    assert all(abs(band.difference) <= TOLERANCE for band in bands), table
    assert all(band.windows < MIN_BAND_WINDOWS * OVERLAP for band in bands if not band.powered), table
