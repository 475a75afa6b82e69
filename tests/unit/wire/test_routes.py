"""The routing-table contract between operator and router: codec, validation, classification, staleness."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from multidict import CIMultiDict

from specpilot.wire.names import Arm
from specpilot.wire.routes import (
    ROUTES_KEY,
    ArmWeights,
    HeaderMatch,
    PathMatch,
    RoutingTable,
    ScopeMatch,
    ScopeRoute,
    TableError,
    parse_routes,
    render_routes,
)

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)

EXAMPLE = {
    "pilot": "p1",
    "generation": 3,
    "updatedAt": "2026-11-29T12:00:00Z",
    "defaultScope": "chat",
    "scopes": [
        {
            "name": "code",
            "weights": {"baseline": 90, "speculative": 10, "alternative": 0},
            "deadlineSeconds": 20,
            "match": {"headers": [{"name": "x-team", "value": "code"}]},
        },
        {"name": "chat", "weights": {"baseline": 100}},
    ],
}


def data(doc: object) -> dict[str, str]:
    return {ROUTES_KEY: json.dumps(doc)}


def test_example_parses_with_its_meaning() -> None:
    table = parse_routes(data(EXAMPLE), pilot="p1")
    assert table.generation == 3
    assert table.updated_at == T0
    assert table.default_scope == "chat"
    code = table.scope("code")
    assert code is not None
    assert code.weights.of(Arm.SPECULATIVE) == 10
    assert code.deadline_seconds == 20
    assert table.scope("missing") is None


def test_render_then_parse_is_the_same_table() -> None:
    table = RoutingTable(
        pilot="p1",
        generation=7,
        updated_at=T0,
        scopes=(
            ScopeRoute(
                name="code",
                weights=ArmWeights(baseline=50, speculative=25, alternative=25),
                deadline_seconds=1.5,
                match=ScopeMatch(
                    headers=(HeaderMatch(name="x-team", type="RegularExpression", value="a|b"),),
                    paths=(PathMatch(type="Exact", value="/v1/completions"),),
                ),
            ),
        ),
    )
    rendered = render_routes(table)
    assert set(rendered) == {ROUTES_KEY}
    assert '"updatedAt":"2026-11-29T12:00:00Z"' in rendered[ROUTES_KEY]
    assert parse_routes(rendered, pilot="p1") == table


def test_unknown_fields_are_ignored_so_a_newer_operator_keeps_routers_working() -> None:
    doc = {**EXAMPLE, "futureField": {"x": 1}}
    assert parse_routes(data(doc), pilot="p1").generation == 3


def test_a_model_glob_is_no_match_rule() -> None:
    # Every arm serves the same model name, so the table cannot match on it; an older table's
    # `models` is ignored like any unknown field, leaving a scope that only named requests reach.
    doc = {**EXAMPLE, "defaultScope": None, "scopes": [{"name": "code", "match": {"models": ["code-*"]}}]}
    table = parse_routes(data(doc), pilot="p1")
    assert table.scopes[0].match == ScopeMatch()
    assert table.classify(path="/v1/completions", headers=CIMultiDict()) is None


@pytest.mark.parametrize(
    ("doc", "problem"),
    [
        pytest.param(None, "missing", id="no-key"),
        pytest.param("{", "Invalid JSON", id="not-json"),
        pytest.param([], "Input should be", id="not-object"),
        pytest.param({**EXAMPLE, "pilot": "p2"}, "not 'p1'", id="other-pilot"),
        pytest.param({**EXAMPLE, "updatedAt": "2026-11-29T12:00:00"}, "timezone", id="naive-time"),
        pytest.param({**EXAMPLE, "generation": -1}, "generation", id="negative-generation"),
        pytest.param({**EXAMPLE, "defaultScope": "nope"}, "not a listed scope", id="unknown-default"),
        pytest.param(
            {**EXAMPLE, "scopes": [{"name": "a", "weights": {"baseline": 90}}]}, "sum to 100", id="weights-sum"
        ),
        pytest.param(
            {**EXAMPLE, "scopes": [{"name": "a", "weights": {"baseline": 110, "speculative": -10}}]},
            "less than or equal",
            id="weight-range",
        ),
        pytest.param(
            {**EXAMPLE, "defaultScope": None, "scopes": [{"name": "a"}, {"name": "a"}]}, "unique", id="duplicate-scope"
        ),
        pytest.param({**EXAMPLE, "defaultScope": None, "scopes": [{"name": "Bad_Name"}]}, "pattern", id="bad-name"),
        pytest.param(
            {**EXAMPLE, "defaultScope": None, "scopes": [{"name": "a", "deadlineSeconds": 0}]},
            "greater than 0",
            id="zero-deadline",
        ),
        pytest.param(
            {
                **EXAMPLE,
                "defaultScope": None,
                "scopes": [
                    {"name": "a", "match": {"headers": [{"name": "x", "type": "RegularExpression", "value": "("}]}}
                ],
            },
            "bad regular expression",
            id="bad-regex",
        ),
        pytest.param(
            {**EXAMPLE, "defaultScope": None, "scopes": [{"name": "a", "match": {"paths": [{"value": "v1"}]}}]},
            "pattern",
            id="relative-path",
        ),
    ],
)
def test_bad_tables_are_refused_with_the_reason(doc: object, problem: str) -> None:
    with pytest.raises(TableError, match=problem):
        parse_routes(None if doc is None else ({ROUTES_KEY: doc} if isinstance(doc, str) else data(doc)), pilot="p1")


CLASSIFY = RoutingTable(
    pilot="p1",
    generation=1,
    updated_at=T0,
    scopes=(
        ScopeRoute(name="named-only"),
        ScopeRoute(name="code", match=ScopeMatch(paths=(PathMatch(type="Exact", value="/v1/completions"),))),
        ScopeRoute(
            name="support",
            match=ScopeMatch(
                headers=(HeaderMatch(name="X-Team", value="support"),),
                paths=(PathMatch(value="/v1/chat/"),),
            ),
        ),
        ScopeRoute(
            name="batch",
            match=ScopeMatch(headers=(HeaderMatch(name="x-tier", type="RegularExpression", value="batch-[0-9]+"),)),
        ),
        ScopeRoute(
            name="chat",
            match=ScopeMatch(paths=(PathMatch(value="/v1/chat/"), PathMatch(type="Exact", value="/v1/responses"))),
        ),
    ),
)


@pytest.mark.parametrize(
    ("path", "headers", "expected"),
    [
        pytest.param("/v1/completions", {}, "code", id="exact-path"),
        pytest.param("/v1/completions/x", {"x-tier": "none"}, None, id="exact-path-is-exact"),
        pytest.param("/v1/completions", {"x-team": "support"}, "code", id="first-match-wins"),
        pytest.param("/v1/chat/completions", {"x-team": "support"}, "support", id="header-and-path"),
        pytest.param("/v1/chat/completions", {"X-TEAM": "support"}, "support", id="header-name-any-case"),
        pytest.param("/v1/embeddings", {"x-team": "support"}, None, id="path-must-match"),
        pytest.param("/v1/chat/completions", {"x-team": "sales"}, "chat", id="header-value-must-match"),
        pytest.param("/v1/embeddings", {"x-tier": "batch-12"}, "batch", id="regex-full-match"),
        pytest.param("/v1/embeddings", {"x-tier": "batch-12x"}, None, id="regex-is-anchored"),
        pytest.param("/v1/responses", {}, "chat", id="one-of-the-paths"),
        pytest.param("/v1/embeddings", {}, None, id="nothing-matches"),
    ],
)
def test_classify_takes_the_first_scope_whose_match_holds(
    path: str, headers: dict[str, str], expected: str | None
) -> None:
    assert CLASSIFY.classify(path=path, headers=CIMultiDict(headers)) == expected


@pytest.mark.parametrize(
    ("max_age", "expected"),
    [(None, None), (timedelta(minutes=5), T0 + timedelta(minutes=5))],
    ids=["never", "five-minutes"],
)
def test_stale_at_is_updated_at_plus_max_age(max_age: timedelta | None, expected: datetime | None) -> None:
    assert CLASSIFY.stale_at(max_age) == expected
