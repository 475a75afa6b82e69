"""The operator's Kubernetes calls: server-side apply, delete, status, Events; async, on Kopf's loop.

A thin aiohttp client on the event loop Kopf already runs, with bodies kept as plain JSON. The
package's asyncio flavour, `kubernetes.aio`, was measured in its place on the operator's own load
(`bench/operator_footprint.py --client both`) and on the router's watches (`bench/kube_watch.py`):
it costs more CPU and memory (its models and per-watch clients), and retries a 429 only when told
to. Credentials come from `specpilot.kubeaccess`, the token refreshed per request. A call the API
server throttles (429) is tried again after the wait its Retry-After asks for, a few times, then
reported.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import aiohttp

from specpilot.kubeaccess import KubeAccess, retry_after
from specpilot.wire.names import MANAGER

Json = dict[str, Any]

# (apiVersion, kind) -> resource plural, for the kinds a pilot owns.
RESOURCES: Mapping[tuple[str, str], str] = {
    ("v1", "ServiceAccount"): "serviceaccounts",
    ("v1", "ConfigMap"): "configmaps",
    ("v1", "Service"): "services",
    ("v1", "Pod"): "pods",
    ("v1", "Event"): "events",
    ("v1", "Secret"): "secrets",
    ("apps/v1", "Deployment"): "deployments",
    ("batch/v1", "Job"): "jobs",
    ("rbac.authorization.k8s.io/v1", "Role"): "roles",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "rolebindings",
}


# Times a call the API server throttled (429) is tried again, after the wait it asks for.
THROTTLED_RETRIES = 3


class ApiError(Exception):
    """The API server refused a call."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


def object_path(api_version: str, kind: str, namespace: str, name: str | None = None) -> str:
    plural = RESOURCES[(api_version, kind)]
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    path = f"{base}/namespaces/{namespace}/{plural}"
    return f"{path}/{name}" if name is not None else path


class Kube:
    """The calls the operator makes; one per method, each raising `ApiError` on refusal."""

    def __init__(
        self,
        access: KubeAccess,
        session: aiohttp.ClientSession,
        *,
        observe: Callable[[str, float], None],
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._access = access
        self._session = session
        self._observe = observe  # (kind, seconds) of each apply, for the operator's metrics
        self._sleep = sleep

    async def _call(
        self, method: str, path: str, *, body: Any = None, content_type: str = "application/json", **params: str
    ) -> Json | None:
        data = None if body is None else json.dumps(body, separators=(",", ":"))
        renewed = False
        for attempt in range(THROTTLED_RETRIES + 1):
            headers = {"Accept": "application/json", "Content-Type": content_type}
            token = self._access.token()
            if token:
                headers["Authorization"] = token
            async with self._session.request(
                method, self._access.server + path, params=params, data=data, headers=headers, ssl=self._access.ssl()
            ) as resp:
                text = await resp.text()
                status, wait = resp.status, retry_after(resp.headers)
            if status == 401 and not renewed:  # expired credentials: renewed (with backoff), asked once more
                self._access.rejected()
                renewed = True
                continue
            if status != 429 or attempt == THROTTLED_RETRIES:
                break
            await self._sleep(wait)  # throttled (API priority and fairness): as long as the server asks
        if status == 404 and method in ("GET", "DELETE"):
            return None
        if status >= 300:
            try:
                message = str(json.loads(text).get("message", text))
            except ValueError:
                message = text
            raise ApiError(status, message[:2000])
        return json.loads(text) if text else {}

    async def apply(self, obj: Json, *, dry_run: bool = False) -> Json:
        """Server-side apply under the operator's field manager, taking over conflicting fields;
        `dry_run` has the server validate and admit it without persisting anything."""
        meta = obj["metadata"]
        path = object_path(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
        params = {"fieldManager": MANAGER, "force": "true", **({"dryRun": "All"} if dry_run else {})}
        started = time.perf_counter()
        try:
            out = await self._call("PATCH", path, body=obj, content_type="application/apply-patch+yaml", **params)
        finally:
            if not dry_run:
                self._observe(obj["kind"], time.perf_counter() - started)
        return out or {}

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> Json | None:
        return await self._call("GET", object_path(api_version, kind, namespace, name))

    async def merge_patch(self, api_version: str, kind: str, namespace: str, name: str, body: Json) -> bool:
        """A JSON merge patch of an object the operator does not own (a taken-over Service); False when
        it is gone."""
        path = object_path(api_version, kind, namespace, name)
        try:
            await self._call("PATCH", path, body=body, content_type="application/merge-patch+json")
        except ApiError as error:
            if error.code == 404:
                return False
            raise
        return True

    async def pods(self, namespace: str, selector: Mapping[str, str]) -> list[Json]:
        """The namespace's pods with every label of `selector` (a workload's, which the operator does not own)."""
        labels = ",".join(f"{key}={value}" for key, value in sorted(selector.items()))
        found = await self._call("GET", object_path("v1", "Pod", namespace), labelSelector=labels)
        return list((found or {}).get("items") or [])

    async def pod(self, namespace: str, name: str) -> Json | None:
        """One pod by name, listed (`list` is what the operator holds on pods), or None."""
        found = await self._call("GET", object_path("v1", "Pod", namespace), fieldSelector=f"metadata.name={name}")
        items = (found or {}).get("items") or []
        return dict(items[0]) if items else None

    async def delete(self, api_version: str, kind: str, namespace: str, name: str) -> bool:
        """Delete in the background (dependents are collected after); False when already gone."""
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        return await self._call("DELETE", object_path(api_version, kind, namespace, name), body=body) is not None

    async def replace_status(self, path: str, status: Json) -> Json:
        """Set the whole status of a custom resource through its status subresource, in one write."""
        patch = [{"op": "add", "path": "/status", "value": status}]
        return await self._call("PATCH", f"{path}/status", body=patch, content_type="application/json-patch+json") or {}

    async def patch_metadata(self, path: str, metadata: Json) -> None:
        """Merge `metadata` into an object's metadata (a None value removes a key)."""
        await self._call("PATCH", path, body={"metadata": metadata}, content_type="application/merge-patch+json")

    async def event(self, involved: Json, *, type: str, reason: str, message: str) -> None:
        """A core/v1 Event on `involved` (apiVersion, kind, namespace, name, uid)."""
        body = event_body(involved, type=type, reason=reason, message=message)
        await self._call("POST", object_path("v1", "Event", involved["namespace"]), body=body)


def event_body(involved: Json, *, type: str, reason: str, message: str) -> Json:
    """A core/v1 Event on `involved`, from the operator, now."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{involved['name']}.", "namespace": involved["namespace"]},
        "involvedObject": involved,
        "type": type,
        "reason": reason,
        "message": message[:1024],
        "source": {"component": MANAGER},
        "reportingComponent": MANAGER,
        "reportingInstance": MANAGER,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
