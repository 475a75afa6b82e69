"""Request validation: stop conditions, tools and structured outputs, with vLLM 0.33's messages."""

from __future__ import annotations

import json
from typing import Any

import pytest

from specpilot.mockvllm.config import EngineLimits
from specpilot.mockvllm.protocol import BadRequest, Generation, StructuredOutput, parse_generation
from specpilot.mockvllm.textgen import CHAT_GENERATION_PROMPT, CHAT_MESSAGE_OVERHEAD, TOOLS_PREAMBLE, count_tokens
from specpilot.mockvllm.tools import ToolChoice, ToolMode

LIMITS = EngineLimits(
    num_gpu_blocks=1000,
    block_size=16,
    max_model_len=4096,
    max_num_seqs=16,
    max_num_batched_tokens=8192,
    num_speculative_tokens=0,
)
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
HI = [{"role": "user", "content": "hi"}]
PARSER = {"tool_parser": "hermes", "auto_tools": True}


def chat(body: dict[str, Any], **server: Any) -> Generation:
    return parse_generation("chat", {"messages": HI, **body}, LIMITS, force_usage=False, **server)


def test_stop_conditions_are_read() -> None:
    gen = chat({"stop": "END", "stop_token_ids": [7, 9], "min_tokens": 3, "include_stop_str_in_output": True})
    assert (gen.stop, gen.stop_token_ids, gen.min_tokens, gen.include_stop_str_in_output) == (
        ("END",),
        frozenset({7, 9}),
        3,
        True,
    )


@pytest.mark.parametrize(
    ("body", "server", "message"),
    [
        ({"min_tokens": -1}, {}, "min_tokens must be greater than or equal to 0, got -1."),
        ({"min_tokens": 9, "max_tokens": 5}, {}, "min_tokens must be less than or equal to max_tokens=5, got 9."),
        ({"stop_token_ids": ["x"]}, {}, "stop_token_ids must contain only integers"),
        ({"tools": []}, {}, "`tools` must not be an empty array."),
        ({"tool_choice": "auto"}, {}, "When using `tool_choice`, `tools` must be set."),
        ({"tools": [WEATHER], "tool_choice": "any"}, PARSER, "Invalid value for `tool_choice`: any!"),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "other"}}},
            PARSER,
            "The tool specified in `tool_choice` does not match any of the specified `tools`",
        ),
        (
            {"tools": [WEATHER]},
            {},
            '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
        ),
        ({"tools": [WEATHER], "tool_choice": "required"}, {}, 'tool_choice="required" requires --tool-call-parser'),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
            {},
            'tool_choice=function "get_weather" requires --tool-call-parser to be set',
        ),
        (
            {
                "tools": [WEATHER],
                "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
                "structured_outputs": {"json": {"type": "object"}},
            },
            PARSER,
            "You can only either use constraints for structured outputs or tools, not both.",
        ),
        ({"structured_outputs": {"json": {}, "choice": ["a"]}}, {}, "only use one kind of constraints"),
        ({"response_format": {"type": "json_schema"}}, {}, "the 'json_schema' field must be provided"),
        ({"structured_outputs": {"regex": "a+"}}, {}, "structured_outputs.regex is not modelled by the mock"),
        ({"response_format": {"type": "json_schema", "json_schema": {"schema": {"$ref": "#/x"}}}}, {}, "Invalid JSON"),
    ],
    ids=[
        "min-tokens-negative",
        "min-over-max",
        "stop-ids-not-ints",
        "empty-tools",
        "choice-without-tools",
        "choice-unknown",
        "named-unknown",
        "auto-needs-flags",
        "required-needs-parser",
        "named-needs-parser",
        "named-and-constraint",
        "two-constraints",
        "schema-missing",
        "regex-unmodelled",
        "bad-ref",
    ],
)
def test_bad_requests_name_the_problem_as_vllm_does(body: dict[str, Any], server: dict[str, Any], message: str) -> None:
    with pytest.raises(BadRequest) as raised:
        chat(body, **server)
    assert message in str(raised.value) and raised.value.status == 400


@pytest.mark.parametrize(
    ("body", "server", "choice"),
    [
        ({}, {}, ToolChoice(ToolMode.NONE)),
        ({"tools": [WEATHER]}, PARSER, ToolChoice(ToolMode.AUTO)),
        ({"tools": [WEATHER], "tool_choice": "none"}, {}, ToolChoice(ToolMode.NONE)),
        ({"tools": [WEATHER], "tool_choice": None}, {}, ToolChoice(ToolMode.NONE)),
        ({"tools": [WEATHER], "tool_choice": "auto"}, {"tool_parser": "hermes"}, ToolChoice(ToolMode.NONE)),
        ({"tools": [WEATHER], "tool_choice": "required"}, {"tool_parser": "hermes"}, ToolChoice(ToolMode.REQUIRED)),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
            {"tool_parser": "hermes"},
            ToolChoice(ToolMode.NAMED, "get_weather"),
        ),
    ],
    ids=["no-tools", "default-auto", "none", "null", "auto-without-auto-flag", "required", "named"],
)
def test_tool_choice_defaults_and_server_flags(
    body: dict[str, Any], server: dict[str, Any], choice: ToolChoice
) -> None:
    assert chat(body, **server).tool_choice == choice


def test_the_template_counts_roles_separators_and_the_tool_definitions() -> None:
    plain = chat({})
    assert plain.prompt_tokens == CHAT_MESSAGE_OVERHEAD + count_tokens("hi") + CHAT_GENERATION_PROMPT
    with_tools = chat({"tools": [WEATHER]}, **PARSER)
    assert "<tools>" in with_tools.prompt and '"get_weather"' in with_tools.prompt
    tools_turn = CHAT_MESSAGE_OVERHEAD + count_tokens(TOOLS_PREAMBLE.format(tools=json.dumps(WEATHER)))
    assert with_tools.prompt_tokens == plain.prompt_tokens + tools_turn


def test_earlier_tool_calls_and_results_count_in_the_prompt() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}
    messages = [
        *HI,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    gen = parse_generation("chat", {"messages": messages}, LIMITS, force_usage=False)
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>' in gen.prompt
    assert gen.last_user_text is None  # the last turn is the tool's


@pytest.mark.parametrize(
    ("body", "structured"),
    [
        ({"response_format": {"type": "text"}}, None),
        ({"response_format": {"type": "json_object"}}, StructuredOutput(schema={"type": "object"})),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "array"}}}},
            StructuredOutput(schema={"type": "array"}),
        ),
        ({"structured_outputs": {"json": '{"type": "integer"}'}}, StructuredOutput(schema={"type": "integer"})),
        ({"structured_outputs": {"json_object": True}}, StructuredOutput(schema={"type": "object"})),
        ({"structured_outputs": {"choice": ["yes", "no"]}}, StructuredOutput(choices=("yes", "no"))),
        (
            {"structured_outputs": {"choice": ["yes"]}, "response_format": {"type": "json_object"}},
            StructuredOutput(schema={"type": "object"}),
        ),
    ],
    ids=["text", "json-object", "json-schema", "extra-json", "extra-json-object", "choice", "format-overrides"],
)
def test_structured_outputs_as_vllm_merges_them(body: dict[str, Any], structured: StructuredOutput | None) -> None:
    assert chat(body).structured == structured
