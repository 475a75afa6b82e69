"""The band test's replay (tests/cluster/engine_replay.py) reads each request as the engine that served it
did: an engine's requests, as the router's samples carry them, replayed through an engine of the same
command line and seed, finish with the same decode times; arriving a few milliseconds late (the router's
hop) moves a request's figures by a step at most and their pooled time per token by under 0.1%."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest
from tests.cluster.engine_replay import replayed

from specpilot.mockvllm import simulate
from specpilot.testing.decision_profile import DRAFT_TOKENS, PROFILE
from specpilot.wire.names import Arm
from specpilot.wire.samples import RequestOutcome, RequestSample

SPECULATIVE = {"method": "draft_model", "model": "draft", "num_speculative_tokens": DRAFT_TOKENS}
# a pod's flags after its model name, as the operator renders them for the local mock
FLAGS = ["--host", "$(POD_IP)", "--port", "8000", "--max-num-seqs=64", "--time-scale=1"]
FLAGS += ["--speculative-config", json.dumps(SPECULATIVE)]
POD = "10.0.0.7"
ORIGIN = 1_796_000_000.0  # the first request's arrival, Unix seconds


def pod_samples() -> list[RequestSample]:
    """Two minutes of Poisson arrivals at 1.2 per second served by the pod's engine, as the router samples them."""
    draw = random.Random(3)
    lengths = iter(lambda: (draw.randint(80, 120), draw.randint(40, 60)), None)
    arrivals = simulate.poisson([1.2], 120, scope="mid", lengths=lengths, rng=random.Random(1))
    served = simulate.serve(simulate.engine(PROFILE, flags=FLAGS), arrivals, until=400)
    return [
        RequestSample(
            seq=seq,
            at=ORIGIN + s.arrival.at - arrivals[0].at,
            scope="mid",
            arm=Arm.SPECULATIVE,
            endpoint=f"{POD}:8000",
            model="m",
            stream=True,
            status=200,
            outcome=RequestOutcome.OK,
            e2e=s.end - s.arrival.at,
            ttft=s.first_token - s.arrival.at,
            output_tokens=s.output_tokens,
            prompt_tokens=s.arrival.prompt_tokens,
            tokens_from_usage=True,
            decode=s.end - s.first_token,
            deadline_met=True,
            fallback=None,
        )
        for seq, s in enumerate(served, 1)
    ]


def test_a_replay_of_a_pods_requests_reads_each_as_the_pod_did() -> None:
    samples = pod_samples()
    replay = replayed(samples, profile=PROFILE, flags={POD: FLAGS, "10.0.0.8": FLAGS})
    assert len(samples) > 100 and [r.seq for r in replay] == [s.seq for s in samples]
    for sample, again in zip(samples, replay, strict=True):
        assert again.at == sample.at
        assert (again.decode, again.e2e) == pytest.approx(
            (sample.decode, sample.e2e), abs=1e-6
        )  # Unix seconds: 0.2 µs apart


def test_arriving_a_few_milliseconds_late_moves_the_pooled_time_per_token_by_under_a_thousandth() -> None:
    samples = pod_samples()
    late = [dataclasses.replace(s, at=s.at + random.Random(s.seq).uniform(0, 0.003)) for s in samples]
    replay = replayed(late, profile=PROFILE, flags={POD: FLAGS})
    pooled = [
        sum(s.decode or 0 for s in run) / sum((s.output_tokens or 0) - 1 for s in run) for run in (samples, replay)
    ]
    assert abs(pooled[1] / pooled[0] - 1) < 1e-3, pooled
    assert max(abs((a.decode or 0) - (s.decode or 0)) for s, a in zip(samples, replay, strict=True)) < 0.2
