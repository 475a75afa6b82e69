"""vLLM 0.33's response bodies: model cards, whole completions and the SSE chunks of streamed ones.

Every field vLLM sends is present, nulls included, in vLLM's order. A chat answer that calls a tool
carries it as `message.tool_calls`, or streamed as `delta.tool_calls` entries.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from specpilot.mockvllm.answer_plan import Answer
from specpilot.mockvllm.config import ServeConfig
from specpilot.mockvllm.protocol import Generation
from specpilot.mockvllm.request import Request
from specpilot.mockvllm.tools import call_entry, finish_reason, message_content, new_call_id

ENGINE_DEAD_MESSAGE = "EngineCore encountered an issue. See stack trace (above) for the root cause."


def model_cards(config: ServeConfig, *, max_model_len: int, started: int) -> list[dict[str, Any]]:
    """`/v1/models`' card of each served name."""
    return [
        {
            "id": name,
            "object": "model",
            "created": started,
            "owned_by": "vllm",
            "root": config.model,
            "parent": None,
            "max_model_len": max_model_len,
            "permission": [
                {
                    "id": f"modelperm-{uuid.uuid4().hex}",
                    "object": "model_permission",
                    "created": started,
                    "allow_create_engine": False,
                    "allow_sampling": True,
                    "allow_logprobs": True,
                    "allow_search_indices": False,
                    "allow_view": True,
                    "allow_fine_tuning": False,
                    "organization": "*",
                    "group": None,
                    "is_blocking": False,
                }
            ],
        }
        for name in config.served_names
    ]


def head(response_id: str, kind: str, model_name: str) -> dict[str, Any]:
    """The fields every response body and chunk starts with; `kind` is its `object`."""
    return {"id": response_id, "object": kind, "created": int(time.time()), "model": model_name}


def usage(gen: Generation, req: Request) -> dict[str, Any]:
    return {
        "prompt_tokens": gen.prompt_tokens,
        "total_tokens": gen.prompt_tokens + req.output_tokens,
        "completion_tokens": req.output_tokens,
    }


def completion(gen: Generation, req: Request, *, response_id: str, model_name: str) -> dict[str, Any]:
    """The body of a whole (unstreamed) text completion."""
    choice = {
        "index": 0,
        "text": req.text,
        "logprobs": None,
        "finish_reason": str(req.finish_reason),
        "stop_reason": req.stop_reason,
        "token_ids": None,
        "prompt_logprobs": None,
        "prompt_token_ids": None,
        "routed_experts": None,
        "weight_versions": None,
    }
    return {
        **head(response_id, "text_completion", model_name),
        "choices": [choice],
        "service_tier": None,
        "system_fingerprint": None,
        "usage": _whole_usage(gen, req),
        "kv_transfer_params": None,
        "ec_transfer_params": None,
        "metrics": None,
    }


def chat_completion(
    gen: Generation, req: Request, answer: Answer, *, call: dict[str, Any] | None, response_id: str, model_name: str
) -> dict[str, Any]:
    """The body of a whole (unstreamed) chat completion; `call` is the tool call the answer made, if any."""
    message: dict[str, Any] = {
        "role": "assistant",
        "content": message_content(answer.tool, req.text),
        "refusal": None,
        "annotations": None,
        "audio": None,
        "function_call": None,
        "reasoning": None,
    }
    if call is not None:
        message["tool_calls"] = [call]  # vLLM leaves the key out when there are none
    choice = {
        "index": 0,
        "message": message,
        "logprobs": None,
        "finish_reason": finish_reason(answer.tool, called=call is not None, finish=str(req.finish_reason)),
        "stop_reason": req.stop_reason,
        "token_ids": None,
    }
    return {
        **head(response_id, "chat.completion", model_name),
        "choices": [choice],
        "service_tier": None,
        "system_fingerprint": None,
        "usage": _whole_usage(gen, req),
        "prompt_logprobs": None,
        "prompt_token_ids": None,
        "prompt_text": None,
        "kv_transfer_params": None,
        "metrics": None,
    }


def _whole_usage(gen: Generation, req: Request) -> dict[str, Any]:
    return {**usage(gen, req), "prompt_tokens_details": None, "completion_tokens_details": None}


async def stream_events(
    gen: Generation,
    req: Request,
    answer: Answer,
    *,
    response_id: str,
    model_name: str,
    parsed: Callable[[bool], None],
) -> AsyncIterator[bytes]:
    """The SSE payloads of one streamed request, one chunk per engine step that has something to say;
    `parsed` is told of each chat delta the tool parser runs on, whether it carries a tool call."""
    chat = gen.kind == "chat"
    tool = answer.tool if chat else None
    call_id = new_call_id()
    base = head(response_id, "chat.completion.chunk" if chat else "text_completion", model_name)

    def chunk(choices: list[dict[str, Any]], usage: dict[str, Any] | None) -> bytes:
        body: dict[str, Any] = {**base, "choices": choices}
        if usage is not None:
            body["usage"] = usage
        return json.dumps(body).encode()

    first = True
    sent = 0  # model text streamed so far
    called = False
    while not req.done or first:
        delta = await req.next_text()
        if req.aborted:
            error = {"message": ENGINE_DEAD_MESSAGE, "type": "InternalServerError", "param": None, "code": 500}
            yield json.dumps({"error": error}).encode()
            break
        running_usage = usage(gen, req) if gen.continuous_usage else None
        if chat and first:
            role = {"role": "assistant", "content": ""}
            yield chunk([{"index": 0, "delta": role, "logprobs": None, "finish_reason": None}], running_usage)
        first = False
        if not delta and not req.done:
            continue
        message: dict[str, Any] = {"content": delta}
        if tool is not None:
            entry = call_entry(tool, call_id, sent, sent + len(delta))
            called = called or entry is not None
            message = {"tool_calls": [entry]} if entry is not None else {}
        sent += len(delta)
        if chat:
            parsed("tool_calls" in message)
        if not message and not req.done:
            continue  # model text around the call's arguments shows nothing
        choice: dict[str, Any] = {"index": 0, "delta": message} if chat else {"index": 0, "text": delta}
        choice.update(logprobs=None, finish_reason=None)
        if req.done:
            finish = finish_reason(tool, called=called, finish=str(req.finish_reason))
            choice.update(finish_reason=finish, stop_reason=req.stop_reason)
        yield chunk([choice], running_usage)
    if req.finish_reason is not None and gen.include_usage:
        yield chunk([], usage(gen, req))
    yield b"[DONE]"
