"""The engines' own reading of a pilot's windows: every request the router sent an arm's pods, replayed
through the same engine in virtual time, and read in the windows the operator judged.

Each pod's requests (the router's samples, with the time each reached the router and the prompt and
output lengths the engine counted) arrive at a simulated engine built from the pod's own command line
and mock profile, in the order and at the offsets at which they reached the pod, with the same seed:
each request draws its acceptances from the seed the pod gave it (the n-th request's), so the replay
and the pod differ only in what the wall clock added (the router's hop, HTTP, a late wake-up on shared
cores). A replayed request is a copy of the router's sample with its engine times from virtual time
(`replayed`), so the operator's own window function reads both alike; each window is filed in the band
of the load the status showed it at (`lastWindow.offeredLoad`).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from specpilot.analysis.window import ArmRequests
from specpilot.metrics.arm_requests import arm_requests
from specpilot.mockvllm import simulate
from specpilot.wire.names import ARM_LABEL, Arm
from specpilot.wire.samples import RequestOutcome, RequestSample
from tests.cluster.local import Cluster


def engine_flags(cluster: Cluster, namespace: str, arm: Arm) -> dict[str, list[str]]:
    """The mock's flags (after its model name) of each of `arm`'s pods, by pod IP."""
    pods = cluster.get_json("pods", "-n", namespace, "-l", f"{ARM_LABEL}={arm.value}")["items"]
    out = {}
    for pod in pods:
        (container,) = [
            c for c in pod["spec"]["containers"] if "mock-vllm" in [*c.get("command", []), *c.get("args", [])]
        ]
        argv = [*container.get("command", []), *container.get("args", [])]
        out[pod["status"]["podIP"]] = argv[argv.index("mock-vllm") + 2 :]
    return out


def replayed(
    samples: Iterable[RequestSample], *, profile: Mapping[str, Any], flags: Mapping[str, Sequence[str]]
) -> list[RequestSample]:
    """The requests each pod in `flags` served (its samples, by endpoint), replayed through its engine in
    virtual time from the first one's arrival: those that finished, with the engine's times."""
    by_pod: dict[str, list[RequestSample]] = defaultdict(list)
    for sample in samples:
        host = sample.endpoint.rpartition(":")[0]
        if host in flags:
            by_pod[host].append(sample)
    out = []
    for host, served in by_pod.items():
        served.sort(key=lambda s: s.at)
        arrivals = [_arrival(s, origin=served[0].at) for s in served]
        finished = simulate.serve(simulate.engine(profile, flags=flags[host]), arrivals, until=arrivals[-1].at + 600)
        by_arrival = {id(done.arrival): done for done in finished}
        out += [_as_sample(s, done) for s, a in zip(served, arrivals, strict=True) if (done := by_arrival.get(id(a)))]
    return out


def _arrival(sample: RequestSample, *, origin: float) -> simulate.Arrival:
    """A request as it reached its pod: when (model seconds after `origin`), and the lengths the engine counted."""
    prompt, output = sample.prompt_tokens, sample.output_tokens
    assert prompt is not None and output is not None, f"a request the engine counted no tokens of: {sample}"
    return simulate.Arrival(at=sample.at - origin, scope=sample.scope, prompt_tokens=prompt, output_tokens=output)


def _as_sample(sample: RequestSample, done: simulate.Served) -> RequestSample:
    arrived = done.arrival.at
    return dataclasses.replace(
        sample,
        outcome=RequestOutcome.OK,
        status=200,
        e2e=done.end - arrived,
        ttft=done.first_token - arrived,
        decode=done.end - done.first_token,
        output_tokens=done.output_tokens,
        deadline_met=None,
    )


@dataclass(frozen=True)
class JudgedWindow:
    """A window the operator judged (Unix seconds), the load its status showed it filed at, and the stage
    start shown beside it: the window is filed as settled when that stage began before the window did."""

    start: float
    end: float
    load: float | None
    since: float

    @property
    def settled(self) -> bool:
        return self.since <= self.start


def requests(samples: Iterable[RequestSample], window: JudgedWindow, scope: str, arm: Arm) -> ArmRequests:
    """The scope's requests to `arm` that finished in the window, as the operator reads them."""
    return arm_requests(
        samples,
        scope=scope,
        arm=arm,
        start=datetime.fromtimestamp(window.start, UTC),
        end=datetime.fromtimestamp(window.end, UTC),
    )


def in_band(windows: Iterable[JudgedWindow], band: tuple[float, float]) -> list[JudgedWindow]:
    """The settled windows the operator filed in the load band [low, high)."""
    low, high = band
    return [w for w in windows if w.settled and w.load is not None and low <= w.load < high]


def pooled_ratio(windows: Sequence[JudgedWindow], samples: Sequence[RequestSample], scope: str) -> float | None:
    """The speculative arm's decode seconds per committed token over the control arm's, pooled over the
    windows' tokens, as a band reads them."""
    per_arm = []
    for arm in (Arm.SPECULATIVE, Arm.CONTROL):
        read = [requests(samples, window, scope, arm) for window in windows]
        tokens = sum(sum(r.committed_tokens) for r in read)
        if not tokens:
            return None
        per_arm.append(sum(sum(r.decode_seconds) for r in read) / tokens)
    return per_arm[0] / per_arm[1]
