"""Quality gates' I/O: application-behaviour probes sent to both arms directly, and business webhooks.

Probes go to one pod of the speculative arm and one of the arm it is compared with (the control arm,
which serves a copy of the speculative arm's traffic, or production's baseline in a pilot without one;
"baseline" below), not through the router, so they never count as the pilot's traffic. Each case is sent
whole and streamed (greedy text to both pods at once, then again to the baseline, so that its own
variation is measured under the batching its first answer saw); sampled cases are asked `repeats` times
of each arm at their temperature, whole, and each answer is scored (a score webhook gets one answer at a
time and never learns its arm); cancel cases drop a stream and watch the pod's running-requests gauge,
one arm at a time after the other cases, so that no other probe moves the gauge. A round asks each case
`perRound` times, one ask after the other: the engine's own greedy variation grows with the batch an
answer joins (the mock's chance is 1 - (1 - rate)^batch), so asks sent together would raise both arms'
divergence alike and bury a difference, while one at a time each arm's answers and the baseline's
repeat meet the same batches, so a round's tally (one stratum of the tests) compares like batches with
like, and no per-batch strata are needed (vLLM does not report an answer's batch anyway). What the
answers mean is judged in `analysis.probes`; only the answers' shape is read here, and nothing of a
body, an answer's or a webhook's reply, is logged. Every body read has a cap (`fetch.bodies`): an answer
over it fails the call naming the cap, and a business webhook's reply is never read at all. The session
given follows no redirect (`fetch.outbound`): a webhook or a pod that answers with one has failed the call.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import aiohttp
from aiohttp.http_exceptions import LineTooLong

from specpilot.analysis.answers import SCORE_REPLY_LIMIT, Answer, Scored, ToolCall, builtin_score, reply_score
from specpilot.analysis.probes import (
    ArmAnswers,
    CaseTally,
    Readings,
    accumulate,
    answer_round,
    cancel_round,
    greedy_round,
    sampled_round,
)
from specpilot.analysis.quality import ProbeResult, WebhookResult, case_key
from specpilot.api.spec import ProbeCase, ProbeKind, Probes, ScoreWebhook, Webhook
from specpilot.controller.ports import KubeApi
from specpilot.controller.secrets import HeaderValues, KubeSecretValues, SecretUnreadable, no_secrets, secret_headers
from specpilot.fetch.bodies import PROBE_ANSWER_BYTES, TooLarge, read_body
from specpilot.fetch.outbound import Refused, scrub
from specpilot.wire.names import ENGINE_PORT

RUNNING = "vllm:num_requests_running"
SETTLE_POLL_S = 0.2  # how often a cancel case re-reads the gauge until its bound
SCORING_AT_ONCE = 8  # score webhook calls in flight per sampled case


def request_body(case: ProbeCase, *, model: str, max_tokens: int, stream: bool) -> dict[str, Any]:
    """The OpenAI request a case sends: chat (always for toolCall and structured) or text completion."""
    chat = case.chat or case.kind in (ProbeKind.TOOL_CALL, ProbeKind.STRUCTURED)
    temperature = case.temperature if case.kind is ProbeKind.SAMPLED else 0
    body: dict[str, Any] = {"model": model, "max_tokens": case.max_tokens or max_tokens, "temperature": temperature}
    body |= {"messages": [{"role": "user", "content": case.prompt}]} if chat else {"prompt": case.prompt}
    if case.kind is ProbeKind.STOP:
        body |= {"stop": list(case.stop), "min_tokens": case.min_tokens}
    elif case.kind is ProbeKind.TOOL_CALL:
        body["tools"] = [
            {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
            for t in case.tools
        ]
        named = {"type": "function", "function": {"name": case.tool_choice}}
        body["tool_choice"] = case.tool_choice if case.tool_choice in ("auto", "required") else named
    elif case.kind is ProbeKind.STRUCTURED:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "probe", "schema": case.json_schema}}
    elif case.kind is ProbeKind.CANCEL:
        body["ignore_eos"] = True  # still running when it is dropped
    return body | {"stream": True} if stream else body


def _path(body: Mapping[str, Any]) -> str:
    return "/v1/chat/completions" if "messages" in body else "/v1/completions"


def _whole(doc: Mapping[str, Any]) -> Answer:
    choice = doc["choices"][0]
    message = choice.get("message") or {}
    calls = tuple(
        ToolCall(call["function"].get("name"), str(call["function"].get("arguments") or ""))
        for call in message.get("tool_calls") or ()
    )
    text = message.get("content") if "message" in choice else choice.get("text")
    tokens = (doc.get("usage") or {}).get("completion_tokens")
    return Answer(
        str(text or ""),
        choice.get("finish_reason"),
        choice.get("stop_reason"),
        calls,
        tokens=tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None,
    )


def _streamed(chunks: Sequence[Mapping[str, Any]]) -> Answer:
    """The answer a client reassembles from the deltas: text joined, tool calls by index."""
    text: list[str] = []
    names: dict[int, str | None] = {}
    arguments: dict[int, str] = {}
    finish, stop_reason = None, None
    for chunk in chunks:
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta")
            text.append(str((delta.get("content") if delta is not None else choice.get("text")) or ""))
            for call in (delta or {}).get("tool_calls") or ():
                index, function = int(call.get("index", 0)), call.get("function") or {}
                names[index] = names.get(index) or function.get("name")
                arguments[index] = arguments.get(index, "") + str(function.get("arguments") or "")
            if choice.get("finish_reason"):
                finish, stop_reason = choice["finish_reason"], choice.get("stop_reason")
    calls = tuple(ToolCall(names.get(i), arguments.get(i, "")) for i in sorted(names.keys() | arguments.keys()))
    return Answer("".join(text), finish, stop_reason, calls)


async def _send(session: aiohttp.ClientSession, url: str, body: Mapping[str, Any]) -> Answer:
    """One answer, whole or streamed; its body, all its events together, read up to PROBE_ANSWER_BYTES."""
    async with session.post(url + _path(body), json=body) as resp:
        if resp.status != 200:
            return Answer("", None, status=resp.status)  # the body is the engine's; not kept
        read = await read_body(resp, PROBE_ANSWER_BYTES)
    if not body.get("stream"):
        return _whole(json.loads(read))
    lines = (raw.strip() for raw in read.splitlines())
    return _streamed([json.loads(line[5:]) for line in lines if line.startswith(b"data:") and line != b"data: [DONE]"])


async def _answers(
    session: aiohttp.ClientSession, url: str, case: ProbeCase, *, model: str, max_tokens: int
) -> ArmAnswers:
    whole, streamed = await asyncio.gather(
        *(
            _send(session, url, request_body(case, model=model, max_tokens=max_tokens, stream=stream))
            for stream in (False, True)
        )
    )
    return ArmAnswers(whole, streamed)


async def _running(session: aiohttp.ClientSession, url: str) -> float | None:
    """The pod's vllm:num_requests_running (summed over engines), read from its own /metrics."""
    async with session.get(url + "/metrics") as resp:
        if resp.status != 200:
            return None
        lines = (await read_body(resp)).decode("utf-8", "replace").splitlines()
    values = [float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith((RUNNING + "{", RUNNING + " "))]
    return sum(values) if values else None


async def _cancel(
    session: aiohttp.ClientSession, url: str, case: ProbeCase, *, model: str, max_tokens: int
) -> Readings:
    """Drop a stream after the case's chunks, then read the gauge until it is back or the bound passes."""
    before = await _running(session, url)
    body = request_body(case, model=model, max_tokens=max_tokens, stream=True)
    async with session.post(url + _path(body), json=body) as resp:
        chunks = 0
        while resp.status == 200 and chunks < case.after_chunks:
            try:
                line = await resp.content.readline(max_line_length=PROBE_ANSWER_BYTES)
            except LineTooLong:
                raise TooLarge(PROBE_ANSWER_BYTES) from None
            if not line:
                break
            chunks += line.startswith(b"data:")
        resp.close()  # the connection goes with it: the engine sees the client leave
    loop = asyncio.get_running_loop()
    deadline = loop.time() + case.settle.total_seconds()
    after = await _running(session, url)
    while before is not None and after is not None and after > before and loop.time() < deadline:
        await asyncio.sleep(SETTLE_POLL_S)
        after = await _running(session, url)
    return Readings(before, after)


_CALL_ERRORS = (aiohttp.ClientError, TimeoutError, SecretUnreadable)


def _failed(error: Exception, secrets: tuple[str, ...] = ()) -> str:
    """Why a call failed, scrubbed (`fetch.outbound.scrub`) of userinfo and the header values sent: what the
    session refused (a redirect, an address) or a Secret that could not be read says so, anything else is no
    answer."""
    said = (
        str(error) if isinstance(error, Refused | SecretUnreadable) else f"no answer: {error or type(error).__name__}"
    )
    return scrub(said, secrets)


async def _score(
    session: aiohttp.ClientSession,
    hook: ScoreWebhook,
    case: ProbeCase,
    answer: Answer,
    *,
    max_tokens: int,
    values: HeaderValues = no_secrets,
) -> Scored:
    """One answer scored by the case's webhook: the case and this answer alone, no arm named. Only the
    status code or that no score came back is kept of the reply."""
    if answer.status != 200:
        return Scored(answer, None, f"the answer failed with HTTP {answer.status}")
    body = {
        "case": {
            "kind": case.kind.value,
            "prompt": case.prompt,
            "chat": case.chat,
            "temperature": case.temperature,
            "maxTokens": case.max_tokens or max_tokens,
        },
        "answer": {"text": answer.text, "finishReason": answer.finish_reason, "completionTokens": answer.tokens},
        "metadata": dict(hook.metadata),
    }
    timeout = aiohttp.ClientTimeout(total=hook.timeout.total_seconds())
    secrets: tuple[str, ...] = ()
    try:
        headers, secrets = await secret_headers(hook.secret_header, values)
        async with session.post(hook.url, json=body, headers=headers, timeout=timeout) as resp:
            if not 200 <= resp.status < 300:
                return Scored(answer, None, f"score webhook answered HTTP {resp.status}")
            reply = await read_body(resp, SCORE_REPLY_LIMIT)
    except _CALL_ERRORS as error:
        return Scored(answer, None, f"score webhook: {_failed(error, secrets)}")
    score = reply_score(reply)
    return Scored(answer, score, "" if score is not None else "score webhook replied without a finite score")


async def _sampled(
    session: aiohttp.ClientSession, url: str, case: ProbeCase, *, model: str, max_tokens: int
) -> list[Answer]:
    body = request_body(case, model=model, max_tokens=max_tokens, stream=False)
    return list(await asyncio.gather(*(_send(session, url, body) for _ in range(case.repeats))))


async def _sampled_round(
    session: aiohttp.ClientSession,
    case: ProbeCase,
    *,
    baseline: str,
    speculative: str,
    model: str,
    max_tokens: int,
    values: HeaderValues,
) -> CaseTally:
    """Both arms' answers to a sampled case, scored, judged."""
    arms = await asyncio.gather(
        *(_sampled(session, url, case, model=model, max_tokens=max_tokens) for url in (baseline, speculative))
    )
    assert case.score is not None  # the API requires one for a sampled case
    score = case.score
    if score.builtin is not None:
        builtin = score.builtin
        scored = [[builtin_score(answer, builtin) for answer in answers] for answers in arms]
    else:
        assert score.webhook is not None  # exactly one of builtin and webhook
        hook, gate = score.webhook, asyncio.Semaphore(SCORING_AT_ONCE)

        async def scored_by_hook(answer: Answer) -> Scored:
            async with gate:
                return await _score(session, hook, case, answer, max_tokens=max_tokens, values=values)

        # Both arms' answers in a random order, so that not even the order of the calls tells the arm.
        order = [(arm, index) for arm, found in enumerate(arms) for index in range(len(found))]
        random.shuffle(order)
        results = await asyncio.gather(*(scored_by_hook(arms[arm][index]) for arm, index in order))
        placed = dict(zip(order, results, strict=True))
        scored = [[placed[arm, index] for index in range(len(found))] for arm, found in enumerate(arms)]
    return sampled_round(case, baseline=scored[0], speculative=scored[1])


async def probe_case(
    session: aiohttp.ClientSession,
    case: ProbeCase,
    *,
    baseline: str,
    speculative: str,
    model: str,
    max_tokens: int,
    values: HeaderValues = no_secrets,
) -> CaseTally:
    """One round of one case against the arms' base URLs, judged; a score webhook's secret header read by
    `values`."""
    if case.kind is ProbeKind.CANCEL:
        base = await _cancel(session, baseline, case, model=model, max_tokens=max_tokens)
        spec = await _cancel(session, speculative, case, model=model, max_tokens=max_tokens)
        return cancel_round(case, baseline=base, speculative=spec)
    if case.kind is ProbeKind.SAMPLED:
        return await _sampled_round(
            session, case, baseline=baseline, speculative=speculative, model=model, max_tokens=max_tokens, values=values
        )
    answers = await asyncio.gather(
        *(_answers(session, url, case, model=model, max_tokens=max_tokens) for url in (baseline, speculative))
    )
    if case.kind is ProbeKind.GREEDY:
        # the repeat after both arms answered: each pod batches the case's requests alike, so the
        # compared arm's own variation is measured under the conditions its answer was given in
        again = await _answers(session, baseline, case, model=model, max_tokens=max_tokens)
        return greedy_round(case, baseline=answers[0], again=again, speculative=answers[1])
    return answer_round(case, baseline=answers[0], speculative=answers[1])


async def run_probes(
    session: aiohttp.ClientSession,
    *,
    baseline: str,
    speculative: str,
    probes: Probes,
    cases: Sequence[ProbeCase],
    model: str,
    values: HeaderValues = no_secrets,
) -> ProbeResult:
    """One round of every case, against one pod of the compared arm and one of the speculative arm (their
    base URLs), each case asked `probes.perRound` times one after the other (a sampled case once: it asks
    `repeats`) into one tally; cancel cases last and one by one."""

    async def one(case: ProbeCase) -> CaseTally:
        total: CaseTally | None = None
        for _ in range(1 if case.kind is ProbeKind.SAMPLED else probes.per_round):
            tally = await probe_case(
                session,
                case,
                baseline=baseline,
                speculative=speculative,
                model=model,
                max_tokens=probes.max_tokens,
                values=values,
            )
            total = tally if total is None else replace(accumulate(total, tally), rounds=1)
        assert total is not None  # asked at least once
        return total

    answered = [case for case in cases if case.kind is not ProbeKind.CANCEL]
    dropped = [case for case in cases if case.kind is ProbeKind.CANCEL]
    try:
        tallies = list(await asyncio.gather(*(one(case) for case in answered)))
        tallies += [await one(case) for case in dropped]
    except (aiohttp.ClientError, TimeoutError, ValueError, KeyError, IndexError, TypeError) as error:
        return ProbeResult(error=scrub(f"probes failed: {error or type(error).__name__}"))
    return ProbeResult({case_key(case): tally for case, tally in zip([*answered, *dropped], tallies, strict=True)})


async def call_webhooks(
    session: aiohttp.ClientSession,
    webhooks: Sequence[Webhook],
    summary: Mapping[str, Any],
    values: HeaderValues = no_secrets,
) -> list[WebhookResult]:
    """POST the window summary to every webhook, with its secret header's value read by `values`; a non-2xx
    answer or no answer in time fails it. The result names the status code or why there was no answer,
    never the reply's body (which is not read)."""

    async def call(hook: Webhook) -> WebhookResult:
        body = {**summary, "webhook": hook.name, "metadata": dict(hook.metadata)}
        timeout = aiohttp.ClientTimeout(total=hook.timeout.total_seconds())
        secrets: tuple[str, ...] = ()
        try:
            headers, secrets = await secret_headers(hook.secret_header, values)
            async with session.post(hook.url, json=body, headers=headers, timeout=timeout) as resp:
                # The status alone: a reply's body is the webhook's, and may be any internal page
                # the URL reaches; nothing of it goes into status or Events.
                return WebhookResult(hook.name, 200 <= resp.status < 300, hook.critical, f"HTTP {resp.status}")
        except _CALL_ERRORS as error:
            return WebhookResult(hook.name, False, hook.critical, _failed(error, secrets))

    return list(await asyncio.gather(*(call(hook) for hook in webhooks)))


class HttpQuality:
    """Probes and webhooks over HTTP; webhooks' secret headers read from the pilot's namespace."""

    def __init__(self, session: aiohttp.ClientSession, kube: KubeApi) -> None:
        self._session = session
        self._kube = kube

    async def probe(
        self,
        *,
        baseline: str,
        speculative: str,
        probes: Probes,
        cases: Sequence[ProbeCase],
        model: str,
        namespace: str,
    ) -> ProbeResult:
        return await run_probes(
            self._session,
            baseline=f"http://{baseline}:{ENGINE_PORT}",
            speculative=f"http://{speculative}:{ENGINE_PORT}",
            probes=probes,
            cases=cases,
            model=model,
            values=KubeSecretValues(self._kube, namespace),
        )

    async def ask(
        self, webhooks: Sequence[Webhook], summary: Mapping[str, Any], *, namespace: str
    ) -> list[WebhookResult]:
        return await call_webhooks(self._session, webhooks, summary, KubeSecretValues(self._kube, namespace))
