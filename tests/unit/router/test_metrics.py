"""The per-request tally renders what prometheus_client's own families would for the same requests."""

from __future__ import annotations

import random
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.metrics_core import Metric

from specpilot.router.metrics import LATENCY_BUCKETS, PREFIX, TPOT_BUCKETS, RouterMetrics
from specpilot.wire.buckets import TIME_TO_FIRST_TOKEN
from specpilot.wire.names import Arm
from specpilot.wire.samples import RequestOutcome, RequestSample


def _sample(rng: random.Random, seq: int) -> RequestSample:
    outcome = rng.choice([RequestOutcome.OK] * 4 + list(RequestOutcome))
    streamed = outcome is RequestOutcome.OK and rng.random() < 0.8
    tokens = rng.choice([None, 0, 1, 2, 40])
    # Bounds themselves are observed too: a value equal to a bound belongs in that bound's bucket.
    e2e = rng.choice([rng.uniform(0, 30), rng.choice(LATENCY_BUCKETS), 10_000.0])
    return RequestSample(
        seq=seq,
        at=0.0,
        scope=rng.choice(["chat", "code"]),
        arm=rng.choice(list(Arm)),
        endpoint="",
        model="m",
        stream=streamed,
        status=200,
        outcome=outcome,
        e2e=e2e,
        ttft=rng.choice([rng.uniform(0, 2), rng.choice(TIME_TO_FIRST_TOKEN)]) if streamed else None,
        output_tokens=tokens,
        tokens_from_usage=True,
        decode=rng.choice([rng.uniform(0, 5), rng.choice(TPOT_BUCKETS)]) if streamed else None,
        deadline_met=rng.choice([None, True, False]),
        fallback=None,
    )


def _reference(samples: list[RequestSample]) -> CollectorRegistry:
    """The same families counted by prometheus_client's Counter and Histogram, one call per change."""
    r = CollectorRegistry()
    requests = Counter(f"{PREFIX}_requests", "", ["scope", "arm", "outcome"], registry=r)
    e2e = Histogram(f"{PREFIX}_e2e_seconds", "", ["scope", "arm", "outcome"], buckets=LATENCY_BUCKETS, registry=r)
    ttft = Histogram(f"{PREFIX}_ttft_seconds", "", ["scope", "arm"], buckets=TIME_TO_FIRST_TOKEN, registry=r)
    tpot = Histogram(f"{PREFIX}_time_per_output_token_seconds", "", ["scope", "arm"], buckets=TPOT_BUCKETS, registry=r)
    decode = Histogram(f"{PREFIX}_decode_seconds", "", ["scope", "arm"], buckets=LATENCY_BUCKETS, registry=r)
    decode_tokens = Counter(f"{PREFIX}_decode_tokens", "", ["scope", "arm"], registry=r)
    output_tokens = Counter(f"{PREFIX}_output_tokens", "", ["scope", "arm"], registry=r)
    deadline = Counter(f"{PREFIX}_deadline", "", ["scope", "arm", "met"], registry=r)
    for s in samples:
        key = (s.scope, s.arm.value)
        requests.labels(*key, s.outcome.value).inc()
        e2e.labels(*key, s.outcome.value).observe(s.e2e)
        if s.output_tokens:
            output_tokens.labels(*key).inc(s.output_tokens)
        if s.deadline_met is not None:
            deadline.labels(*key, str(s.deadline_met).lower()).inc()
        if s.outcome is not RequestOutcome.OK:
            continue
        if s.ttft is not None:
            ttft.labels(*key).observe(s.ttft)
        if s.tpot is not None and s.decode is not None and s.output_tokens is not None:
            tpot.labels(*key).observe(s.tpot)
            decode.labels(*key).observe(s.decode)
            decode_tokens.labels(*key).inc(s.output_tokens - 1)
    return r


def _samples_of(families: Iterable[Metric]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): round(sample.value, 9)
        for family in families
        for sample in family.samples
        if not sample.name.endswith("_created") and not sample.name.endswith("_in_flight")
    }


def test_the_tally_renders_what_prometheus_client_families_would() -> None:
    rng = random.Random(7)
    samples = [_sample(rng, seq) for seq in range(1, 600)]
    metrics = RouterMetrics()
    for sample in samples:
        metrics.tally.observe(sample)
    ours = _samples_of(metrics.tally.collect())
    wanted = _samples_of(_reference(samples).collect())
    assert ours == wanted
    assert len(wanted) > 500  # every family, several label sets


def test_in_flight_counts_up_and_down_and_keeps_its_series() -> None:
    metrics = RouterMetrics()
    key = ("code", Arm.SPECULATIVE.value)
    metrics.tally.enter(key)
    metrics.tally.enter(key)
    assert metrics.registry.get_sample_value(f"{PREFIX}_in_flight", {"scope": "code", "arm": "speculative"}) == 2
    metrics.tally.leave(key)
    metrics.tally.leave(key)
    assert metrics.registry.get_sample_value(f"{PREFIX}_in_flight", {"scope": "code", "arm": "speculative"}) == 0
