"""HTTP helpers for the mock's component tests: whole answers, SSE streams, fault injection."""

from __future__ import annotations

import json
from typing import Any

import aiohttp

FAST = ("--time-scale", "0.01")
TOOL_FLAGS = ("--tool-call-parser", "hermes", "--enable-auto-tool-choice")
WEATHER_PARAMETERS = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 2},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "unit": {"enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "days"],
    "additionalProperties": False,
}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_PARAMETERS}}
CLOCK = {"type": "function", "function": {"name": "current_time", "parameters": {"type": "object", "properties": {}}}}
TOOLS = [WEATHER, CLOCK]


async def post(url: str, body: Any, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.post(url, json=body, headers=headers) as response:
        return response.status, await response.json()


async def events(url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON events of an SSE response, checked to end with `data: [DONE]`."""
    async with aiohttp.ClientSession() as session, session.post(url, json={**body, "stream": True}) as response:
        assert response.status == 200, await response.text()
        raw = (await response.read()).decode()
    blocks = [block.removeprefix("data: ") for block in raw.split("\n\n") if block]
    assert blocks[-1] == "[DONE]"
    return [json.loads(block) for block in blocks[:-1]]


def streamed_text(chunks: list[dict[str, Any]]) -> str:
    """The text of a streamed chat or completion."""
    return "".join(
        choice["delta"].get("content") or "" if "delta" in choice else choice["text"]
        for chunk in chunks
        for choice in chunk["choices"]
    )


def finish(chunks: list[dict[str, Any]]) -> tuple[str, Any]:
    """(finish_reason, stop_reason) of the stream's terminal chunk."""
    last = next(c["choices"][0] for c in reversed(chunks) if c["choices"] and c["choices"][0]["finish_reason"])
    return last["finish_reason"], last["stop_reason"]


async def inject(admin_url: str, fault: dict[str, Any]) -> None:
    status, body = await post(admin_url + "/faults", fault)
    assert status == 201, body
