"""List+watch against a fake API server on loopback: changes arrive, 410 relists, drops reconnect."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from tests.component.loopback import Serve
from tests.component.router.harness import Harness

from specpilot.kubeaccess import Fixed, KubeAccess
from specpilot.router.core.choice import Endpoint
from specpilot.router.core.state import RouterState
from specpilot.router.kube import ClusterSource, Reflector
from specpilot.wire.names import Arm
from specpilot.wire.routes import ArmWeights, RoutingTable, ScopeRoute, render_routes
from specpilot.wire.samples import Fallback

NS = "ns1"
_DROP = {"drop": True}


class FakeApi:
    """Just enough of the Kubernetes API for the router's two list+watches."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, dict[str, Any]]] = {"configmaps": {}, "endpointslices": {}}
        self.version = 100
        self.queues: dict[str, list[asyncio.Queue[dict[str, Any]]]] = {"configmaps": [], "endpointslices": []}
        self.lists: Counter[str] = Counter()
        self.watches: Counter[str] = Counter()
        self.failing_lists = 0
        self.garbled_lists = 0
        self.throttled_lists: list[str] = []  # the Retry-After of each next list answered 429
        self.queries: list[dict[str, str]] = []
        self.requests: list[tuple[str, str, str | None]] = []  # (resource, "list" or "watch", Authorization)
        self.port = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get(f"/api/v1/namespaces/{NS}/configmaps", self._serve)
        app.router.add_get(f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices", self._serve)
        return app

    def end_watches(self) -> None:
        for queues in self.queues.values():
            for queue in queues:
                queue.put_nowait(_DROP)

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        resource = request.path.rsplit("/", 1)[1]
        verb = "watch" if request.query.get("watch") == "1" else "list"
        self.requests.append((resource, verb, request.headers.get("Authorization")))
        self.queries.append(dict(request.query))
        if request.query.get("watch") != "1":
            self.lists[resource] += 1
            if self.throttled_lists:
                wait = self.throttled_lists.pop(0)
                status = {"kind": "Status", "code": 429, "message": "too many requests"}
                return web.json_response(status, status=429, headers={"Retry-After": wait})
            if self.failing_lists:
                self.failing_lists -= 1
                return web.json_response({"kind": "Status", "code": 500, "message": "etcd down"}, status=500)
            if self.garbled_lists:
                self.garbled_lists -= 1
                return web.json_response({"items": "not a list"})
            items = list(self.objects[resource].values())
            return web.json_response({"metadata": {"resourceVersion": str(self.version)}, "items": items})
        self.watches[resource] += 1
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.queues[resource].append(queue)
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        try:
            while (event := await queue.get()) is not _DROP:
                await resp.write(json.dumps(event).encode() + b"\n")
        finally:
            self.queues[resource].remove(queue)
        return resp

    def _emit(self, resource: str, event: dict[str, Any]) -> None:
        for queue in self.queues[resource]:
            queue.put_nowait(event)

    def put(self, resource: str, obj: dict[str, Any]) -> None:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        name = obj["metadata"]["name"]
        kind = "MODIFIED" if name in self.objects[resource] else "ADDED"
        self.objects[resource][name] = obj
        self._emit(resource, {"type": kind, "object": obj})

    def delete(self, resource: str, name: str) -> None:
        self.version += 1
        obj = self.objects[resource].pop(name)
        self._emit(resource, {"type": "DELETED", "object": obj})

    def expire(self, resource: str) -> None:
        self._emit(resource, {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}})

    def bookmark(self, resource: str) -> None:
        self.version += 1
        self._emit(resource, {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": str(self.version)}}})

    def drop(self, resource: str) -> None:
        self._emit(resource, _DROP)


def configmap(generation: int, spec: int) -> dict[str, Any]:
    table = RoutingTable(
        pilot="p1",
        generation=generation,
        updated_at=datetime.now(UTC),
        scopes=(ScopeRoute(name="code", weights=ArmWeights(baseline=100 - spec, speculative=spec)),),
    )
    return {"metadata": {"name": "p1-routes", "namespace": NS}, "data": render_routes(table)}


def endpointslice(arm: str, *ips: str, ready: bool = True) -> dict[str, Any]:
    return {
        "metadata": {"name": f"p1-{arm}-x", "labels": {"kubernetes.io/service-name": f"p1-{arm}"}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8000}],
        "endpoints": [{"addresses": [ip], "conditions": {"ready": ready}} for ip in ips],
    }


@pytest.fixture
async def api(serve: Serve) -> AsyncIterator[FakeApi]:
    fake = FakeApi()
    fake.put("configmaps", configmap(1, 20))
    fake.put("endpointslices", endpointslice("baseline", "198.18.0.1"))
    fake.put("endpointslices", endpointslice("speculative", "198.18.0.2"))
    fake.port = (await serve(fake.app())).port
    yield fake
    fake.end_watches()


@pytest.fixture
async def watched(api: FakeApi) -> AsyncIterator[tuple[RouterState, Counter[tuple[str, str]]]]:
    state = RouterState(pilot="p1", default_scope="default", max_table_age=None)
    restarts: Counter[tuple[str, str]] = Counter()
    source = ClusterSource(
        access=KubeAccess(f"http://127.0.0.1:{api.port}", Fixed(bearer=lambda: "Bearer t0ken")),
        namespace=NS,
        pilot="p1",
        on_restart=lambda resource, reason: restarts.update([(resource, reason)]),
    )
    task = asyncio.create_task(source.run(state))
    await Harness.wait_for(lambda: state.ready and api.watches["configmaps"] == api.watches["endpointslices"] == 1)
    yield state, restarts
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def generation(state: RouterState) -> int | None:
    table = state.routes().table
    return None if table is None else table.generation


async def test_the_first_list_fills_the_state_with_selectors_and_credentials(
    api: FakeApi, watched: tuple[RouterState, Counter[tuple[str, str]]]
) -> None:
    state, _ = watched
    assert generation(state) == 1
    assert state.endpoints()[Arm.SPECULATIVE] == (Endpoint("198.18.0.2", 8000),)
    assert {token for _, _, token in api.requests} == {"Bearer t0ken"}
    selectors = {q.get("fieldSelector") or q.get("labelSelector") for q in api.queries}
    assert selectors == {
        "metadata.name=p1-routes",
        "kubernetes.io/service-name in (p1-baseline,p1-speculative,p1-control,p1-alternative)",
    }
    watch = next(q for q in api.queries if q.get("watch") == "1")
    assert watch["resourceVersion"] and watch["allowWatchBookmarks"] == "true"


async def test_changes_arrive_through_the_watch(
    api: FakeApi, watched: tuple[RouterState, Counter[tuple[str, str]]]
) -> None:
    state, _ = watched
    api.put("configmaps", configmap(2, 50))
    await Harness.wait_for(lambda: generation(state) == 2, within=1)
    api.put("endpointslices", endpointslice("speculative", "198.18.0.2", ready=False))
    await Harness.wait_for(lambda: state.routes().route("code").fallbacks == (Fallback.SPECULATIVE_UNAVAILABLE,))
    api.delete("configmaps", "p1-routes")
    await Harness.wait_for(lambda: state.routes().table_fallback is Fallback.TABLE_MISSING)
    assert api.lists == {"configmaps": 1, "endpointslices": 1}


async def test_an_expired_watch_lists_again(
    api: FakeApi, watched: tuple[RouterState, Counter[tuple[str, str]]]
) -> None:
    state, restarts = watched
    api.bookmark("configmaps")
    api.objects["configmaps"]["p1-routes"] = configmap(5, 0)  # changed while the watch was expiring
    api.expire("configmaps")
    await Harness.wait_for(lambda: generation(state) == 5)
    assert api.lists["configmaps"] == 2 and restarts[("configmaps", "gone")] == 1


async def test_a_dropped_watch_resumes_and_a_failing_list_is_retried(
    api: FakeApi, watched: tuple[RouterState, Counter[tuple[str, str]]]
) -> None:
    state, restarts = watched
    api.drop("endpointslices")
    await Harness.wait_for(lambda: api.watches["endpointslices"] == 2)
    assert api.lists["endpointslices"] == 1  # resumed from its resourceVersion, no relist
    api.put("endpointslices", endpointslice("baseline", "198.18.0.1", "198.18.0.3"))
    await Harness.wait_for(lambda: len(state.endpoints()[Arm.BASELINE]) == 2)
    api.failing_lists = 2
    api.expire("endpointslices")
    await Harness.wait_for(lambda: api.lists["endpointslices"] == 4 and api.watches["endpointslices"] == 3)
    assert restarts[("endpointslices", "error")] == 2
    assert len(state.endpoints()[Arm.BASELINE]) == 2


async def test_an_answer_that_cannot_be_read_is_retried(
    api: FakeApi, watched: tuple[RouterState, Counter[tuple[str, str]]]
) -> None:
    state, restarts = watched
    api.garbled_lists = 1
    api.put("configmaps", configmap(9, 10))
    api.expire("configmaps")
    await Harness.wait_for(lambda: api.lists["configmaps"] == 3)
    assert restarts[("configmaps", "error")] == 1
    await Harness.wait_for(lambda: generation(state) == 9)


async def test_a_throttled_list_waits_as_asked_and_failures_back_off_with_jitter(api: FakeApi) -> None:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)  # the test's clock: nothing really waits

    changes: list[int] = []
    restarts: Counter[tuple[str, str]] = Counter()
    api.throttled_lists = ["7", "2"]
    api.failing_lists = 2
    async with aiohttp.ClientSession() as session:
        reflector = Reflector(
            session=session,
            access=KubeAccess(f"http://127.0.0.1:{api.port}", Fixed()),
            path=f"/api/v1/namespaces/{NS}/configmaps",
            selector={},
            resource="configmaps",
            on_change=lambda objects: changes.append(len(objects)),
            on_restart=lambda resource, reason: restarts.update([(resource, reason)]),
            backoff=(0.2, 10.0),
            sleep=sleep,
        )
        task = asyncio.create_task(reflector.run())
        await Harness.wait_for(lambda: changes == [1])
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert waits[:2] == [7.0, 2.0], waits  # as long as the server asked, twice
    first, second = waits[2:4]
    assert 0.1 <= first <= 0.2 and 0.2 <= second <= 0.4, waits  # doubling, each spread over its lower half
    assert restarts == Counter({("configmaps", "throttled"): 2, ("configmaps", "error"): 2})


async def test_each_list_and_watch_carries_the_token_current_when_it_is_sent(api: FakeApi) -> None:
    token = "Bearer one"
    async with aiohttp.ClientSession() as session:
        reflector = Reflector(
            session=session,
            access=KubeAccess(f"http://127.0.0.1:{api.port}", Fixed(bearer=lambda: token)),
            path=f"/api/v1/namespaces/{NS}/configmaps",
            selector={},
            resource="configmaps",
            on_change=lambda objects: None,
            on_restart=lambda resource, reason: None,
        )
        task = asyncio.create_task(reflector.run())
        await Harness.wait_for(lambda: api.watches["configmaps"] == 1)
        token = "Bearer two"  # rotated while the watch is open: a reconnect must send the new one
        api.drop("configmaps")
        await Harness.wait_for(lambda: api.watches["configmaps"] == 2)
        token = "Bearer three"
        api.expire("configmaps")
        await Harness.wait_for(lambda: api.watches["configmaps"] == 3)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert api.requests == [
        ("configmaps", "list", "Bearer one"),
        ("configmaps", "watch", "Bearer one"),
        ("configmaps", "watch", "Bearer two"),
        ("configmaps", "list", "Bearer three"),
        ("configmaps", "watch", "Bearer three"),
    ]
