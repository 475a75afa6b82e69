"""Request construction: prompt sizes, scope tags and greedy bodies of exact length."""

from __future__ import annotations

from specpilot.loadgen.sender import Target, make_prompt, request_body
from specpilot.loadgen.workload import PlannedRequest
from specpilot.mockvllm.textgen import count_tokens, scope_tag

PLANNED = PlannedRequest(at=0.0, scope="code", input_tokens=300, output_tokens=42, deadline_s=5.0)


def test_prompts_have_about_the_planned_size_and_carry_the_scope() -> None:
    prompt = make_prompt(PLANNED, 17, tag=True)
    assert count_tokens(prompt) == 300
    assert scope_tag(prompt) == "code"
    assert make_prompt(PLANNED, 18, tag=True) != prompt
    untagged = make_prompt(PLANNED, 17, tag=False)
    assert scope_tag(untagged) is None and count_tokens(untagged) == 300


def test_a_trace_prompt_is_sent_as_is() -> None:
    planned = PlannedRequest(at=0.0, scope="code", input_tokens=3, output_tokens=4, prompt="exact words")
    assert make_prompt(planned, 0, tag=True) == "exact words"


def test_bodies_ask_for_exactly_the_planned_output() -> None:
    chat = request_body(Target(base_url="http://x", model="m"), PLANNED, "hi")
    assert chat["messages"] == [{"role": "user", "content": "hi"}]
    assert (chat["max_tokens"], chat["ignore_eos"], chat["temperature"], chat["stream"]) == (42, True, 0, True)
    assert chat["stream_options"] == {"include_usage": True}
    completion = request_body(
        Target(base_url="http://x", model="m", endpoint="completions", stream=False), PLANNED, "hi"
    )
    assert completion["prompt"] == "hi" and "stream_options" not in completion
