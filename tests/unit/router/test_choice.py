"""Routing decisions: effective routes and fallbacks, scope, arm and endpoint choice."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from multidict import CIMultiDict

from specpilot.router.core.choice import (
    EffectiveRoute,
    Endpoint,
    Fallback,
    Routes,
    affinity_draw,
    choose_arm,
    classify_scope,
    mirror_arm,
    pick_arm,
    pick_endpoint,
    resolve_routes,
)
from specpilot.wire.names import Arm
from specpilot.wire.routes import ORDINARY, ArmWeights, HeaderMatch, RoutingTable, ScopeMatch, ScopeRoute

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
ALL = frozenset(Arm)
SPLIT = ArmWeights(baseline=70, speculative=20, alternative=10)

TABLE = RoutingTable(
    pilot="p1",
    generation=4,
    updated_at=T0,
    scopes=(
        ScopeRoute(
            name="code",
            weights=SPLIT,
            deadline_seconds=20,
            match=ScopeMatch(headers=(HeaderMatch(name="x-team", value="code"),)),
        ),
        ScopeRoute(name="chat", weights=ArmWeights(baseline=50, speculative=50)),
        ScopeRoute(name="plain"),
    ),
)


def resolve(
    *,
    table: RoutingTable | None = TABLE,
    fallback: Fallback | None = None,
    ready: frozenset[Arm] = ALL,
    now: datetime = T0,
    max_age: timedelta | None = timedelta(minutes=5),
) -> dict[str, dict[Arm, Fallback]]:
    routes = resolve_routes(
        table=table, table_fallback=fallback, ready_arms=ready, now=now, max_age=max_age, default_scope="default"
    )
    return {name: dict(route.diverted) for name, route in routes.scopes.items()}


SPEC, ALT = Arm.SPECULATIVE, Arm.ALTERNATIVE


@pytest.mark.parametrize(
    ("kwargs", "diverted"),
    [
        pytest.param({}, {"code": {}, "chat": {}, "plain": {}}, id="all-ready"),
        pytest.param(
            {"ready": frozenset({Arm.BASELINE, ALT})},
            {
                "code": {SPEC: Fallback.SPECULATIVE_UNAVAILABLE},
                "chat": {SPEC: Fallback.SPECULATIVE_UNAVAILABLE},
                "plain": {},
            },
            id="no-speculative-endpoint",
        ),
        pytest.param(
            {"ready": frozenset({Arm.BASELINE, SPEC})},
            {"code": {ALT: Fallback.ALTERNATIVE_UNAVAILABLE}, "chat": {}, "plain": {}},
            id="no-alternative-endpoint",
        ),
        pytest.param(
            {"now": T0 + timedelta(minutes=5)},
            {
                "code": {SPEC: Fallback.TABLE_STALE, ALT: Fallback.TABLE_STALE},
                "chat": {SPEC: Fallback.TABLE_STALE},
                "plain": {},
            },
            id="stale",
        ),
        pytest.param(
            {"now": T0 + timedelta(minutes=4, seconds=59)}, {"code": {}, "chat": {}, "plain": {}}, id="not-yet-stale"
        ),
        pytest.param(
            {"now": T0 + timedelta(days=9), "max_age": None}, {"code": {}, "chat": {}, "plain": {}}, id="staleness-off"
        ),
        pytest.param(
            {"fallback": Fallback.TABLE_INVALID, "ready": frozenset({Arm.BASELINE})},
            {
                "code": {SPEC: Fallback.TABLE_INVALID, ALT: Fallback.TABLE_INVALID},
                "chat": {SPEC: Fallback.TABLE_INVALID},
                "plain": {},
            },
            id="invalid-table-wins-over-readiness",
        ),
    ],
)
def test_effective_routes_divert_to_baseline_and_say_why(
    kwargs: dict[str, object], diverted: dict[str, dict[Arm, Fallback]]
) -> None:
    assert resolve(**kwargs) == diverted  # type: ignore[arg-type]


def test_without_a_table_everything_is_ordinary_under_the_default_scope() -> None:
    routes = resolve_routes(
        table=None, table_fallback=None, ready_arms=ALL, now=T0, max_age=None, default_scope="default"
    )
    assert routes.table_fallback is Fallback.TABLE_MISSING
    assert routes.default_scope == "default"
    assert routes.route("code").weights == ORDINARY


def test_table_default_scope_wins_over_the_router_flag() -> None:
    table = TABLE.model_copy(update={"default_scope": "chat"})
    routes = resolve_routes(table=table, table_fallback=None, ready_arms=ALL, now=T0, max_age=None, default_scope="d")
    assert routes.default_scope == "chat"


@pytest.mark.parametrize(
    ("diverted", "weights"),
    [
        ({}, SPLIT),
        ({SPEC: Fallback.SPECULATIVE_UNAVAILABLE}, ArmWeights(baseline=90, alternative=10)),
        ({SPEC: Fallback.TABLE_STALE, ALT: Fallback.TABLE_STALE}, ORDINARY),
    ],
    ids=["none", "speculative", "both"],
)
def test_effective_weights_move_diverted_shares_to_baseline(diverted: dict[Arm, Fallback], weights: ArmWeights) -> None:
    assert EffectiveRoute("code", SPLIT, None, diverted).weights == weights


def test_stale_fallback_and_valid_until_are_reported() -> None:
    routes = resolve_routes(
        table=TABLE,
        table_fallback=None,
        ready_arms=ALL,
        now=T0 + timedelta(minutes=6),
        max_age=timedelta(minutes=5),
        default_scope="default",
    )
    assert routes.table_fallback is Fallback.TABLE_STALE
    assert routes.valid_until == T0 + timedelta(minutes=5)
    assert routes.route("code").fallbacks == (Fallback.TABLE_STALE,)
    assert routes.route("code").deadline_seconds == 20


ROUTES = resolve_routes(table=TABLE, table_fallback=None, ready_arms=ALL, now=T0, max_age=None, default_scope="dflt")


@pytest.mark.parametrize(
    ("named", "team", "expected"),
    [
        ("chat", "code", "chat"),  # a named, listed scope wins over the header rule
        ("nope", "code", "code"),  # an unknown name is ignored
        (None, "code", "code"),
        (None, "other", "dflt"),
        ("", "", "dflt"),
    ],
)
def test_classify_scope(named: str | None, team: str, expected: str) -> None:
    headers = CIMultiDict({"x-team": team})
    assert classify_scope(ROUTES, named=named, path="/v1/completions", headers=headers) == expected


@pytest.mark.parametrize(
    ("weights", "draw", "arm"),
    [
        (SPLIT, 0.0, SPEC),
        (SPLIT, 0.1999, SPEC),
        (SPLIT, 0.2, ALT),
        (SPLIT, 0.2999, ALT),
        (SPLIT, 0.3, Arm.BASELINE),
        (SPLIT, 0.9999, Arm.BASELINE),
        (ORDINARY, 0.0, Arm.BASELINE),
        (ArmWeights(speculative=100), 0.9999, SPEC),
        (ArmWeights(baseline=50, alternative=50), 0.0, ALT),
    ],
)
def test_pick_arm_lays_shares_out_speculative_first(weights: ArmWeights, draw: float, arm: Arm) -> None:
    assert pick_arm(weights, draw) is arm


def test_pick_arm_shares_match_weights() -> None:
    counts = Counter(pick_arm(SPLIT, i / 1000) for i in range(1000))
    assert counts == {Arm.BASELINE: 700, SPEC: 200, ALT: 100}


def test_growing_the_speculative_weight_keeps_pinned_conversations_on_speculative() -> None:
    draws = [affinity_draw("code", f"conv-{i}") for i in range(500)]
    before = {d for d in draws if pick_arm(ArmWeights(baseline=90, speculative=10), d) is SPEC}
    after = {d for d in draws if pick_arm(ArmWeights(baseline=50, speculative=50), d) is SPEC}
    assert before and before <= after


@pytest.mark.parametrize(
    ("diverted", "draw", "expected"),
    [
        ({}, 0.1, (SPEC, None)),
        ({SPEC: Fallback.SPECULATIVE_UNAVAILABLE}, 0.1, (Arm.BASELINE, Fallback.SPECULATIVE_UNAVAILABLE)),
        ({SPEC: Fallback.SPECULATIVE_UNAVAILABLE}, 0.25, (ALT, None)),  # others are not moved
        ({SPEC: Fallback.SPECULATIVE_UNAVAILABLE}, 0.5, (Arm.BASELINE, None)),
        ({ALT: Fallback.TABLE_STALE, SPEC: Fallback.TABLE_STALE}, 0.25, (Arm.BASELINE, Fallback.TABLE_STALE)),
    ],
)
def test_choose_arm_diverts_only_the_unavailable_share(
    diverted: dict[Arm, Fallback], draw: float, expected: tuple[Arm, Fallback | None]
) -> None:
    assert choose_arm(EffectiveRoute("code", SPLIT, None, diverted), draw) == expected


MIRRORED = RoutingTable(
    pilot="p1",
    generation=1,
    updated_at=T0,
    scopes=(
        ScopeRoute(name="code", weights=ArmWeights(baseline=80, speculative=20), mirror=Arm.CONTROL),
        ScopeRoute(name="chat", weights=ArmWeights(baseline=80, speculative=10, control=10)),
    ),
)


@pytest.mark.parametrize(
    ("scope", "ready", "now", "draw", "expected"),
    [
        pytest.param("code", ALL, T0, 0.1, (SPEC, Arm.CONTROL), id="speculative-copied"),
        pytest.param("code", ALL, T0, 0.5, (Arm.BASELINE, None), id="baseline-not-copied"),
        pytest.param(
            "code", frozenset({Arm.BASELINE, Arm.CONTROL}), T0, 0.1, (Arm.BASELINE, None), id="fallback-not-copied"
        ),
        pytest.param("code", ALL, T0 + timedelta(minutes=6), 0.1, (Arm.BASELINE, None), id="stale-not-copied"),
        # whether the control arm can take the copy is the router's to find out when it sends it
        pytest.param("code", frozenset({Arm.BASELINE, SPEC}), T0, 0.1, (SPEC, Arm.CONTROL), id="no-control-endpoint"),
        pytest.param("chat", ALL, T0, 0.05, (SPEC, None), id="unmirrored-split"),
        pytest.param("chat", ALL, T0, 0.15, (Arm.CONTROL, None), id="unmirrored-control-share"),
        pytest.param("unlisted", ALL, T0, 0.1, (Arm.BASELINE, None), id="unlisted-scope"),
    ],
)
def test_a_copy_goes_to_the_mirror_arm_only_for_requests_the_speculative_arm_takes(
    scope: str, ready: frozenset[Arm], now: datetime, draw: float, expected: tuple[Arm, Arm | None]
) -> None:
    route = resolve_routes(
        table=MIRRORED,
        table_fallback=None,
        ready_arms=ready,
        now=now,
        max_age=timedelta(minutes=5),
        default_scope="default",
    ).route(scope)
    arm, _ = choose_arm(route, draw)
    assert (arm, mirror_arm(route, arm)) == expected


def test_affinity_draw_is_stable_and_spread() -> None:
    assert affinity_draw("code", "conv-1") == affinity_draw("code", "conv-1")
    draws = [affinity_draw("code", f"conv-{i}") for i in range(1000)]
    assert all(0 <= d < 1 for d in draws)
    assert 400 < sum(d < 0.5 for d in draws) < 600


A, B, C = Endpoint("10.0.0.1", 8000), Endpoint("10.0.0.2", 8000), Endpoint("10.0.0.3", 8000)


@pytest.mark.parametrize(
    ("outstanding", "start", "expected"),
    [
        ({}, 0, A),
        ({}, 1, B),
        ({}, 5, C),
        ({A: 2, B: 1, C: 1}, 0, B),
        ({A: 2, B: 1, C: 1}, 2, C),
        ({A: 0, B: 3, C: 3}, 1, A),
    ],
)
def test_pick_endpoint_least_outstanding_with_rotating_ties(
    outstanding: dict[Endpoint, int], start: int, expected: Endpoint
) -> None:
    assert pick_endpoint([A, B, C], outstanding, start=start) == expected


def test_pick_endpoint_of_none_is_none() -> None:
    assert pick_endpoint([], {}, start=0) is None


@pytest.mark.parametrize(
    ("endpoint", "address"),
    [(Endpoint("10.0.0.1", 80), "10.0.0.1:80"), (Endpoint("fd00::1", 8000), "[fd00::1]:8000")],
)
def test_endpoint_address(endpoint: Endpoint, address: str) -> None:
    assert endpoint.address == address


REHEARSAL = RoutingTable(
    pilot="p1-rehearsal",
    generation=1,
    updated_at=T0,
    scopes=(ScopeRoute(name="chat", weights=ArmWeights(speculative=50, control=50)),),
)


def _rehearsal_routes(*, ready: frozenset[Arm], now: datetime = T0, fallback: Fallback | None = None) -> Routes:
    return resolve_routes(
        table=REHEARSAL,
        table_fallback=fallback,
        ready_arms=ready,
        now=now,
        max_age=timedelta(minutes=5),
        default_scope="default",
        ordinary=Arm.CONTROL,
    )


@pytest.mark.parametrize(
    ("ready", "now", "fallback", "weights"),
    [
        (frozenset({Arm.SPECULATIVE, Arm.CONTROL}), T0, None, ArmWeights(speculative=50, control=50)),
        (frozenset({Arm.CONTROL}), T0, None, ArmWeights(control=100)),
        (frozenset({Arm.SPECULATIVE, Arm.CONTROL}), T0 + timedelta(minutes=6), None, ArmWeights(control=100)),
        (frozenset({Arm.SPECULATIVE, Arm.CONTROL}), T0, Fallback.TABLE_INVALID, ArmWeights(control=100)),
    ],
)
def test_with_control_as_the_ordinary_arm_every_fallback_goes_to_control_and_none_to_baseline(
    ready: frozenset[Arm], now: datetime, fallback: Fallback | None, weights: ArmWeights
) -> None:
    routes = _rehearsal_routes(ready=ready, now=now, fallback=fallback)
    route = routes.route("chat")
    assert route.weights == weights
    arms = {choose_arm(route, i / 1000)[0] for i in range(1000)}
    assert Arm.BASELINE not in arms


def test_with_control_as_the_ordinary_arm_an_unlisted_scope_and_a_baseline_share_go_to_control() -> None:
    routes = _rehearsal_routes(ready=frozenset({Arm.SPECULATIVE, Arm.CONTROL}))
    assert routes.route("unknown").weights == ArmWeights(control=100)
    assert choose_arm(routes.route("unknown"), 0.5) == (Arm.CONTROL, None)
    # a table that names the baseline anyway: it has no endpoints here, so its share is diverted
    leaky = REHEARSAL.model_copy(
        update={"scopes": (ScopeRoute(name="chat", weights=ArmWeights(baseline=50, speculative=50)),)}
    )
    route = resolve_routes(
        table=leaky,
        table_fallback=None,
        ready_arms=frozenset({Arm.SPECULATIVE, Arm.CONTROL}),
        now=T0,
        max_age=None,
        default_scope="default",
        ordinary=Arm.CONTROL,
    ).route("chat")
    assert route.weights == ArmWeights(speculative=50, control=50)
    assert choose_arm(route, 0.9) == (Arm.CONTROL, Fallback.BASELINE_UNAVAILABLE)
