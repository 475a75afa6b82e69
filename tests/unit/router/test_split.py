"""The deterministic split: each scope's compared arms get the same number of its requests, within one."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta

import pytest

from specpilot.router.core.choice import ARM_ORDER, EffectiveRoute, Split, divert, next_arm
from specpilot.router.core.state import RouterState
from specpilot.wire.names import Arm
from specpilot.wire.routes import ArmWeights, RoutingTable, ScopeRoute, render_routes
from specpilot.wire.samples import Fallback

SPEC, CONTROL, ALT, BASE = Arm.SPECULATIVE, Arm.CONTROL, Arm.ALTERNATIVE, Arm.BASELINE


def staged(share: int, *, alternative: bool = False) -> ArmWeights:
    """A scope's weights as the operator writes them: the same share for every compared arm."""
    compared = 3 if alternative else 2
    return ArmWeights(
        baseline=100 - compared * share, speculative=share, control=share, alternative=share if alternative else 0
    )


# Four scopes at the shares 5%, 25% and 50%, one of them with an alternative arm.
SCOPES = {"a": staged(5), "b": staged(25), "c": staged(50), "d": staged(25, alternative=True)}


def compared(weights: ArmWeights) -> list[Arm]:
    return [arm for arm in (SPEC, CONTROL, ALT) if weights.of(arm) and weights.of(arm) == weights.of(SPEC)]


def assert_even(counts: Mapping[Arm, int], weights: ArmWeights, requests: int) -> None:
    """The compared arms within one of each other, and every arm within one of its share."""
    arms = compared(weights)
    assert max(counts[arm] for arm in arms) - min(counts[arm] for arm in arms) <= 1, counts
    for arm in Arm:
        assert abs(counts[arm] - requests * weights.of(arm) / 100) < 1, (arm, counts, requests)


@pytest.mark.parametrize("seed", range(20))
def test_after_every_request_each_scopes_compared_arms_differ_by_at_most_one(seed: int) -> None:
    rng = random.Random(seed)
    splits = {name: Split() for name in SCOPES}
    counts = {name: Counter[Arm]() for name in SCOPES}
    for _ in range(rng.randrange(200, 1200)):
        name = rng.choice("aaabbcd")  # scopes of unequal traffic, in any order
        arm, splits[name] = next_arm(SCOPES[name], splits[name])
        counts[name][arm] += 1
        assert_even(counts[name], SCOPES[name], counts[name].total())


@pytest.mark.parametrize("weights", [*SCOPES.values(), ArmWeights(baseline=70, speculative=20, alternative=10)])
def test_every_hundred_requests_hold_each_arms_share_exactly(weights: ArmWeights) -> None:
    split, counts = Split(), Counter[Arm]()
    for _ in range(300):
        arm, split = next_arm(weights, split)
        counts[arm] += 1
    assert counts == {arm: 3 * weights.of(arm) for arm in Arm if weights.of(arm)}
    assert split == Split()  # a whole cycle brings every credit back


def test_compared_arms_take_turns_in_arm_order() -> None:
    split, taken = Split(), []
    for _ in range(8):
        arm, split = next_arm(staged(25, alternative=True), split)
        taken.append(arm)
    assert taken == [SPEC, CONTROL, ALT, BASE, SPEC, CONTROL, ALT, BASE]
    assert ARM_ORDER[:3] == (SPEC, CONTROL, ALT)


def run(stages: Sequence[tuple[ArmWeights, int]]) -> list[Counter[Arm]]:
    """The counts after every request through `stages` (weights, requests), one split carried through."""
    split, counts, seen = Split(), Counter[Arm](), []
    for weights, requests in stages:
        for _ in range(requests):
            arm, split = next_arm(weights, split)
            counts[arm] += 1
            seen.append(counts.copy())
    return seen


@pytest.mark.parametrize(
    "stages",
    [
        pytest.param([(staged(5), 37), (staged(25), 11), (staged(50), 23)], id="climb"),
        pytest.param([(staged(25), 7), (staged(0), 30), (staged(25), 9)], id="flip-back-and-reentry"),
        pytest.param([(staged(5, alternative=True), 21), (staged(25, alternative=True), 13)], id="with-alternative"),
    ],
)
def test_a_new_stage_goes_on_from_the_credits_so_turns_stay_even_across_it(
    stages: list[tuple[ArmWeights, int]],
) -> None:
    arms = compared(stages[0][0])
    for counts in run(stages):
        assert max(counts[arm] for arm in arms) - min(counts[arm] for arm in arms) <= 1, counts


def test_a_diverted_arms_turn_goes_to_the_ordinary_arm_with_its_reason() -> None:
    route = EffectiveRoute("code", staged(50), None, {SPEC: Fallback.SPECULATIVE_UNAVAILABLE})
    split, landed = Split(), []
    for _ in range(4):
        intended, split = next_arm(route.configured, split)
        landed.append(divert(route, intended))
    # the control arm keeps its turns; the speculative arm's go to the baseline, each saying why
    assert landed == [(BASE, Fallback.SPECULATIVE_UNAVAILABLE), (CONTROL, None)] * 2


def _table(**scopes: ArmWeights) -> dict[str, str]:
    routes = tuple(ScopeRoute(name=name, weights=weights) for name, weights in scopes.items())
    return render_routes(RoutingTable(pilot="p1", generation=1, updated_at=datetime.now(UTC), scopes=routes))


def test_the_router_keeps_a_split_per_scope_while_its_table_lists_it() -> None:
    state = RouterState(pilot="p1", default_scope="default", max_table_age=timedelta(minutes=5))
    state.set_table(_table(a=staged(50), b=staged(50)))
    assert [state.next_arm("a", staged(50)) for _ in range(2)] == [SPEC, CONTROL]
    assert state.next_arm("b", staged(50)) is SPEC  # its own turns, not a's
    state.set_table(_table(a=staged(50)))
    state.set_table(_table(a=staged(50), b=staged(50)))
    assert state.next_arm("b", staged(50)) is SPEC  # dropped from a table, it started afresh
    state.set_table(_table(a=staged(25), b=staged(25)))
    assert state.next_arm("b", staged(25)) is CONTROL  # a new stage goes on from the scope's turns
