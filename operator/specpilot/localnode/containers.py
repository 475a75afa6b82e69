"""A pod's containers as this node runs them: each one's argv, env and probes, or the waiting reason
that keeps it from running; the pod's service-account credentials, and the configMap and secret
values its env reads, come through the API as they do for a kubelet."""

from __future__ import annotations

import argparse
import asyncio
import base64
import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from specpilot.localnode import podspec
from specpilot.localnode.podspec import Json
from specpilot.localnode.runtime import Container

log = logging.getLogger("specpilot.localnode")

AUTHORIZER_RETRIES = 10
T = TypeVar("T")


def authorized(call: Callable[..., T], *args: Any, lagging: tuple[int, ...] = (403,)) -> T:
    """`call`, retried for a few seconds on a status in `lagging` (run it in a thread): the API
    server's node authorizer learns of a newly bound pod, and so of its ServiceAccount and
    configMaps, a moment after the binding that told us of it."""
    for attempt in range(AUTHORIZER_RETRIES):
        try:
            return call(*args)
        except ApiException as exc:
            if exc.status not in lagging or attempt == AUTHORIZER_RETRIES - 1:
                raise
            time.sleep(0.3)
    raise AssertionError("unreachable")


def kubeconfig(*, server: str, ca_file: str | None, token: str, namespace: str) -> Json:
    """A kubeconfig that authenticates with a service-account `token`, in `namespace` by default."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": {"server": server, "certificate-authority": ca_file}}],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "local", "user": "sa", "namespace": namespace}}],
        "current-context": "sa",
    }


class PodSetup:
    """Prepares the containers of the pods this node admits."""

    def __init__(self, args: argparse.Namespace, core: client.CoreV1Api, base_env: dict[str, str]) -> None:
        self.args = args
        self.core = core
        self.base_env = base_env

    async def containers(self, pod: Json, pod_dir: Path, ip: str) -> list[Container]:
        """The pod's containers at `ip`, their files under `pod_dir`; with a service account, their env
        names a kubeconfig of its token (or, without one, each waits with the reason)."""
        meta = pod["metadata"]
        refs = podspec.PodRefs(
            name=meta["name"],
            namespace=meta["namespace"],
            uid=meta["uid"],
            node_name=self.args.node_name,
            service_account=pod["spec"].get("serviceAccountName", "default"),
            pod_ip=ip,
            host_ip="127.0.0.1",
        )
        base = dict(self.base_env)
        credentials_error = ""
        if pod["spec"].get("automountServiceAccountToken", True) and pod["spec"].get("serviceAccountName"):
            try:
                base["KUBECONFIG"] = str(
                    # 404 too: the API server may not serve the just-bound pod yet, which the token binds to
                    await asyncio.to_thread(authorized, self.pod_kubeconfig, pod, pod_dir, lagging=(403, 404))
                )
            except ApiException as exc:
                credentials_error = f"no service-account token for the pod: {exc.status} {exc.reason}"
                log.warning("%s/%s: %s", meta["namespace"], meta["name"], credentials_error)
        return [
            await asyncio.to_thread(
                self.container, c, refs=refs, base=base, pod_dir=pod_dir, ip=ip, credentials_error=credentials_error
            )
            for c in pod["spec"]["containers"]
        ]

    def container(
        self, spec: Json, *, refs: podspec.PodRefs, base: dict[str, str], pod_dir: Path, ip: str, credentials_error: str
    ) -> Container:
        image = spec.get("image", "")
        state = podspec.ContainerState(name=spec["name"], image=image, state="waiting", reason="ContainerCreating")
        argv: list[str] | None = None
        env: dict[str, str] = {}
        readiness = liveness = None
        if credentials_error:
            state = podspec.ContainerState(
                name=spec["name"],
                image=image,
                state="waiting",
                reason=podspec.REASON_BAD_CONFIG,
                message=credentials_error,
            )
        elif not podspec.is_runnable(image, self.args.image):
            state = podspec.ContainerState(
                name=spec["name"],
                image=image,
                state="waiting",
                reason=podspec.REASON_NOT_RUNNABLE,
                message=podspec.not_runnable_message(image, self.args.image),
            )
        else:
            try:
                env = podspec.container_env(spec, refs, lookup=lambda *a: self.lookup(refs.namespace, *a), base=base)
                argv = podspec.container_argv(spec, env)
                readiness = podspec.parse_probe(spec.get("readinessProbe"), spec, ip)
                liveness = podspec.parse_probe(spec.get("livenessProbe"), spec, ip)
                if shutil.which(argv[0], path=env["PATH"]) is None:
                    raise ValueError(f"executable {argv[0]!r} not found on this node's PATH")
            except (ValueError, KeyError, ApiException) as exc:
                argv = None
                state = podspec.ContainerState(
                    name=spec["name"], image=image, state="waiting", reason=podspec.REASON_BAD_CONFIG, message=str(exc)
                )
        return Container(
            spec=spec,
            argv=argv,
            env=env,
            log_path=pod_dir / f"{spec['name']}.log",
            readiness=readiness,
            liveness=liveness,
            state=state,
        )

    def lookup(self, namespace: str, kind: str, name: str, key: str | None, optional: bool) -> Any:
        """configMap/secret values for env, read through the API (as the kubelet does)."""
        try:
            if kind.startswith("configMap"):
                data = authorized(self.core.read_namespaced_config_map, name, namespace).data or {}
            else:
                raw = authorized(self.core.read_namespaced_secret, name, namespace).data or {}
                data = {k: base64.b64decode(v).decode() for k, v in raw.items()}
        except ApiException as exc:
            if exc.status == 404 and optional:
                return None
            raise ValueError(f"{kind} {namespace}/{name}: {exc.reason}") from exc
        if key is None:
            return data
        if key not in data:
            if optional:
                return None
            raise ValueError(f"{kind} {namespace}/{name} has no key {key!r}")
        return data[key]

    def pod_kubeconfig(self, pod: Json, pod_dir: Path) -> Path:
        """A bound service-account token for the pod, written as a kubeconfig the pod's process reads."""
        meta = pod["metadata"]
        req = self.core.create_namespaced_service_account_token(
            pod["spec"]["serviceAccountName"],
            meta["namespace"],
            {
                "spec": {
                    "expirationSeconds": 86400,
                    "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]},
                }
            },
        )
        cfg = self.core.api_client.configuration
        path = pod_dir / "kubeconfig"
        doc = kubeconfig(
            server=cfg.host, ca_file=self.args.ca_file, token=req.status.token, namespace=meta["namespace"]
        )
        path.write_text(yaml.safe_dump(doc))
        path.chmod(0o600)
        return path
