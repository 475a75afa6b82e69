"""One request against an OpenAI-compatible server, measured from the client's side.

TTFT is the time to the first chunk that carries text, e2e the time to the end of the stream,
and the output token count comes from the usage the server reports. Every way a request can go
wrong is an outcome, not an exception: timeouts, rejections (429/503) and errors are counted.
"""

from __future__ import annotations

import asyncio
import enum
import json
import time
from dataclasses import dataclass
from typing import Any

import aiohttp

from specpilot.loadgen.workload import PlannedRequest
from specpilot.wire.names import SCOPE_HEADER

REJECTION_STATUSES = frozenset({429, 503})
_FILLER = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda", "mu")


class Status(enum.StrEnum):
    """How a request ended."""

    OK = "ok"
    TIMEOUT = "timeout"
    REJECTED = "rejected"
    ERROR = "error"


@dataclass(frozen=True)
class Target:
    """Where and how to send: base URL (without /v1), API flavour, model, streaming, limits."""

    base_url: str
    model: str
    endpoint: str = "chat"  # or "completions"
    stream: bool = True
    timeout_s: float = 60.0
    scope_header: str = SCOPE_HEADER
    scope_tag: bool = True
    ignore_eos: bool = True  # a vLLM extension: exact output lengths
    api_key: str | None = None
    time_scale: float = 1.0  # wall seconds per model second of the server under test


@dataclass(frozen=True)
class ClientOutcome:
    """What happened to one request; durations are in (model) seconds, None when not reached."""

    scope: str
    status: Status
    http_status: int | None
    ttft_s: float | None
    e2e_s: float | None
    output_tokens: int
    deadline_s: float | None
    detail: str = ""

    @property
    def tpot_s(self) -> float | None:
        """Time per output token after the first."""
        if self.status is not Status.OK or self.ttft_s is None or self.e2e_s is None or self.output_tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)

    @property
    def on_time(self) -> bool:
        return self.status is Status.OK and (
            self.deadline_s is None or (self.e2e_s is not None and self.e2e_s <= self.deadline_s)
        )


def make_prompt(planned: PlannedRequest, index: int, *, tag: bool) -> str:
    """A prompt of about `input_tokens` tokens, unique per request, tagged with its scope."""
    if planned.prompt is not None:
        return planned.prompt
    # A unique first word keeps a real server's prefix cache from flattering the run; the tag
    # counts as about five tokens.
    head = [f"r{index}", f"[scope:{planned.scope}]"] if tag else [f"r{index}"]
    filler = planned.input_tokens - (6 if tag else 1)
    return " ".join(head + [_FILLER[(index + i) % len(_FILLER)] for i in range(filler)])


def request_body(target: Target, planned: PlannedRequest, prompt: str) -> dict[str, Any]:
    """A greedy request for `output_tokens` tokens (exactly, where the server honours ignore_eos)."""
    body: dict[str, Any] = {
        "model": target.model,
        "max_tokens": planned.output_tokens,
        "temperature": 0,
        "stream": target.stream,
    }
    if target.ignore_eos:
        body["ignore_eos"] = True
    if target.stream:
        body["stream_options"] = {"include_usage": True}
    if target.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return body


async def send(session: aiohttp.ClientSession, target: Target, planned: PlannedRequest, index: int) -> ClientOutcome:
    """Send one planned request and measure it."""
    path = "/v1/chat/completions" if target.endpoint == "chat" else "/v1/completions"
    body = request_body(target, planned, make_prompt(planned, index, tag=target.scope_tag))
    scale = target.time_scale
    headers = {target.scope_header: planned.scope}
    if target.api_key:
        headers["Authorization"] = f"Bearer {target.api_key}"
    started = time.monotonic()
    ttft: float | None = None
    http_status: int | None = None

    def outcome(status: Status, tokens: int = 0, detail: str = "", done: bool = False) -> ClientOutcome:
        e2e = (time.monotonic() - started) / scale if done else None
        return ClientOutcome(planned.scope, status, http_status, ttft, e2e, tokens, planned.deadline_s, detail)

    try:
        async with asyncio.timeout(target.timeout_s * scale):
            async with session.post(target.base_url + path, json=body, headers=headers) as response:
                http_status = response.status
                if response.status != 200:
                    text = (await response.text())[:200]
                    rejected = response.status in REJECTION_STATUSES
                    return outcome(Status.REJECTED if rejected else Status.ERROR, detail=text)
                if not target.stream:
                    data = await response.json()
                    return outcome(Status.OK, int(data["usage"]["completion_tokens"]), done=True)
                tokens = 0
                async for line in response.content:
                    if not line.startswith(b"data: "):
                        continue
                    payload = line[6:].strip()
                    if payload == b"[DONE]":
                        return outcome(Status.OK, tokens, done=True)
                    chunk = json.loads(payload)
                    if "error" in chunk:
                        return outcome(Status.ERROR, tokens, detail=str(chunk["error"])[:200])
                    if ttft is None and _has_text(chunk):
                        ttft = (time.monotonic() - started) / scale
                    if chunk.get("usage"):
                        tokens = int(chunk["usage"]["completion_tokens"])
                return outcome(Status.ERROR, tokens, detail="stream ended without [DONE]")
    except TimeoutError:
        return outcome(Status.TIMEOUT, detail=f"no complete answer within {target.timeout_s} s")
    except (aiohttp.ClientError, json.JSONDecodeError, KeyError, ValueError) as exc:
        return outcome(Status.ERROR, detail=f"{type(exc).__name__}: {exc}"[:200])


def _has_text(chunk: dict[str, Any]) -> bool:
    for choice in chunk.get("choices") or ():
        if choice.get("text") or (choice.get("delta") or {}).get("content"):
            return True
    return False
