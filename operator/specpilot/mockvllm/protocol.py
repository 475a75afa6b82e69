"""What a completion or chat request asks for, validated as vLLM 0.33's protocol and SamplingParams do.

Pure: a request body in, a frozen `Generation` out, or `BadRequest` with vLLM's message. Besides
the prompt and sampling limits this covers stop conditions (`stop`, `stop_token_ids`,
`include_stop_str_in_output`, `min_tokens`), tools (`tools`, `tool_choice`, and the server's
`--tool-call-parser` / `--enable-auto-tool-choice`) and structured outputs (`response_format`
json_object / json_schema, or the `structured_outputs` extra parameter's json / json_object /
choice; regex, grammar and structural tags are not modelled and are refused).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specpilot.mockvllm.config import EngineLimits
from specpilot.mockvllm.schemavalues import conforming
from specpilot.mockvllm.textgen import chat_prompt, count_tokens
from specpilot.mockvllm.tools import Tool, ToolChoice, ToolMode

_CHAT_ROLES = {"system", "developer", "user", "assistant", "tool"}
_NAMED_USAGE = 'Correct usage: `{"type": "function", "function": {"name": "my_function"}}`'
_UNMODELLED = ("regex", "grammar", "structural_tag")
NO_TOOLS = ToolChoice(ToolMode.NONE)


class BadRequest(Exception):
    """A request vLLM would answer with an error status."""

    def __init__(self, message: str, status: int = 400, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.param = param


@dataclass(frozen=True)
class StructuredOutput:
    """A constraint on the answer: a JSON schema, or one of fixed strings."""

    schema: Mapping[str, Any] | None = None
    choices: tuple[str, ...] = ()


@dataclass(frozen=True)
class Generation:
    """A validated completion or chat request."""

    kind: str  # "completion" or "chat"
    prompt: str
    prompt_tokens: int
    max_tokens: int
    temperature: float
    seed: int | None
    stop: tuple[str, ...]
    ignore_eos: bool
    stream: bool
    include_usage: bool
    continuous_usage: bool
    min_tokens: int = 0
    stop_token_ids: frozenset[int] = frozenset()
    include_stop_str_in_output: bool = False
    tools: tuple[Tool, ...] = ()
    tool_choice: ToolChoice = NO_TOOLS
    last_user_text: str | None = None  # the last message's text, when it is the user's
    structured: StructuredOutput | None = None


def _number(body: Mapping[str, Any], key: str, default: float | None) -> float | None:
    value = body.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadRequest(f"'{key}' must be a number, got {value!r}", param=key)
    return float(value)


def _integer(body: Mapping[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise BadRequest(f"'{key}' must be an integer, got {value!r}", param=key)
    return value


def _completion_prompt(body: Mapping[str, Any]) -> tuple[str, int]:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if isinstance(prompt, str):
        if not prompt:
            raise BadRequest("Prompt cannot be empty", param="prompt")
        return prompt, count_tokens(prompt)
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return " ".join(map(str, prompt)), len(prompt)
    if isinstance(prompt, list) and len(prompt) > 1:
        raise BadRequest("this server takes one prompt per request", param="prompt")
    raise BadRequest("'prompt' must be a string, a list of token ids, or a list with one of those", param="prompt")


def _rendered_tool_calls(index: int, calls: Any) -> str:
    """An assistant turn's earlier tool calls as the template writes them."""
    if calls is None:
        return ""
    if not isinstance(calls, list):
        raise BadRequest(f"messages[{index}].tool_calls must be a list", param="messages")
    parts = []
    for call in calls:
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            raise BadRequest(f"messages[{index}].tool_calls entries need function.name", param="messages")
        name = json.dumps(function["name"], ensure_ascii=False)
        parts.append(f'<tool_call>\n{{"name": {name}, "arguments": {function.get("arguments")}}}\n</tool_call>')
    return "\n".join(parts)


def _messages(body: Mapping[str, Any]) -> list[tuple[str, str]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list", param="messages")
    rendered: list[tuple[str, str]] = []
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping) or message.get("role") not in _CHAT_ROLES:
            raise BadRequest(f"messages[{index}] needs a 'role' in {sorted(_CHAT_ROLES)}", param="messages")
        content = message.get("content")
        if isinstance(content, list):
            texts = [p.get("text") if isinstance(p, Mapping) and p.get("type") == "text" else None for p in content]
            if not all(isinstance(t, str) for t in texts):
                raise BadRequest(f"messages[{index}].content: only text parts are supported", param="messages")
            content = "".join(str(t) for t in texts)
        if content is not None and not isinstance(content, str):
            raise BadRequest(f"messages[{index}].content must be a string or text parts", param="messages")
        calls = _rendered_tool_calls(index, message.get("tool_calls"))
        rendered.append((str(message["role"]), "\n".join(filter(None, (content, calls)))))
    return rendered


def _tools(body: Mapping[str, Any]) -> tuple[tuple[Tool, ...], tuple[Mapping[str, Any], ...]]:
    """The offered functions, and the tool definitions as the template renders them."""
    raw = body.get("tools")
    if raw is None:
        return (), ()
    if raw == []:
        raise BadRequest(
            "`tools` must not be an empty array. Either provide at least one tool or omit the field entirely.",
            param="tools",
        )
    if not isinstance(raw, list):
        raise BadRequest("`tools` must be a list of function tools", param="tools")
    tools = []
    for index, tool in enumerate(raw):
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if (
            not isinstance(function, Mapping)
            or tool.get("type", "function") != "function"
            or not isinstance(function.get("name"), str)
        ):
            raise BadRequest(
                f"tools[{index}] must be {{'type': 'function', 'function': {{'name': ...}}}}", param="tools"
            )
        parameters = function.get("parameters") or {}
        if not isinstance(parameters, Mapping):
            raise BadRequest(f"tools[{index}].function.parameters must be a JSON schema object", param="tools")
        _check_schema(parameters, "tools")
        tools.append(Tool(name=function["name"], parameters=parameters))
    return tuple(tools), tuple(raw)


def _tool_choice(body: Mapping[str, Any], tools: tuple[Tool, ...], *, parser: str | None, auto: bool) -> ToolChoice:
    """`tool_choice` as vLLM's request validation and its renderer's server checks take it."""
    raw = body.get("tool_choice", "auto" if tools else "none")
    if raw is None:
        return ToolChoice(ToolMode.AUTO) if tools and auto else NO_TOOLS
    if raw == "none":
        return NO_TOOLS
    if not tools:
        raise BadRequest("When using `tool_choice`, `tools` must be set.", param="tool_choice")
    if isinstance(raw, Mapping):
        function = raw.get("function")
        if not isinstance(function, Mapping):
            raise BadRequest(
                f"Invalid value for `function`: `{function}` in `tool_choice`! {_NAMED_USAGE}",
                param="tool_choice.function",
            )
        if "name" not in function:
            raise BadRequest(
                f"Expected field `name` in `function` in `tool_choice`! {_NAMED_USAGE}",
                param="tool_choice.function.name",
            )
        name = function["name"]
        if not isinstance(name, str) or not name:
            raise BadRequest(
                f"Invalid `name` in `function`: `{name}` in `tool_choice`! {_NAMED_USAGE}",
                param="tool_choice.function.name",
            )
        if name not in {tool.name for tool in tools}:
            raise BadRequest(
                "The tool specified in `tool_choice` does not match any of the specified `tools`",
                param="tool_choice",
            )
        choice = ToolChoice(ToolMode.NAMED, name)
    elif raw in ("auto", "required"):
        choice = ToolChoice(ToolMode(raw))
    else:
        raise BadRequest(
            f'Invalid value for `tool_choice`: {raw}! Only named tools, "none", "auto" or "required" are supported.',
            param="tool_choice",
        )
    if parser is None and choice.mode is ToolMode.AUTO:
        raise BadRequest('"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set')
    if parser is None:
        wanted = f'function "{choice.name}"' if choice.mode is ToolMode.NAMED else f'"{choice.mode}"'
        raise BadRequest(f"tool_choice={wanted} requires --tool-call-parser to be set")
    if choice.mode is ToolMode.AUTO and not auto:
        return NO_TOOLS  # a parser without auto tool choice answers in plain text
    return choice


def _check_schema(schema: Mapping[str, Any], param: str) -> None:
    try:
        conforming(schema, 0)
    except (KeyError, TypeError, ValueError, IndexError, RecursionError) as exc:
        raise BadRequest(f"Invalid JSON schema: {exc}", param=param) from None


def _structured(body: Mapping[str, Any], choice: ToolChoice) -> StructuredOutput | None:
    """`structured_outputs`, with `response_format` overriding it as vLLM merges them."""
    extra = body.get("structured_outputs")
    if extra is not None and not isinstance(extra, Mapping):
        raise BadRequest("'structured_outputs' must be an object", param="structured_outputs")
    extra = dict(extra or {})
    kinds = [key for key in ("json", "regex", "choice") if extra.get(key) is not None]
    if len(kinds) > 1:
        raise BadRequest(
            "You can only use one kind of constraints for structured outputs ('json', 'regex' or 'choice')."
        )
    if kinds and choice.mode is ToolMode.NAMED:
        raise BadRequest("You can only either use constraints for structured outputs or tools, not both.")
    response_format = body.get("response_format")
    if response_format is not None:
        kind = response_format.get("type") if isinstance(response_format, Mapping) else None
        if kind == "json_object":
            extra["json_object"] = True
        elif kind == "json_schema":
            spec = response_format.get("json_schema")
            if not isinstance(spec, Mapping):
                raise BadRequest(
                    "When response_format type is 'json_schema', the 'json_schema' field must be provided.",
                    param="response_format",
                )
            extra["json"] = spec.get("schema") or {}
        elif kind != "text":
            raise BadRequest(f"response_format type {kind!r} is not modelled by the mock", param="response_format")
    unmodelled = [key for key in _UNMODELLED if extra.get(key) is not None]
    if unmodelled:
        raise BadRequest(f"structured_outputs.{unmodelled[0]} is not modelled by the mock", param="structured_outputs")
    schema = extra.get("json")
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as exc:
            raise BadRequest(f"structured_outputs.json is not valid JSON: {exc}", param="structured_outputs") from None
    if schema is not None:
        if not isinstance(schema, Mapping):
            raise BadRequest("the JSON schema must be an object", param="response_format")
        _check_schema(schema, "response_format")
        return StructuredOutput(schema=schema)
    if extra.get("json_object"):
        return StructuredOutput(schema={"type": "object"})
    choices = extra.get("choice")
    if choices is not None:
        if not isinstance(choices, list) or not choices or not all(isinstance(c, str) for c in choices):
            raise BadRequest(
                "structured_outputs.choice must be a non-empty list of strings", param="structured_outputs"
            )
        return StructuredOutput(choices=tuple(choices))
    return None


def _stop(body: Mapping[str, Any]) -> tuple[tuple[str, ...], frozenset[int]]:
    stop = body.get("stop") or ()
    if isinstance(stop, str):
        stop = (stop,)
    if not isinstance(stop, list | tuple) or not all(isinstance(s, str) and s for s in stop):
        raise BadRequest("'stop' must be a string or a list of non-empty strings", param="stop")
    ids = body.get("stop_token_ids") or []
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise BadRequest(f"stop_token_ids must contain only integers, got {ids}.", param="stop_token_ids")
    return tuple(stop), frozenset(ids)


def parse_generation(
    kind: str,
    body: Any,
    limits: EngineLimits,
    *,
    force_usage: bool,
    tool_parser: str | None = None,
    auto_tools: bool = False,
) -> Generation:
    """Validate a completion or chat body the way vLLM's protocol and SamplingParams do."""
    if not isinstance(body, Mapping):
        raise BadRequest("the request body must be a JSON object")
    tools: tuple[Tool, ...] = ()
    choice = NO_TOOLS
    last_user_text = None
    if kind == "completion":
        prompt, prompt_tokens = _completion_prompt(body)
    else:
        messages = _messages(body)
        tools, definitions = _tools(body)
        choice = _tool_choice(body, tools, parser=tool_parser, auto=auto_tools)
        prompt, prompt_tokens = chat_prompt(messages, definitions)
        role, text = messages[-1]
        last_user_text = text if role == "user" else None
    temperature = _sampling(body)
    max_tokens = _max_tokens(kind, body, limits, prompt_tokens)
    min_tokens = _min_tokens(body, max_tokens)
    stop, stop_token_ids = _stop(body)
    stream, options = _stream_options(body)
    return Generation(
        kind=kind,
        prompt=prompt,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        temperature=1.0 if temperature is None else temperature,
        seed=_integer(body, "seed"),
        stop=stop,
        ignore_eos=bool(body.get("ignore_eos", False)),
        stream=bool(stream),
        include_usage=bool(options.get("include_usage")) or force_usage,
        continuous_usage=bool(options.get("continuous_usage_stats")),
        min_tokens=min_tokens,
        stop_token_ids=stop_token_ids,
        include_stop_str_in_output=bool(body.get("include_stop_str_in_output", False)),
        tools=tools,
        tool_choice=choice,
        last_user_text=last_user_text,
        structured=_structured(body, choice),
    )


def _sampling(body: Mapping[str, Any]) -> float | None:
    """Check `n`, `temperature` and `top_p`; the temperature asked for (None: the default)."""
    if (_integer(body, "n") or 1) != 1:
        raise BadRequest("this server supports n=1 only", param="n")
    temperature = _number(body, "temperature", 1.0)
    if temperature is not None and temperature < 0:
        raise BadRequest(f"temperature must be non-negative, got {temperature}.", param="temperature")
    top_p = _number(body, "top_p", 1.0)
    if top_p is not None and not 0 < top_p <= 1:
        raise BadRequest(f"top_p must be in (0, 1], got {top_p}.", param="top_p")
    return temperature


def _max_tokens(kind: str, body: Mapping[str, Any], limits: EngineLimits, prompt_tokens: int) -> int:
    """The tokens a request may generate: as asked, within the context left after its prompt."""
    requested = _integer(body, "max_completion_tokens") if kind == "chat" else None
    if requested is None:
        requested = _integer(body, "max_tokens")
    if requested is None and kind == "completion":
        requested = 16
    if requested is not None and requested < 1:
        raise BadRequest(f"max_tokens must be at least 1, got {requested}.", param="max_tokens")
    length = limits.max_model_len
    if prompt_tokens >= length:
        raise BadRequest(
            f"This model's maximum context length is {length} tokens. However, your request has "
            f"{prompt_tokens} input tokens. Please reduce the length of the input messages."
        )
    if requested is not None and requested > length - prompt_tokens:
        raise BadRequest(
            f"'max_tokens' or 'max_completion_tokens' is too large: {requested}. This model's maximum "
            f"context length is {length} tokens and your request has {prompt_tokens} input tokens "
            f"({requested} > {length} - {prompt_tokens}).",
            param="max_tokens",
        )
    return requested if requested is not None else length - prompt_tokens


def _min_tokens(body: Mapping[str, Any], max_tokens: int) -> int:
    min_tokens = _integer(body, "min_tokens") or 0
    if min_tokens < 0:
        raise BadRequest(f"min_tokens must be greater than or equal to 0, got {min_tokens}.", param="min_tokens")
    if min_tokens > max_tokens:
        raise BadRequest(
            f"min_tokens must be less than or equal to max_tokens={max_tokens}, got {min_tokens}.", param="min_tokens"
        )
    return min_tokens


def _stream_options(body: Mapping[str, Any]) -> tuple[Any, Mapping[str, Any]]:
    """`stream` as sent, and its `stream_options` (only with `stream=True`)."""
    stream = body.get("stream", False)
    options = body.get("stream_options")
    if options is not None and not stream:
        raise BadRequest("Stream options can only be defined when `stream=True`.", param="stream_options")
    return stream, options if isinstance(options, Mapping) else {}
