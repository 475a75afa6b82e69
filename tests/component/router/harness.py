"""A router on loopback with a vLLM-shaped fake upstream per arm, for the router's component tests.

The fake upstream is steered per request by ``x-fake-*`` headers so each test states the
upstream behaviour it needs next to the request it sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDictProxy
from prometheus_client.parser import text_string_to_metric_families
from tests.component.loopback import Serve, Served

from specpilot.router.app import Router
from specpilot.testing.waiting import eventually
from specpilot.wire.names import Arm
from specpilot.wire.routes import (
    ArmWeights,
    HeaderMatch,
    RoutingTable,
    ScopeMatch,
    ScopeRoute,
    render_routes,
)

PILOT = "p1"
TEAM_HEADER = "x-team"  # each scope of the harness's tables takes the requests whose x-team names it


@dataclass
class Received:
    path: str
    headers: CIMultiDictProxy[str]
    body: bytes


@dataclass
class FakeVllm:
    """A tiny OpenAI/vLLM-shaped server; behaviour per request from ``x-fake-*`` headers."""

    name: str
    received: list[Received] = field(default_factory=list)
    active: int = 0
    cancelled: int = 0
    served: Served | None = None

    async def start(self, serve: Serve) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._completion)
        app.router.add_post("/v1/completions", self._completion)
        app.router.add_get("/v1/models", self._models)
        for path in ("/ping", "/version", "/tokenize", "/detokenize", "/health"):
            app.router.add_route("*", path, self._engine)
        self.served = await serve(app)

    async def stop(self) -> None:
        assert self.served is not None
        await self.served.stop()

    @property
    def port(self) -> int:
        assert self.served is not None
        return self.served.port

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def _models(self, request: web.Request) -> web.Response:
        self.received.append(Received(request.path, request.headers, b""))
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})

    async def _engine(self, request: web.Request) -> web.Response:
        """The engine's endpoints beside /v1: answered with which arm and path took them."""
        self.received.append(Received(request.path, request.headers, await request.read()))
        return web.json_response({"arm": self.name, "path": request.path, "method": request.method})

    async def _completion(self, request: web.Request) -> web.StreamResponse:
        self.active += 1
        try:
            return await self._respond(request)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        except ConnectionResetError:  # the router left before aiohttp noticed: a cancel all the same
            self.cancelled += 1
            raise asyncio.CancelledError from None
        finally:
            self.active -= 1

    async def _respond(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.received.append(Received(request.path, request.headers, body))
        fake = request.headers
        if "x-fake-hang" in fake:
            await _until_cancelled()  # no first byte ever: the router's timeout, or the client leaving, ends it
        if "x-fake-status" in fake:
            status = int(fake["x-fake-status"])
            error = {"error": {"message": "fake", "type": "Error", "param": None, "code": status}}
            return web.json_response(error, status=status)
        doc = json.loads(body)
        chunks = int(fake.get("x-fake-chunks", "4"))
        per_chunk = int(fake.get("x-fake-per-chunk", "1"))
        chat = request.path.endswith("chat/completions")
        usage = {"prompt_tokens": 3, "completion_tokens": chunks * per_chunk, "total_tokens": 3 + chunks * per_chunk}
        headers = {"x-fake-name": self.name}
        if not doc.get("stream"):
            text = "tok " * chunks
            choice: dict[str, Any] = (
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
                if chat
                else {"index": 0, "text": text, "finish_reason": "length"}
            )
            out = {"id": self.name, "object": "chat.completion", "model": doc.get("model"), "choices": [choice]}
            if fake.get("x-fake-usage") != "never":
                out["usage"] = usage
            return web.json_response(out, headers=headers)
        resp = web.StreamResponse(headers={**headers, "Content-Type": "text/event-stream"})
        await resp.prepare(request)
        gap = float(fake.get("x-fake-gap", "0"))

        def event(delta: dict[str, Any] | None, finish: str | None = None) -> bytes:
            if chat:
                choice = {"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish}
                chunk = {"id": self.name, "object": "chat.completion.chunk", "choices": [choice]}
            else:
                text = (delta or {}).get("content", "")
                chunk = {"id": self.name, "object": "text_completion", "choices": [{"index": 0, "text": text}]}
            return b"data: " + json.dumps(chunk).encode() + b"\n\n"

        if chat:
            await resp.write(event({"role": "assistant", "content": ""}))
        for i in range(chunks):
            if gap:
                await asyncio.sleep(gap)  # the engine's time between chunks
            if fake.get("x-fake-drop-after") == str(i):
                assert request.transport is not None
                request.transport.abort()
                return resp
            if fake.get("x-fake-error-after") == str(i):
                error = {"error": {"message": "engine died", "type": "InternalServerError", "code": 500}}
                await resp.write(b"data: " + json.dumps(error).encode() + b"\n\ndata: [DONE]\n\n")
                return resp
            if fake.get("x-fake-garbage") == str(i):
                await resp.write(b"data: {not json\n\n: comment\n\nevent: odd\n\n")
            await resp.write(event({"content": "tok" * per_chunk}))
        await resp.write(event({}, "length"))
        options = doc.get("stream_options") or {}
        if options.get("include_usage") and fake.get("x-fake-usage") != "never":
            await resp.write(
                b"data: " + json.dumps({"id": self.name, "choices": [], "usage": usage}).encode() + b"\n\n"
            )
        if fake.get("x-fake-no-done") is None:
            await resp.write(b"data: [DONE]\n\n")
        if "x-fake-linger" in fake:
            await _until_cancelled()  # the answer held open once written, until the other end leaves
        return resp


async def _until_cancelled() -> None:
    """Wait on a future nothing resolves: until the handler is cancelled."""
    await asyncio.get_running_loop().create_future()


class Metrics:
    """Samples of a Prometheus exposition, looked up by name and labels."""

    def __init__(self, text: str) -> None:
        self._values = {
            (s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    def __call__(self, name: str, **labels: str) -> float:
        """The sample's value; 0 when it is absent (a counter that never moved)."""
        return self._values.get((name, frozenset(labels.items())), 0.0)


@dataclass
class Harness:
    """A running router with its fake arms and a client session (the control arm's fake has endpoints
    only where the test asks for them)."""

    router: Router
    baseline: FakeVllm
    speculative: FakeVllm
    control: FakeVllm
    client: aiohttp.ClientSession

    @property
    def url(self) -> str:
        host, port = self.router.addresses[0]
        return f"http://{host}:{port}"

    @property
    def admin(self) -> str:
        host, port = self.router.addresses[1]
        return f"http://{host}:{port}"

    def use(self, routes: RoutingTable) -> None:
        self.router.state.set_table(render_routes(routes))

    async def chat(
        self, *, stream: bool = True, team: str | None = None, headers: dict[str, str] | None = None, **extra: Any
    ) -> aiohttp.ClientResponse:
        """A chat completion; `team` puts it in the scope of that name by the scope's header match."""
        headers = {**(headers or {}), **({TEAM_HEADER: team} if team is not None else {})}
        body = {
            "model": extra.pop("model", "m"),
            "messages": [{"role": "user", "content": "hi"}],
            "stream": stream,
            **extra,
        }
        return await self.client.post(f"{self.url}/v1/chat/completions", json=body, headers=headers)

    async def samples(self, since: int = 0) -> dict[str, Any]:
        async with self.client.get(f"{self.admin}/samples", params={"since": str(since)}) as resp:
            assert resp.status == 200
            result: dict[str, Any] = await resp.json()
            return result

    async def metrics(self) -> Metrics:
        """The admin /metrics, parsed."""
        async with self.client.get(f"{self.admin}/metrics") as resp:
            assert resp.status == 200
            return Metrics(await resp.text())

    @staticmethod
    def table(*scopes: ScopeRoute, default: str | None = None, generation: int = 1, age: float = 0) -> RoutingTable:
        return RoutingTable(
            pilot=PILOT,
            generation=generation,
            updated_at=datetime.fromtimestamp(time.time() - age, UTC),
            default_scope=default,
            scopes=scopes,
        )

    @staticmethod
    def scope(
        name: str, *, spec: int = 0, alt: int = 0, control: int = 0, mirror: bool = False, deadline: float | None = None
    ) -> ScopeRoute:
        """A scope taking the requests whose `TEAM_HEADER` is its name (and those naming it); `mirror`: the
        speculative arm's requests are copied to the control arm."""
        return ScopeRoute(
            name=name,
            weights=ArmWeights(baseline=100 - spec - alt - control, speculative=spec, alternative=alt, control=control),
            deadline_seconds=deadline,
            match=ScopeMatch(headers=(HeaderMatch(name=TEAM_HEADER, value=name),)),
            mirror=Arm.CONTROL if mirror else None,
        )

    @staticmethod
    async def wait_for(condition: Callable[[], bool], within: float = 5.0) -> None:
        """Poll `condition` until it holds; fail after `within` seconds."""
        await eventually("the condition", condition, within=within, every=0.01)

    @staticmethod
    async def read_sse(resp: aiohttp.ClientResponse) -> list[bytes]:
        """The data payloads of an SSE response, in order."""
        body = await resp.read()
        return [event[len(b"data: ") :] for event in body.split(b"\n\n") if event.startswith(b"data: ")]


HarnessFactory = Callable[..., Awaitable[Harness]]


def _established(port: int) -> int:
    """Established TCP connections on loopback whose local port is `port` (the server side)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(FileNotFoundError):
            for line in Path(table).read_text().splitlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                if state == "01" and int(local.rsplit(":", 1)[1], 16) == port:
                    count += 1
    return count
