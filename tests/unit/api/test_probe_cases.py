"""Probe cases that cannot be sent are refused, naming the field and the fix."""

from __future__ import annotations

from typing import Any

import pytest

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
    ],
    ids=["nothing", "tools", "tool-choice", "schema", "min-tokens", "scope-without-pilot-probes", "scope-case"],
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
            ],
        }
    }
    assert validate(pilot(quality)) == []
