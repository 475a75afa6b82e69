"""The router's state: table codec errors, staleness over time, endpoint choice and readiness."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest

from specpilot.router.core.choice import Endpoint
from specpilot.router.core.state import ENDPOINTS, TABLE, RouterState
from specpilot.wire.names import Arm
from specpilot.wire.routes import ArmWeights, RoutingTable, ScopeRoute, render_routes
from specpilot.wire.samples import Fallback

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
B1, B2, S1 = Endpoint("10.0.0.1", 8000), Endpoint("10.0.0.2", 8000), Endpoint("10.0.0.9", 8000)


class Clock:
    def __init__(self) -> None:
        self.now = T0.timestamp()

    def __call__(self) -> float:
        return self.now


def routes_data(*, pilot: str = "p1", spec: int = 50) -> dict[str, str]:
    table = RoutingTable(
        pilot=pilot,
        generation=2,
        updated_at=T0,
        scopes=(ScopeRoute(name="code", weights=ArmWeights(baseline=100 - spec, speculative=spec)),),
    )
    return render_routes(table)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def state(clock: Clock) -> RouterState:
    s = RouterState(pilot="p1", default_scope="default", max_table_age=timedelta(minutes=5), clock=clock)
    s.set_endpoints({Arm.BASELINE: (B1, B2), Arm.SPECULATIVE: (S1,)})
    s.set_table(routes_data())
    s.synced(TABLE)
    s.synced(ENDPOINTS)
    return s


def test_a_good_table_steers_traffic(state: RouterState) -> None:
    routes = state.routes()
    assert routes.table_fallback is None
    assert routes.route("code").weights == ArmWeights(baseline=50, speculative=50)


@pytest.mark.parametrize(
    ("data", "fallback", "keeps_scopes"),
    [
        (None, Fallback.TABLE_MISSING, False),
        ({"routes.json": "{"}, Fallback.TABLE_INVALID, True),
        (routes_data(pilot="other"), Fallback.TABLE_INVALID, True),
        ({}, Fallback.TABLE_INVALID, True),
    ],
    ids=["deleted", "malformed", "other-pilot", "no-key"],
)
def test_a_bad_table_sends_every_scope_to_baseline(
    state: RouterState, data: dict[str, str] | None, fallback: Fallback, keeps_scopes: bool
) -> None:
    state.set_table(data)
    routes = state.routes()
    assert routes.table_fallback is fallback
    assert routes.route("code").weights.baseline == 100
    assert ("code" in routes.scopes) is keeps_scopes  # the last good table still names the scopes
    state.set_table(routes_data())
    assert state.routes().table_fallback is None


def test_the_table_turns_stale_with_time_alone(
    state: RouterState, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    clock.now += 299
    assert state.routes().table_fallback is None
    clock.now += 1
    with caplog.at_level(logging.WARNING, "specpilot.router"):
        assert state.routes().table_fallback is Fallback.TABLE_STALE
    assert "table_stale" in caplog.text


def test_losing_every_speculative_endpoint_is_logged_and_diverts(
    state: RouterState, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, "specpilot.router"):
        state.set_endpoints({Arm.BASELINE: (B1,)})
    assert state.routes().route("code").fallbacks == (Fallback.SPECULATIVE_UNAVAILABLE,)
    assert "speculative share goes to baseline (speculative_unavailable)" in caplog.text


def test_pick_spreads_by_outstanding_requests(state: RouterState) -> None:
    first = state.pick(Arm.BASELINE)
    assert first is not None
    state.acquire(first)
    second = state.pick(Arm.BASELINE)
    assert second is not None and second != first
    state.release(first)
    assert state.outstanding == {}


def test_an_ejected_endpoint_is_skipped_for_a_while(state: RouterState, clock: Clock) -> None:
    state.eject(B1)
    assert {state.pick(Arm.BASELINE) for _ in range(4)} == {B2}
    clock.now += 2.5
    assert {state.pick(Arm.BASELINE) for _ in range(4)} == {B1, B2}


def test_ejection_never_empties_an_arm(state: RouterState) -> None:
    state.eject(S1)
    assert state.pick(Arm.SPECULATIVE) == S1
    state.eject(B1)
    state.eject(B2)
    assert state.pick(Arm.BASELINE) in (B1, B2)


def test_a_request_does_not_return_to_an_endpoint_it_failed_on(state: RouterState) -> None:
    assert {state.pick(Arm.BASELINE, frozenset({B1})) for _ in range(4)} == {B2}
    assert state.pick(Arm.SPECULATIVE, frozenset({S1})) is None


def test_ready_needs_both_sources_and_a_baseline_endpoint(clock: Clock) -> None:
    s = RouterState(pilot="p1", default_scope="default", max_table_age=None, clock=clock)
    s.set_endpoints({Arm.BASELINE: (B1,)})
    s.synced(ENDPOINTS)
    assert not s.ready
    s.synced(TABLE)  # a missing table is fine: everything goes to baseline
    assert s.ready
    s.set_endpoints({Arm.SPECULATIVE: (S1,)})
    assert not s.ready


def test_a_draining_router_is_not_ready(state: RouterState) -> None:
    assert state.ready
    state.drain()
    assert not state.ready


def test_describe_shows_the_effective_table(state: RouterState) -> None:
    state.set_endpoints({Arm.BASELINE: (B1,)})
    shown = state.describe()
    assert shown["generation"] == 2
    assert shown["scopes"] == {
        "code": {
            "weights": {"baseline": 100, "speculative": 0, "control": 0, "alternative": 0},
            "configured": {"baseline": 50, "speculative": 50, "control": 0, "alternative": 0},
            "deadlineSeconds": None,
            "fallbacks": ["speculative_unavailable"],
            "mirror": None,
        }
    }
    assert shown["endpoints"] == {"baseline": ["10.0.0.1:8000"], "speculative": [], "control": [], "alternative": []}


def test_every_change_is_published(clock: Clock) -> None:
    seen: list[int | None] = []
    s = RouterState(
        pilot="p1",
        default_scope="default",
        max_table_age=None,
        clock=clock,
        on_routes=lambda routes, _: seen.append(routes.table and routes.table.generation),
    )
    s.set_table(routes_data())
    s.set_table(None)
    assert seen == [2, None]
