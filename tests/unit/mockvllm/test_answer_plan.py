"""Answer planning: a tool call beats a structured document beats free text; slips bend them."""

from __future__ import annotations

import json
from dataclasses import replace

import jsonschema
import pytest

from specpilot.mockvllm.answer_plan import OFF_CHOICE, Slips, document, plan
from specpilot.mockvllm.protocol import Generation, StructuredOutput
from specpilot.mockvllm.textgen import ScriptedTokens, TokenSource
from specpilot.mockvllm.tools import Tool, ToolChoice, ToolMode

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
TOOL = Tool("lookup", {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]})
BASE = Generation(
    kind="chat",
    prompt="p",
    prompt_tokens=1,
    max_tokens=100,
    temperature=0.0,
    seed=None,
    stop=(),
    ignore_eos=False,
    stream=False,
    include_usage=False,
    continuous_usage=False,
)


def text(tokens: ScriptedTokens | TokenSource) -> str:
    return "".join(tokens.piece(i) for i in range(tokens.eos_at))


def answer_text(gen: Generation, slips: Slips | None = None) -> tuple[str, bool]:
    answer = plan(gen, seed=9, mean_length=20, diverge_at=None, slips=slips or Slips())
    return text(answer.tokens), answer.tool is not None


def test_free_text_without_tools_or_constraints() -> None:
    answer = plan(BASE, seed=9, mean_length=20, diverge_at=None, slips=Slips())
    assert isinstance(answer.tokens, TokenSource) and answer.tool is None


def test_a_loop_slip_bends_free_text_only() -> None:
    looping = Slips(loop_at=4)
    answer = plan(BASE, seed=9, mean_length=20, diverge_at=None, slips=looping)
    words = [answer.tokens.piece(i) for i in range(40)]
    assert len(set(words[4:])) <= 3 and answer.tokens.eos_at > 10**9
    structured = replace(BASE, structured=StructuredOutput(schema=SCHEMA))
    assert answer_text(structured, looping) == answer_text(structured)


def test_a_tool_call_wins_over_a_structured_answer() -> None:
    gen = replace(
        BASE,
        tools=(TOOL,),
        tool_choice=ToolChoice(ToolMode.REQUIRED),
        structured=StructuredOutput(schema=SCHEMA),
    )
    raw, called = answer_text(gen)
    assert called and raw.startswith('[{"name": "lookup", "parameters": ')
    unmentioned = replace(gen, tool_choice=ToolChoice(ToolMode.AUTO), last_user_text="no tool here")
    raw, called = answer_text(unmentioned)
    assert not called
    jsonschema.validate(json.loads(raw), SCHEMA)


def test_a_tool_json_slip_breaks_only_the_arguments() -> None:
    gen = replace(BASE, tools=(TOOL,), tool_choice=ToolChoice(ToolMode.NAMED, "lookup"))
    raw, _ = answer_text(gen, Slips(tool_json=True))
    with pytest.raises(json.JSONDecodeError):
        json.loads(raw)
    assert raw.startswith('{"q": ')


@pytest.mark.parametrize(
    "structured",
    [StructuredOutput(schema=SCHEMA), StructuredOutput(schema={"type": "object"}), StructuredOutput(schema={})],
    ids=["required", "json-object", "anything"],
)
def test_structured_documents_validate_unless_a_slip_breaks_them(structured: StructuredOutput) -> None:
    assert structured.schema is not None
    validator = jsonschema.Draft202012Validator(structured.schema)
    assert validator.is_valid(json.loads(document(structured, 4)))
    broken = document(structured, 4, invalid=True)
    try:
        assert not validator.is_valid(json.loads(broken))
    except json.JSONDecodeError:
        assert structured.schema == {}  # nothing to violate: the document is cut instead


def test_a_choice_is_one_of_the_choices_or_none_of_them() -> None:
    structured = StructuredOutput(choices=("yes", "no"))
    assert {document(structured, seed) for seed in range(20)} == {"yes", "no"}
    assert document(structured, 1, invalid=True) == OFF_CHOICE
