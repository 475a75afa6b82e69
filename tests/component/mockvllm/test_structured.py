"""Structured outputs over real HTTP: documents valid against the request's schema, whole and streamed."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from tests.component.mockvllm.client import FAST, WEATHER_PARAMETERS, events, finish, post, streamed_text

REPORT = {
    "type": "object",
    "properties": {
        "summary": {"type": "string", "maxLength": 30},
        "severity": {"enum": ["low", "medium", "high"]},
        "count": {"type": "integer", "minimum": 0},
        "ratio": {"type": "number", "minimum": 0, "maximum": 1},
        "resolved": {"type": "boolean"},
        "items": {"type": "array", "items": WEATHER_PARAMETERS, "minItems": 1, "maxItems": 2},
    },
    "required": ["summary", "severity", "count", "ratio", "resolved", "items"],
    "additionalProperties": False,
}
FORMATS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "json_schema": (
        {"response_format": {"type": "json_schema", "json_schema": {"name": "report", "schema": REPORT}}},
        REPORT,
    ),
    "json_object": ({"response_format": {"type": "json_object"}}, {"type": "object"}),
    "structured_outputs": ({"structured_outputs": {"json": REPORT}}, REPORT),
}


@pytest.mark.parametrize("kind", FORMATS, ids=FORMATS.keys())
async def test_a_structured_answer_validates_whole_and_streamed(mock_vllm: Any, kind: str) -> None:
    mock = await mock_vllm(*FAST)
    constraint, schema = FORMATS[kind]
    body = {"messages": [{"role": "user", "content": "Report the incident."}], "temperature": 0, **constraint}
    status, answer = await post(mock.url + "/v1/chat/completions", body)
    assert status == 200
    choice = answer["choices"][0]
    document = json.loads(choice["message"]["content"])
    jsonschema.validate(document, schema)
    assert (choice["finish_reason"], choice["stop_reason"]) == ("stop", None)  # the document ends the answer
    assert answer["usage"]["completion_tokens"] > len(choice["message"]["content"]) // 8

    chunks = await events(mock.url + "/v1/chat/completions", body)
    assert json.loads(streamed_text(chunks)) == document  # greedy: the same document
    assert finish(chunks) == ("stop", None)


async def test_a_text_completion_takes_a_schema_too(mock_vllm: Any) -> None:
    mock = await mock_vllm(*FAST)
    schema = {"type": "array", "items": {"type": "integer"}, "minItems": 2}
    body = {
        "prompt": "numbers:",
        "max_tokens": 200,
        "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}},
    }
    _, answer = await post(mock.url + "/v1/completions", body)
    jsonschema.validate(json.loads(answer["choices"][0]["text"]), schema)


async def test_a_choice_constraint_answers_one_of_the_choices(mock_vllm: Any) -> None:
    mock = await mock_vllm(*FAST)
    body = {
        "messages": [{"role": "user", "content": "Is the deploy healthy?"}],
        "structured_outputs": {"choice": ["healthy", "degraded"]},
    }
    answers = {
        (await post(mock.url + "/v1/chat/completions", body))[1]["choices"][0]["message"]["content"] for _ in range(6)
    }
    assert answers <= {"healthy", "degraded"}


async def test_max_tokens_cuts_a_document_as_it_cuts_any_answer(mock_vllm: Any) -> None:
    mock = await mock_vllm(*FAST)
    constraint, _ = FORMATS["json_schema"]
    body = {"messages": [{"role": "user", "content": "Report."}], "max_tokens": 5, "temperature": 0, **constraint}
    _, answer = await post(mock.url + "/v1/chat/completions", body)
    choice = answer["choices"][0]
    assert (choice["finish_reason"], choice["stop_reason"], answer["usage"]["completion_tokens"]) == ("length", None, 5)
    with pytest.raises(json.JSONDecodeError):
        json.loads(choice["message"]["content"])


async def test_the_guided_fields_vllm_removed_constrain_nothing(mock_vllm: Any) -> None:
    mock = await mock_vllm(*FAST)
    body = {"messages": [{"role": "user", "content": "JSON please"}], "max_tokens": 6, "guided_json": REPORT}
    status, answer = await post(mock.url + "/v1/chat/completions", body)
    assert status == 200 and len(answer["choices"][0]["message"]["content"].split()) == 6  # plain text
