"""Probe cases that cannot be sent are refused, naming the field and the fix."""

from __future__ import annotations

from typing import Any

import pytest

from specpilot.api.spec import Probes, SpeculationPilotSpec
from specpilot.api.spec.pilot_spec import PROBES_GIVEN
from specpilot.api.validate import validate

BASE: dict[str, Any] = {
    "apiVersion": "specpilot.io/v1alpha1",
    "kind": "SpeculationPilot",
    "metadata": {"name": "probes"},
    "spec": {
        "engine": {"image": "vllm/vllm-openai:v0.33.0", "model": "Qwen/Qwen3-8B"},
        "speculative": {"draft": {"model": "Qwen/Qwen3-0.6B"}},
        "scopes": [{"name": "chat"}],
    },
}


def pilot(quality: dict[str, Any] | None = None, scope: dict[str, Any] | None = None) -> dict[str, Any]:
    spec = {**BASE["spec"], "scopes": [{"name": "chat", **(scope or {})}]}
    return {**BASE, "spec": {**spec, **({"quality": quality} if quality is not None else {})}}


def cases(*listed: dict[str, Any]) -> dict[str, Any]:
    return {"probes": {"cases": list(listed)}}


SAMPLED: dict[str, Any] = {"kind": "sampled", "prompt": "p", "temperature": 0.7, "score": {"builtin": "length"}}


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        (pilot({"probes": {"maxTokens": 8}}), "spec.quality.probes", "set prompts or cases"),
        (pilot(cases({"kind": "toolCall", "prompt": "p"})), "spec.quality.probes.cases[0].tools", "needs tools"),
        (
            pilot(cases({"kind": "toolCall", "prompt": "p", "tools": [{"name": "f"}], "toolChoice": "g"})),
            "spec.quality.probes.cases[0].toolChoice",
            "auto, required or the name",
        ),
        (pilot(cases({"kind": "structured", "prompt": "p"})), "spec.quality.probes.cases[0].jsonSchema", "jsonSchema"),
        (
            pilot(cases({"kind": "stop", "prompt": "p", "maxTokens": 4, "minTokens": 8})),
            "spec.quality.probes.cases[0].minTokens",
            "must not exceed maxTokens",
        ),
        (pilot(None, cases({"kind": "greedy", "prompt": "p"})), "spec.quality.probes", "need quality.probes"),
        (
            pilot({"probes": {"prompts": ["p"]}}, cases({"kind": "structured", "prompt": "p"})),
            "spec.scopes[0].probes.cases[0].jsonSchema",
            "jsonSchema",
        ),
        (
            pilot(cases({"kind": "sampled", "prompt": "p", "score": {"builtin": "length"}})),
            "spec.quality.probes.cases[0].temperature",
            "a sampled case needs temperature",
        ),
        (
            pilot(cases({"kind": "greedy", "prompt": "p", "temperature": 0.7})),
            "spec.quality.probes.cases[0].temperature",
            "temperature is for sampled cases",
        ),
        (
            pilot(cases({"kind": "sampled", "prompt": "p", "temperature": 0.7})),
            "spec.quality.probes.cases[0].score",
            "a sampled case needs score",
        ),
        (
            pilot(cases({"kind": "stop", "prompt": "p", "score": {"builtin": "length"}})),
            "spec.quality.probes.cases[0].score",
            "score is for sampled cases",
        ),
        (
            pilot(cases(SAMPLED | {"score": {"builtin": "length", "webhook": {"url": "http://r.q.svc/score"}}})),
            "spec.quality.probes.cases[0].score",
            "exactly one of builtin",
        ),
        (pilot(cases(SAMPLED | {"score": {"better": "Lower"}})), "spec.quality.probes.cases[0].score", "exactly one"),
        (
            pilot(cases(SAMPLED | {"temperature": 0})),
            "spec.quality.probes.cases[0].temperature",
            "greater than 0",
        ),
        (pilot(cases(SAMPLED | {"repeats": 64})), "spec.quality.probes.cases[0].repeats", "less than or equal to 16"),
        (
            pilot({"probes": {"prompts": ["p"], "perRound": 0}}),
            "spec.quality.probes.perRound",
            "greater than or equal to 1",
        ),
        (
            pilot({"probes": {"prompts": ["p"], "perRound": 17}}),
            "spec.quality.probes.perRound",
            "less than or equal to 16",
        ),
        (
            pilot(cases(SAMPLED | {"score": {"builtin": "wordCount"}})),
            "spec.quality.probes.cases[0].score.builtin",
            "'length' or 'finishReason'",
        ),
    ],
    ids=[
        "nothing",
        "tools",
        "tool-choice",
        "schema",
        "min-tokens",
        "scope-without-pilot-probes",
        "scope-case",
        "sampled-without-temperature",
        "temperature-on-greedy",
        "sampled-without-score",
        "score-on-stop",
        "two-scores",
        "no-score-source",
        "temperature-zero",
        "too-many-repeats",
        "no-asks-per-round",
        "too-many-asks-per-round",
        "unknown-builtin",
    ],
)
def test_a_probe_case_that_cannot_be_sent_is_refused(body: dict[str, Any], field: str, message: str) -> None:
    problems = validate(body)
    assert any(p.field == field and message in p.message for p in problems), problems


def test_todays_prompts_and_every_kind_are_accepted() -> None:
    quality = {
        "probes": {
            "prompts": ["hello"],
            "cases": [
                {"kind": "greedy", "prompt": "p", "chat": True},
                {"kind": "stop", "prompt": "p", "stop": ["\\n\\n"], "minTokens": 2, "maxTokens": 32},
                {"kind": "toolCall", "prompt": "p", "tools": [{"name": "f", "parameters": {}}], "toolChoice": "f"},
                {"kind": "structured", "prompt": "p", "jsonSchema": {"type": "object"}},
                {"kind": "cancel", "prompt": "p", "afterChunks": 3, "settle": "5s"},
                SAMPLED,
                {
                    "kind": "sampled",
                    "prompt": "p",
                    "temperature": 1.2,
                    "repeats": 16,
                    "score": {
                        "webhook": {"url": "http://rater.quality.svc/score", "timeout": "30s", "metadata": {"r": "v3"}},
                        "better": "Lower",
                    },
                },
            ],
        }
    }
    assert validate(pilot(quality)) == []


def test_probes_without_prompts_or_cases_are_accepted_when_every_scope_has_its_own() -> None:
    body = pilot({"probes": {"interval": "5m"}}, cases({"kind": "greedy", "prompt": "p"}))
    assert validate(body) == []
    body["spec"]["scopes"].append({"name": "code"})  # a scope that would run quality.probes' cases: none
    problems = validate(body)
    assert [(p.field, p.message) for p in problems] == [
        ("spec.quality.probes", "set prompts or cases, unless every scope has its own probes.cases")
    ]


def test_the_probes_rule_is_the_specs_own_cel_rule_naming_the_field() -> None:
    rules = SpeculationPilotSpec.model_json_schema()["x-kubernetes-validations"]
    (rule,) = [r for r in rules if r["message"] == PROBES_GIVEN.message]
    assert rule["fieldPath"] == ".quality.probes"
    assert "self.scopes.all(s, has(s.probes))" in rule["rule"]
    assert "x-kubernetes-validations" not in Probes.model_json_schema()
