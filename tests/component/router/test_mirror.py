"""Mirroring on loopback: each request the speculative arm takes in a mirrored scope is copied to the control
arm at the same moment, measured there, and its answer dropped."""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from typing import Any

from tests.component.router.harness import Harness, HarnessFactory

from specpilot.wire.names import SCOPE_HEADER
from specpilot.wire.samples import RequestSample

SESSION_HEADER = "x-session"  # an affinity key per request: each request's arm is fixed by its key
MIRRORED = {"five": 5, "quarter": 25, "half": 50}  # speculative weight of each mirrored scope
SPLIT = "split"  # unmirrored: the control arm takes a share as large as the speculative arm's


def _samples(h: Harness) -> list[RequestSample]:
    return list(h.router.samples.since(0, 1_000_000).samples)


def _bodies(received: list[Any], scope: str) -> Counter[bytes]:
    return Counter(r.body for r in received if r.headers.get(SCOPE_HEADER) == scope)


async def _ask(h: Harness, i: int, scope: str, *, stream: bool) -> tuple[str, set[str]]:
    """One request; the arm the router named, and the ids (the answering fake's name) of what came back."""
    headers = {SESSION_HEADER: f"s{i}"}
    async with await h.chat(team=scope, stream=stream, headers=headers, user=f"r{i}", model=f"m{i % 3}") as resp:
        assert resp.status == 200
        if stream:
            events = [json.loads(e) for e in await h.read_sse(resp) if e != b"[DONE]"]
            ids = {e["id"] for e in events}
        else:
            ids = {(await resp.json())["id"]}
        return resp.headers["X-Specpilot-Arm"], ids


async def test_under_poisson_arrivals_both_compared_arms_serve_the_same_requests_at_the_same_moments(
    make_router: HarnessFactory,
) -> None:
    scopes = [
        *(Harness.scope(name, spec=spec, mirror=True) for name, spec in MIRRORED.items()),
        Harness.scope(SPLIT, spec=25, control=25),
    ]
    h = await make_router("--affinity-header", SESSION_HEADER, routes=Harness.table(*scopes), control=True)
    rng = random.Random(20261129)
    names = [*MIRRORED, SPLIT]
    asked: list[tuple[str, asyncio.Task[tuple[str, set[str]]]]] = []
    for i in range(160):
        await asyncio.sleep(rng.expovariate(60.0))  # Poisson arrivals, 60 a second
        scope = rng.choices(names, weights=[4, 2, 2, 2])[0]
        asked.append((scope, asyncio.create_task(_ask(h, i, scope, stream=rng.random() < 0.5))))
    answers = [(scope, *await task) for scope, task in asked]
    # Every answer came from the arm the router named, never from a copy.
    assert all(ids == {arm} for _, arm, ids in answers)
    spec_taken = Counter(scope for scope, arm, _ in answers if arm == "speculative")
    assert all(spec_taken[scope] for scope in MIRRORED), spec_taken  # else the test proves nothing for a scope
    copies = sum(spec_taken[scope] for scope in MIRRORED)
    await h.wait_for(lambda: len(_samples(h)) == len(answers) + copies)
    samples = _samples(h)
    metrics = await h.metrics()
    for scope in MIRRORED:
        per_window = Counter((int(s.at), s.arm.value) for s in samples if s.scope == scope)
        for second in {window for window, _ in per_window}:
            assert abs(per_window[second, "control"] - per_window[second, "speculative"]) <= 1, (scope, second)
        spec = [s for s in samples if s.scope == scope and s.arm == "speculative"]
        control = [s for s in samples if s.scope == scope and s.arm == "control"]
        assert len(spec) == len(control) == spec_taken[scope]
        assert Counter((s.model, s.stream) for s in control) == Counter((s.model, s.stream) for s in spec)
        assert all(s.outcome == "ok" and s.fallback is None for s in control)
        assert _bodies(h.control.received, scope) == _bodies(h.speculative.received, scope)
        assert metrics("specpilot_router_mirrored_requests_total", scope=scope, result="sent") == len(spec)
    # The unmirrored scope is split as before: control takes requests of its own, none copied.
    split_control, split_spec = _bodies(h.control.received, SPLIT), _bodies(h.speculative.received, SPLIT)
    assert split_control and split_spec and not split_control & split_spec
    assert metrics("specpilot_router_mirrored_requests_total", scope=SPLIT, result="sent") == 0


async def test_with_no_control_endpoint_copies_are_not_sent_and_clients_are_unaffected(
    make_router: HarnessFactory,
) -> None:
    h = await make_router(
        "--affinity-header", SESSION_HEADER, routes=Harness.table(Harness.scope("code", spec=50, mirror=True))
    )
    answers = [await _ask(h, i, "code", stream=i % 2 == 0) for i in range(20)]
    arms = Counter(arm for arm, _ in answers)
    assert arms["speculative"] and arms["baseline"] and set(arms) == {"speculative", "baseline"}
    assert all(ids == {arm} for arm, ids in answers)
    assert not h.control.received
    assert len(h.baseline.received) == arms["baseline"]  # a copy is never diverted to the baseline
    assert len(h.speculative.received) == arms["speculative"]
    assert Counter(s.arm.value for s in _samples(h)) == arms
    metrics = await h.metrics()
    assert (
        metrics("specpilot_router_mirrored_requests_total", scope="code", result="no_endpoint") == arms["speculative"]
    )
    assert metrics("specpilot_router_mirrored_requests_total", scope="code", result="sent") == 0


async def test_past_the_bound_copies_are_not_sent_until_one_in_flight_ends(make_router: HarnessFactory) -> None:
    h = await make_router(
        "--max-mirrored", "1", routes=Harness.table(Harness.scope("code", spec=100, mirror=True)), control=True
    )
    slow = {"x-fake-chunks": "3", "x-fake-gap": "0.2"}

    async def ask() -> None:
        async with await h.chat(team="code", headers=slow) as resp:
            assert resp.headers["X-Specpilot-Arm"] == "speculative"
            await resp.read()

    await asyncio.gather(*(ask() for _ in range(4)))
    metrics = await h.metrics()
    assert metrics("specpilot_router_mirrored_requests_total", scope="code", result="sent") == 1
    assert metrics("specpilot_router_mirrored_requests_total", scope="code", result="over_bound") == 3
    await h.wait_for(lambda: sum(s.arm == "control" for s in _samples(h)) == 1)
    assert len(h.control.received) == 1 and len(h.speculative.received) == 4
    await ask()  # the copy in flight has ended: the next one goes
    await h.wait_for(lambda: sum(s.arm == "control" for s in _samples(h)) == 2)
    metrics = await h.metrics()
    assert metrics("specpilot_router_mirrored_requests_total", scope="code", result="sent") == 2


async def test_a_copy_outlives_the_client_leaving_and_is_cancelled_when_the_router_stops(
    make_router: HarnessFactory,
) -> None:
    h = await make_router(routes=Harness.table(Harness.scope("code", spec=100, mirror=True)), control=True)
    slow = {"x-fake-chunks": "6", "x-fake-gap": "0.1"}
    async with await h.chat(team="code", headers=slow) as resp:
        await resp.content.readline()  # the first event has come; then the client leaves
        resp.close()
    await h.wait_for(lambda: any(s.arm == "control" for s in _samples(h)))
    spec, control = (next(s for s in _samples(h) if s.arm == arm) for arm in ("speculative", "control"))
    assert spec.outcome == "client_cancel" and control.outcome == "ok" and control.output_tokens == 6
    assert h.control.cancelled == 0

    hanging = asyncio.create_task(h.chat(team="code", headers={"x-fake-hang": "1"}))  # no answer ever starts
    await h.wait_for(lambda: h.control.active == 1 and h.speculative.active == 1)
    hanging.cancel()  # the client leaves
    await h.wait_for(lambda: h.speculative.cancelled == 1)
    assert h.control.active == 1  # the copy waits on its own answer
    await h.router.stop()
    await h.wait_for(lambda: h.control.cancelled == 1)
    assert [s.outcome for s in _samples(h) if s.arm == "control"] == ["ok", "client_cancel"]
