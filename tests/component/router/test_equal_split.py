"""Equal load per window over HTTP: under Poisson arrivals across four scopes, each scope's compared arms
get the same number of its requests, to within one, in every window and after every request."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Mapping, Sequence

from tests.component.conftest import Serve
from tests.component.router.conftest import TEAM_HEADER, FakeVllm, Harness, HarnessFactory

from specpilot.wire.routes import ArmWeights, HeaderMatch, ScopeMatch, ScopeRoute

REQUESTS = 400
RATE = 80.0  # requests per second over all scopes: about five seconds of arrivals
WINDOW = 0.5  # seconds
SCOPE_TRAFFIC = {"a": 0.4, "b": 0.3, "c": 0.2, "d": 0.1}  # each scope's part of the arrivals
SHARES = {"a": (5, False), "b": (25, False), "c": (50, False), "d": (25, True)}  # share, with an alternative arm


def weights(share: int, alternative: bool) -> ArmWeights:
    return ArmWeights(
        baseline=100 - share * (3 if alternative else 2),
        speculative=share,
        control=share,
        alternative=share if alternative else 0,
    )


def compared(name: str) -> tuple[str, ...]:
    return ("speculative", "control", "alternative") if SHARES[name][1] else ("speculative", "control")


def route(name: str) -> ScopeRoute:
    return ScopeRoute(
        name=name,
        weights=weights(*SHARES[name]),
        match=ScopeMatch(headers=(HeaderMatch(name=TEAM_HEADER, value=name),)),
    )


def spread(counts: Mapping[str, int], arms: Sequence[str]) -> int:
    return max(counts[arm] for arm in arms) - min(counts[arm] for arm in arms)


async def test_poisson_arrivals_give_each_scopes_compared_arms_equal_counts_in_every_window(
    make_router: HarnessFactory, serve: Serve
) -> None:
    control, alternative = FakeVllm("control"), FakeVllm("alternative")
    await control.start(serve)
    await alternative.start(serve)
    h = await make_router(
        "--static-endpoints",
        f"control={control.address}",
        "--static-endpoints",
        f"alternative={alternative.address}",
        routes=Harness.table(*(route(name) for name in SHARES)),
    )
    rng = random.Random(7)
    names, traffic = list(SCOPE_TRAFFIC), list(SCOPE_TRAFFIC.values())
    fake = {"x-fake-chunks": "4", "x-fake-gap": "0.005"}  # about 20 ms each: requests overlap

    async def one(team: str) -> None:
        async with await h.chat(team=team, headers=fake) as resp:
            assert resp.status == 200
            await resp.read()

    tasks = []
    for _ in range(REQUESTS):
        await asyncio.sleep(rng.expovariate(RATE))
        tasks.append(asyncio.create_task(one(rng.choices(names, traffic)[0])))
    await asyncio.gather(*tasks)

    page = await h.samples()  # one page holds them all
    assert page["dropped"] == 0
    samples = sorted(page["samples"], key=lambda s: s["at"])  # in the order the router split them
    assert len(samples) == REQUESTS and all(s["outcome"] == "ok" and s["fallback"] is None for s in samples)
    # What the engines received is what the samples say they received.
    engines = {"baseline": h.baseline, "speculative": h.speculative, "control": control, "alternative": alternative}
    received = Counter((r.headers["X-Specpilot-Scope"], arm) for arm, e in engines.items() for r in e.received)
    assert received == Counter((s["scope"], s["arm"]) for s in samples)

    # After every request, each scope's compared arms are within one of each other.
    running = {name: Counter[str]() for name in SHARES}
    for sample in samples:
        counts = running[sample["scope"]]
        counts[sample["arm"]] += 1
        assert spread(counts, compared(sample["scope"])) <= 1, (sample["scope"], counts)
    for name, counts in running.items():
        expected = weights(*SHARES[name])
        assert abs(counts["baseline"] - counts.total() * expected.baseline / 100) < 1, (name, counts)
        assert counts[compared(name)[0]] >= 2, (name, counts)  # every scope's compared arms were exercised

    # In every window of the run, too.
    start = samples[0]["at"]
    windows: dict[tuple[int, str], Counter[str]] = {}
    for sample in samples:
        key = (int((sample["at"] - start) // WINDOW), sample["scope"])
        windows.setdefault(key, Counter())[sample["arm"]] += 1
    assert len({index for index, _ in windows}) >= 8
    uneven = {key: counts for key, counts in windows.items() if spread(counts, compared(key[1])) > 1}
    assert uneven == {}
