"""The operator's Kubernetes calls (`KubeApi`) on `kubernetes.aio`, the official client's asyncio
flavour, for measuring it against the operator's own client (`specpilot.controller.kube.Kube`).

Written as the library intends it to be used: credentials from `kubernetes.aio.config` (in-cluster,
else KUBECONFIG, with `refresh_token` keeping an exec plugin's token fresh), one `ApiClient`, and the
dynamic client for every kind (discovered once, then kept): `server_side_apply` with the operator's
field manager and force, the status subresource for the pilot's status, and the library's own
client-go Retry-After helper for throttled calls. Refusals become `ApiError`, as the operator's
client raises them, so every code path of the operator stays the same.

    .venv/bin/python bench/kube_aio.py operator --namespace NS [operator flags]

runs `specpilot operator` (the same command, flags and code) with this client in place of its own;
`bench/operator_footprint.py --client kubernetes.aio` starts it so.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import aiohttp
from kubernetes.aio import client, config, dynamic
from kubernetes.aio.client.exceptions import ApiException
from kubernetes.aio.utils import Backoff, is_retry_after_response, on_retry_after_error

from specpilot import cli
from specpilot.controller import main as operator_main
from specpilot.controller.kube import THROTTLED_RETRIES, ApiError, event_body
from specpilot.kubeaccess import KubeAccess
from specpilot.wire.names import MANAGER

Json = dict[str, Any]

# As the operator's client: a throttled call is tried again THROTTLED_RETRIES times, after the wait
# the server asks for (client-go's rule: only a Retry-After in whole seconds counts).
THROTTLED = Backoff(steps=THROTTLED_RETRIES + 1, duration=0.0, factor=1.0)


def _refused(error: Any) -> ApiError:
    """The library's exception as the operator's: the code and the Status message."""
    body = error.body
    try:
        message = str(json.loads(body).get("message", body))
    except (TypeError, ValueError, AttributeError):
        message = str(body or error.reason)
    return ApiError(int(error.status or 0), message[:2000])


def _split(path: str) -> tuple[str, str, str, str]:
    """(apiVersion, namespace, plural, name) of an object's API path."""
    parts = path.strip("/").split("/")
    api_version, rest = (parts[1], parts[2:]) if parts[0] == "api" else (f"{parts[1]}/{parts[2]}", parts[3:])
    _, namespace, plural, name = rest
    return api_version, namespace, plural, name


class AioKube:
    """`KubeApi` on kubernetes.aio's dynamic client; each call raises `ApiError` on refusal."""

    def __init__(
        self,
        *,
        observe: Callable[[str, float], None],
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        config_file: str | None = None,
    ) -> None:
        self._observe = observe  # (kind, seconds) of each apply, for the operator's metrics
        self._sleep = sleep
        self._config_file = config_file  # None: the library's default (KUBECONFIG, else ~/.kube/config)
        self._connecting = asyncio.Lock()
        self._api: Any = None
        self._dynamic: Any = None
        self._refresh: asyncio.Task[None] | None = None
        self._resources: dict[tuple[str, str], Any] = {}

    async def _client(self) -> Any:
        """The dynamic client, connected on first use (config loaded, API discovery read)."""
        if self._dynamic is None:
            async with self._connecting:
                if self._dynamic is None:
                    configuration = client.Configuration()
                    try:
                        config.load_incluster_config(client_configuration=configuration)  # token re-read each minute
                    except config.ConfigException:
                        loader = await config.load_kube_config(
                            config_file=self._config_file, client_configuration=configuration
                        )
                        # Returns at once unless the user's token comes from an exec plugin (or GCP).
                        self._refresh = asyncio.create_task(config.refresh_token(loader, configuration))
                    self._api = client.ApiClient(configuration)
                    self._dynamic = await dynamic.DynamicClient(self._api)
        return self._dynamic

    async def close(self) -> None:
        if self._refresh is not None:
            self._refresh.cancel()
        if self._api is not None:
            await self._api.close()

    async def _resource(self, api_version: str, *, kind: str | None = None, plural: str | None = None) -> Any:
        key = (api_version, kind or f"/{plural}")
        found = self._resources.get(key)
        if found is None:
            resources = (await self._client()).resources
            if kind:
                found = await resources.get(api_version=api_version, kind=kind)
            else:
                # `resources.get(name=plural)` fails in kubernetes.aio 37.0.2 (it reads a List kind's
                # coroutine as its attributes): pick the plural from the group version's kinds.
                found = next(
                    resource
                    for resource in await resources.search(api_version=api_version)
                    if not isinstance(resource, dynamic.ResourceList) and resource.name == plural
                )
            self._resources[key] = found
        return found

    async def _call(self, request: Callable[[], Awaitable[Any]]) -> Json:
        """One call, tried again while throttled; its answer as plain JSON."""
        try:
            answer = await on_retry_after_error(THROTTLED, is_retry_after_response, request, sleep_func=self._sleep)
        except ApiException as error:
            raise _refused(error) from error
        out: Json = answer if isinstance(answer, dict) else answer.to_dict()  # a ResourceInstance
        return out

    async def apply(self, obj: Json, *, dry_run: bool = False) -> Json:
        resource = await self._resource(obj["apiVersion"], kind=obj["kind"])
        started = time.perf_counter()
        try:
            return await self._call(
                lambda: resource.server_side_apply(
                    body=obj,
                    field_manager=MANAGER,
                    force_conflicts=True,
                    dry_run="All" if dry_run else None,
                )
            )
        finally:
            if not dry_run:
                self._observe(obj["kind"], time.perf_counter() - started)

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> Json | None:
        resource = await self._resource(api_version, kind=kind)
        try:
            return await self._call(lambda: resource.get(name=name, namespace=namespace))
        except ApiError as error:
            if error.code == 404:
                return None
            raise

    async def merge_patch(self, api_version: str, kind: str, namespace: str, name: str, body: Json) -> bool:
        resource = await self._resource(api_version, kind=kind)
        try:
            await self._call(
                lambda: resource.patch(
                    body=body, name=name, namespace=namespace, content_type="application/merge-patch+json"
                )
            )
        except ApiError as error:
            if error.code == 404:
                return False
            raise
        return True

    async def pods(self, namespace: str, selector: Mapping[str, str]) -> list[Json]:
        resource = await self._resource("v1", kind="Pod")
        labels = ",".join(f"{key}={value}" for key, value in sorted(selector.items()))
        found = await self._call(lambda: resource.get(namespace=namespace, label_selector=labels))
        return list(found.get("items") or [])

    async def delete(self, api_version: str, kind: str, namespace: str, name: str) -> bool:
        resource = await self._resource(api_version, kind=kind)
        try:
            await self._call(lambda: resource.delete(name=name, namespace=namespace, propagation_policy="Background"))
        except ApiError as error:
            if error.code == 404:
                return False
            raise
        return True

    async def replace_status(self, path: str, status: Json) -> Json:
        api_version, namespace, plural, name = _split(path)
        resource = (await self._resource(api_version, plural=plural)).status  # the status subresource
        patch = [{"op": "add", "path": "/status", "value": status}]
        return await self._call(
            lambda: resource.patch(
                body=patch, name=name, namespace=namespace, content_type="application/json-patch+json"
            )
        )

    async def patch_metadata(self, path: str, metadata: Json) -> None:
        api_version, namespace, plural, name = _split(path)
        resource = await self._resource(api_version, plural=plural)
        await self._call(
            lambda: resource.patch(
                body={"metadata": metadata},
                name=name,
                namespace=namespace,
                content_type="application/merge-patch+json",
            )
        )

    async def event(self, involved: Json, *, type: str, reason: str, message: str) -> None:
        resource = await self._resource("v1", kind="Event")
        body = event_body(involved, type=type, reason=reason, message=message)
        await self._call(lambda: resource.create(body=body, namespace=involved["namespace"]))


class LibraryKube(AioKube):
    """`Kube`'s constructor, so that `specpilot.controller.main` builds this client in place of its own:
    the operator's credentials and session go unused (the library loads and keeps its own)."""

    opened: list[LibraryKube] = []

    def __init__(
        self,
        access: KubeAccess,
        session: aiohttp.ClientSession,
        *,
        observe: Callable[[str, float], None],
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        super().__init__(observe=observe, sleep=sleep)
        LibraryKube.opened.append(self)
        # Connect at start-up, as an operator on the library would, so the idle figures include it; a
        # failure here is met again (and raised) by the first call.
        connecting = asyncio.get_running_loop().create_task(self._client())
        connecting.add_done_callback(lambda task: task.cancelled() or task.exception())
        self._connecting_at_start = connecting

    async def close(self) -> None:
        self._connecting_at_start.cancel()
        await super().close()


def main(argv: Sequence[str] | None = None) -> int:
    """`specpilot ARGS`, its operator on this client."""
    run = operator_main.run

    async def run_then_close(cfg: operator_main.OperatorConfig) -> None:
        try:
            await run(cfg)
        finally:
            await asyncio.gather(*(kube.close() for kube in LibraryKube.opened))

    vars(operator_main).update(Kube=LibraryKube, run=run_then_close)  # the module's globals, as `run` reads them
    return cli.main(list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
