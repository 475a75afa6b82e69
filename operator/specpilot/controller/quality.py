"""Quality gates' I/O: greedy probes sent to both arms directly, and business webhooks.

Probes go to the arms' pods, not through the router, so they never count as the pilot's traffic.
Each prompt is sent streamed and not, at temperature 0, to one baseline and one speculative pod;
a pair agrees when both texts and finish reasons are equal (target verification is probability
computation: under greedy decoding the speculative arm must say exactly what the baseline says).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from specpilot.analysis.quality import ProbeResult, WebhookResult
from specpilot.api.spec import Probes, Webhook
from specpilot.wire.names import ENGINE_PORT


@dataclass(frozen=True)
class Completion:
    """One probe answer."""

    text: str
    finish_reason: str | None


async def _complete(
    session: aiohttp.ClientSession, ip: str, *, model: str, prompt: str, max_tokens: int, stream: bool
) -> Completion:
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": stream}
    async with session.post(f"http://{ip}:{ENGINE_PORT}/v1/completions", json=body) as resp:
        if resp.status != 200:
            raise ValueError(f"{ip} answered {resp.status}")
        if not stream:
            doc = await resp.json()
            choice = doc["choices"][0]
            return Completion(str(choice.get("text", "")), choice.get("finish_reason"))
        text, finish = [], None
        async for raw in resp.content:
            line = raw.strip()
            if not line.startswith(b"data:") or line == b"data: [DONE]":
                continue
            chunk = json.loads(line[5:])
            for choice in chunk.get("choices") or []:
                text.append(str(choice.get("text") or ""))
                finish = choice.get("finish_reason") or finish
        return Completion("".join(text), finish)


async def run_probes(
    session: aiohttp.ClientSession, *, baseline: str, speculative: str, probes: Probes, model: str
) -> ProbeResult:
    """Every prompt, streamed and not, to one baseline pod and one speculative pod (by IP)."""
    cases = [(index, prompt, stream) for index, prompt in enumerate(probes.prompts) for stream in (False, True)]
    try:
        answers = await asyncio.gather(
            *(
                _complete(session, ip, model=model, prompt=prompt, max_tokens=probes.max_tokens, stream=stream)
                for _, prompt, stream in cases
                for ip in (baseline, speculative)
            )
        )
    except (aiohttp.ClientError, TimeoutError, ValueError, KeyError, IndexError) as error:
        return ProbeResult(agreement=None, pairs=0, error=f"probes failed: {error or type(error).__name__}")
    mismatches = tuple(
        f"prompt #{index} ({'streamed' if stream else 'whole'})"
        for (index, _, stream), base, spec in zip(cases, answers[0::2], answers[1::2], strict=True)
        if base != spec
    )
    return ProbeResult(agreement=1 - len(mismatches) / len(cases), pairs=len(cases), mismatches=mismatches)


async def call_webhooks(
    session: aiohttp.ClientSession, webhooks: Sequence[Webhook], summary: Mapping[str, Any]
) -> list[WebhookResult]:
    """POST the window summary to every webhook; a non-2xx answer or no answer in time fails it. The
    result names the status code or why there was no answer, never the reply's body."""

    async def call(hook: Webhook) -> WebhookResult:
        body = {**summary, "webhook": hook.name, "metadata": dict(hook.metadata)}
        timeout = aiohttp.ClientTimeout(total=hook.timeout.total_seconds())
        try:
            async with session.post(hook.url, json=body, timeout=timeout) as resp:
                # The status alone: a reply's body is the webhook's, and may be any internal page
                # the URL reaches; nothing of it goes into status or Events.
                return WebhookResult(hook.name, 200 <= resp.status < 300, hook.critical, f"HTTP {resp.status}")
        except (aiohttp.ClientError, TimeoutError) as error:
            return WebhookResult(hook.name, False, hook.critical, f"no answer: {error or type(error).__name__}")

    return list(await asyncio.gather(*(call(hook) for hook in webhooks)))


class HttpQuality:
    """Probes and webhooks over HTTP."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self._session = session

    async def probe(self, *, baseline: str, speculative: str, probes: Probes, model: str) -> ProbeResult:
        return await run_probes(self._session, baseline=baseline, speculative=speculative, probes=probes, model=model)

    async def ask(self, webhooks: Sequence[Webhook], summary: Mapping[str, Any]) -> list[WebhookResult]:
        return await call_webhooks(self._session, webhooks, summary)
