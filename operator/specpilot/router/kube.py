"""The router's view of Kubernetes: list+watch of its routing ConfigMap and its arms' EndpointSlices.

A small aiohttp list+watch (no threads), with credentials from `specpilot.kubeaccess`. Watches
relist on 410 Gone, wait as long as a 429 asks, and reconnect with jittered backoff, so a change
reaches the router within milliseconds and a lost connection heals on its own.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any

import aiohttp

from specpilot.kubeaccess import RETRY_AFTER_DEFAULT, KubeAccess, jittered, retry_after
from specpilot.router.core.slices import ready_endpoints
from specpilot.router.core.state import ENDPOINTS, TABLE, RouteSink
from specpilot.wire.names import SERVICE_NAME_LABEL, Arm, arm_name, routes_name

log = logging.getLogger("specpilot.router.kube")


class KubeError(Exception):
    """The API server answered with an error."""

    def __init__(self, code: int, message: str, *, retry_after: float = RETRY_AFTER_DEFAULT) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.retry_after = retry_after  # what a 429 asked for


class Reflector:
    """Keeps the objects of one list+watch, calling `on_change` with all of them after each change."""

    def __init__(
        self,
        *,
        session: aiohttp.ClientSession,
        access: KubeAccess,
        path: str,
        selector: Mapping[str, str],
        resource: str,
        on_change: Callable[[list[dict[str, Any]]], None],
        on_restart: Callable[[str, str], None],
        watch_seconds: int = 240,
        backoff: tuple[float, float] = (0.2, 10.0),
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._session = session
        self._access = access
        self._url = access.server + path
        self._selector = dict(selector)
        self.resource = resource
        self._on_change = on_change
        self._on_restart = on_restart
        self._watch_seconds = watch_seconds
        self._backoff = backoff
        self._sleep = sleep
        self._objects: dict[str, dict[str, Any]] = {}

    async def run(self) -> None:
        """List, then watch from the list's resourceVersion, forever."""
        delay = self._backoff[0]
        version: str | None = None
        while True:
            try:
                if version is None:
                    version = await self._list()
                started = time.monotonic()
                version = await self._watch(version)
                delay = self._backoff[0]
                if time.monotonic() - started < 1.0:  # a server that ends watches at once must not spin us
                    await asyncio.sleep(delay)
            except KubeError as exc:
                if exc.code == 410:
                    log.info("%s watch expired (410 Gone); listing again", self.resource)
                    self._on_restart(self.resource, "gone")
                    version = None
                    continue
                if exc.code == 429:  # throttled: as long as the server asks, without doubling the backoff
                    log.info("%s: the API server asks to wait %.1f s (429)", self.resource, exc.retry_after)
                    self._on_restart(self.resource, "throttled")
                    await self._sleep(exc.retry_after)
                    continue
                if exc.code == 401:  # expired credentials: renewed (with backoff) before the next try
                    self._access.rejected()
                delay = await self._pause(exc, delay)
            except (aiohttp.ClientError, TimeoutError, ValueError, KeyError, TypeError) as exc:
                delay = await self._pause(exc, delay)  # unreachable, or answers we cannot read

    async def _pause(self, exc: Exception, delay: float) -> float:
        """Wait `delay`, jittered, after a failure; the next delay, doubled up to the backoff's cap."""
        wait = jittered(delay)
        log.warning("%s watch failed (%s); retrying in %.1f s", self.resource, str(exc) or type(exc).__name__, wait)
        self._on_restart(self.resource, "error")
        await self._sleep(wait)
        return min(delay * 2, self._backoff[1])

    def _headers(self) -> dict[str, str]:
        token = self._access.token()
        return {"Authorization": token, "Accept": "application/json"} if token else {"Accept": "application/json"}

    async def _list(self) -> str:
        async with self._session.get(
            self._url, params=self._selector, headers=self._headers(), ssl=self._access.ssl()
        ) as resp:
            body = await resp.read()
            if resp.status != 200:
                raise KubeError(resp.status, body.decode(errors="replace")[:300], retry_after=retry_after(resp.headers))
        doc = json.loads(body)
        self._objects = {_key(item): item for item in doc.get("items") or ()}
        self._on_change(list(self._objects.values()))
        return str(doc["metadata"]["resourceVersion"])

    async def _watch(self, version: str) -> str:
        params = {
            **self._selector,
            "watch": "1",
            "resourceVersion": version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(self._watch_seconds),
        }
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=self._watch_seconds + 30)
        async with self._session.get(
            self._url, params=params, headers=self._headers(), ssl=self._access.ssl(), timeout=timeout
        ) as resp:
            if resp.status != 200:
                text = (await resp.read()).decode(errors="replace")[:300]
                raise KubeError(resp.status, text, retry_after=retry_after(resp.headers))
            async for event in _lines(resp.content):
                version = self._apply(json.loads(event), version)
        return version

    def _apply(self, event: dict[str, Any], version: str) -> str:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            raise KubeError(int(obj.get("code") or 500), str(obj.get("message", "watch error")))
        version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
        if kind in ("ADDED", "MODIFIED"):
            self._objects[_key(obj)] = obj
        elif kind == "DELETED":
            self._objects.pop(_key(obj), None)
        else:
            return version  # BOOKMARK
        self._on_change(list(self._objects.values()))
        return version


def _key(obj: Mapping[str, Any]) -> str:
    return str(obj["metadata"]["name"])


async def _lines(stream: aiohttp.StreamReader) -> AsyncIterator[bytes]:
    """Newline-separated watch events of any size."""
    buffer = b""
    while data := await stream.readany():
        buffer += data
        *events, buffer = buffer.split(b"\n")
        for event in events:
            if event.strip():
                yield event
    if buffer.strip():
        yield buffer


class ClusterSource:
    """Feeds the router's state from the API server (implements `RouteSource`)."""

    def __init__(
        self, *, access: KubeAccess, namespace: str, pilot: str, on_restart: Callable[[str, str], None]
    ) -> None:
        self._access = access
        self._namespace = namespace
        self._pilot = pilot
        self._on_restart = on_restart

    async def run(self, sink: RouteSink) -> None:
        ns, pilot = self._namespace, self._pilot
        services = ",".join(arm_name(pilot, arm) for arm in Arm)

        def table_changed(objects: list[dict[str, Any]]) -> None:
            sink.set_table((objects[0].get("data") or {}) if objects else None)
            sink.synced(TABLE)

        def slices_changed(objects: Iterable[dict[str, Any]]) -> None:
            sink.set_endpoints(ready_endpoints(pilot, objects))
            sink.synced(ENDPOINTS)

        async with aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=30), cookie_jar=aiohttp.DummyCookieJar()
        ) as session:
            common: dict[str, Any] = {"session": session, "access": self._access, "on_restart": self._on_restart}
            reflectors = (
                Reflector(
                    path=f"/api/v1/namespaces/{ns}/configmaps",
                    selector={"fieldSelector": f"metadata.name={routes_name(pilot)}"},
                    resource="configmaps",
                    on_change=table_changed,
                    **common,
                ),
                Reflector(
                    path=f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices",
                    selector={"labelSelector": f"{SERVICE_NAME_LABEL} in ({services})"},
                    resource="endpointslices",
                    on_change=slices_changed,
                    **common,
                ),
            )
            await asyncio.gather(*(reflector.run() for reflector in reflectors))
