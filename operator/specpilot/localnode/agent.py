"""`specpilot localnode`: register a Node, watch its pods, run them as local processes.

Each pod gets its own IP on the loopback interface (from --pod-cidr) so that every pod can bind
the same port, and the EndpointSlice controller publishes real, reachable addresses. There is no kube-proxy or DNS:
clients find pods through EndpointSlices.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import ipaddress
import json
import logging
import os
import shutil
import signal
import struct
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import yaml
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from specpilot.localnode import podspec
from specpilot.localnode.podspec import Json
from specpilot.localnode.runtime import Container, PodRuntime, now_iso

log = logging.getLogger("specpilot.localnode")

LEASE_SECONDS = 40
HEARTBEAT_SECONDS = 10
AUTHORIZER_RETRIES = 10
SHUTDOWN_GRACE_SECONDS = 2.0
T = TypeVar("T")


def listening_addresses() -> set[str]:
    """IPv4 addresses with a listening TCP socket on this machine, from /proc/net/tcp."""
    found = set()
    with contextlib.suppress(OSError), open("/proc/net/tcp") as table:
        next(table, None)
        for line in table:
            fields = line.split()
            if len(fields) > 3 and fields[3] == "0A":  # TCP_LISTEN
                address = int(fields[1].split(":")[0], 16)  # in host byte order
                found.add(str(ipaddress.IPv4Address(struct.pack("=I", address))))
    return found


class IpPool:
    """Pod IPs on the loopback interface, handed out in order and returned on pod removal.

    An address that something already listens on (a process of an earlier cluster, say) is
    skipped: a pod given it could not bind, and its probes would reach the stranger.
    """

    def __init__(self, cidr: str, busy: Callable[[], set[str]] = listening_addresses) -> None:
        self._hosts = ipaddress.ip_network(cidr).hosts()
        self._free: list[str] = []
        self._busy = busy

    def take(self) -> str:
        busy = self._busy()
        for i, ip in enumerate(self._free):
            if ip not in busy:
                return self._free.pop(i)
        for host in self._hosts:
            if str(host) not in busy:
                return str(host)
        raise RuntimeError("pod network exhausted")

    def give(self, ip: str) -> None:
        self._free.append(ip)


class Agent:
    """The node agent: owns the Node object, its Lease and one PodRuntime per pod."""

    def __init__(self, args: argparse.Namespace, api: client.ApiClient) -> None:
        self.args = args
        self.core = client.CoreV1Api(api)
        self.coord = client.CoordinationV1Api(api)
        self.node = args.node_name
        self.state_dir = Path(args.state_dir)
        self.pods: dict[str, PodRuntime] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.shutting_down = False
        self.ips = IpPool(args.pod_cidr)
        bindir = str(Path(sys.executable).parent)
        self.base_env = {
            "PATH": f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "HOME": os.environ.get("HOME", "/root"),
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            "PYTHONUNBUFFERED": "1",
        }

    # --- node ---------------------------------------------------------------------------------

    def node_status(self) -> Json:
        alloc = {
            "cpu": str(self.args.cpus),
            "memory": self.args.memory,
            "pods": "110",
            "nvidia.com/gpu": str(self.args.gpus),
            "ephemeral-storage": "100Gi",
        }
        now = now_iso()
        ready = {
            "type": "Ready",
            "status": "True",
            "reason": "LocalNodeReady",
            "message": "specpilot local node agent is running",
            "lastHeartbeatTime": now,
            "lastTransitionTime": self._ready_since,
        }
        return {
            "capacity": alloc,
            "allocatable": alloc,
            "conditions": [ready]
            + [
                {
                    "type": t,
                    "status": "False",
                    "reason": f"No{t}",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": self._ready_since,
                }
                for t in ("MemoryPressure", "DiskPressure", "PIDPressure")
            ],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": self.node}],
            "nodeInfo": {
                "machineID": "specpilot-local",
                "systemUUID": "specpilot-local",
                "bootID": str(os.getpid()),
                "kernelVersion": os.uname().release,
                "osImage": "specpilot local node",
                "containerRuntimeVersion": "local://processes",
                "kubeletVersion": self._version,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }

    def register(self) -> None:
        self._ready_since = now_iso()
        self._version = client.VersionApi(self.core.api_client).get_code().git_version
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.node,
                "labels": {
                    "kubernetes.io/hostname": self.node,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "nvidia.com/gpu.present": "true",
                    "specpilot.io/local-node": "true",
                },
            },
        }
        with contextlib.suppress(ApiException):
            self.core.create_node(body)
        self.core.patch_node_status(self.node, {"status": self.node_status()})
        log.info("node %s registered with %s nvidia.com/gpu", self.node, self.args.gpus)

    def heartbeat(self) -> None:
        """Renew the Lease and refresh the Ready condition, as a kubelet does."""
        ns, now = "kube-node-lease", datetime.now(UTC)
        try:
            lease = self.coord.read_namespaced_lease(self.node, ns)
            lease.spec.renew_time = now
            lease.spec.holder_identity = self.node
            self.coord.replace_namespaced_lease(self.node, ns, lease)
        except ApiException as exc:
            if exc.status != 404:
                raise
            self.coord.create_namespaced_lease(
                ns,
                {
                    "metadata": {
                        "name": self.node,
                        "ownerReferences": [
                            {
                                "apiVersion": "v1",
                                "kind": "Node",
                                "name": self.node,
                                "uid": self.core.read_node(self.node).metadata.uid,
                            }
                        ],
                    },
                    "spec": {"holderIdentity": self.node, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": now},
                },
            )
        self.core.patch_node_status(self.node, {"status": self.node_status()})

    async def heartbeats(self) -> None:
        while True:
            try:
                await asyncio.to_thread(self.heartbeat)
            except Exception as exc:
                log.warning("heartbeat failed: %s", exc)
            await asyncio.sleep(HEARTBEAT_SECONDS)

    # --- pods ---------------------------------------------------------------------------------

    def watch_pods(self, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[tuple[str, Json]]) -> None:
        """List+watch this node's pods (thread); relist on expiry or error."""
        selector = f"spec.nodeName={self.node}"
        while True:
            try:
                listing = self.core.list_pod_for_all_namespaces(field_selector=selector, _preload_content=False)
                data = json.loads(listing.data)
                for pod in data["items"]:
                    loop.call_soon_threadsafe(queue.put_nowait, ("SYNC", pod))
                listed = {"metadata": {"uid": "", "listed": [p["metadata"]["uid"] for p in data["items"]]}}
                loop.call_soon_threadsafe(queue.put_nowait, ("LISTED", listed))
                rv = data["metadata"]["resourceVersion"]
                for event in watch.Watch().stream(
                    self.core.list_pod_for_all_namespaces,
                    field_selector=selector,
                    resource_version=rv,
                    timeout_seconds=300,
                    allow_watch_bookmarks=True,
                ):
                    if event["type"] == "ERROR":
                        break
                    if event["type"] != "BOOKMARK":
                        loop.call_soon_threadsafe(queue.put_nowait, (event["type"], event["raw_object"]))
            except Exception as exc:
                log.warning("pod watch interrupted: %s; relisting", exc)
                threading.Event().wait(1.0)

    async def handle(self, kind: str, pod: Json) -> None:
        if kind == "LISTED":  # pods deleted while the watch was down: stop them now
            for uid in set(self.pods) - set(pod["metadata"]["listed"]):
                self.pods[uid].request_stop(0)
            return
        uid = pod["metadata"]["uid"]
        runtime = self.pods.get(uid)
        if kind == "DELETED":
            if runtime is not None:
                runtime.request_stop(0)
            return
        if pod["metadata"].get("deletionTimestamp"):
            if runtime is not None:
                runtime.request_stop(float(pod["metadata"].get("deletionGracePeriodSeconds") or 0))
            else:
                await self.remove(pod)
            return
        if runtime is not None:
            runtime.observed(pod.get("status") or {})
        elif pod.get("status", {}).get("phase") not in {"Succeeded", "Failed"}:
            await self.admit(pod)

    async def admit(self, pod: Json) -> None:
        meta, uid = pod["metadata"], pod["metadata"]["uid"]
        ip = self.ips.take()
        pod_dir = self.state_dir / "pods" / f"{meta['namespace']}_{meta['name']}_{uid}"
        pod_dir.mkdir(parents=True, exist_ok=True)
        refs = podspec.PodRefs(
            name=meta["name"],
            namespace=meta["namespace"],
            uid=uid,
            node_name=self.node,
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
        containers = [
            await asyncio.to_thread(
                self.container, c, refs=refs, base=base, pod_dir=pod_dir, ip=ip, credentials_error=credentials_error
            )
            for c in pod["spec"]["containers"]
        ]

        async def report(status: Json) -> None:
            await asyncio.to_thread(
                self.core.patch_namespaced_pod_status, meta["name"], meta["namespace"], {"status": status}
            )

        runtime = PodRuntime(pod, pod_ip=ip, host_ip="127.0.0.1", pod_dir=pod_dir, containers=containers, report=report)
        self.pods[uid] = runtime
        self.tasks[uid] = asyncio.create_task(self.drive(runtime))
        log.info("admitted %s/%s on %s", meta["namespace"], meta["name"], ip)

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
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "local", "cluster": {"server": cfg.host, "certificate-authority": self.args.ca_file}}
            ],
            "users": [{"name": "sa", "user": {"token": req.status.token}}],
            "contexts": [{"name": "sa", "context": {"cluster": "local", "user": "sa", "namespace": meta["namespace"]}}],
            "current-context": "sa",
        }
        path.write_text(yaml.safe_dump(doc))
        path.chmod(0o600)
        return path

    async def drive(self, runtime: PodRuntime) -> None:
        try:
            await runtime.run()
        finally:
            if not self.shutting_down:
                await self.remove(runtime.pod)
            uid = runtime.pod["metadata"]["uid"]
            self.pods.pop(uid, None)
            self.tasks.pop(uid, None)
            self.ips.give(runtime.pod_ip)

    async def remove(self, pod: Json) -> None:
        """Delete the pod object once its processes are gone (grace 0, pinned to its uid)."""
        meta = pod["metadata"]
        body = {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}}
        try:
            await asyncio.to_thread(self.core.delete_namespaced_pod, meta["name"], meta["namespace"], body=body)
            log.info("removed %s/%s", meta["namespace"], meta["name"])
        except ApiException as exc:
            if exc.status not in (404, 409):
                log.warning("delete of %s/%s failed: %s", meta["namespace"], meta["name"], exc.reason)

    async def shutdown(self) -> None:
        """Agent stop: stop every pod's runtime (so nothing restarts its processes) and wait for
        its processes to end; pod objects stay, as they do when a kubelet stops."""
        self.shutting_down = True
        for runtime in self.pods.values():
            runtime.request_stop(SHUTDOWN_GRACE_SECONDS)
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)

    async def serve(self) -> None:
        await asyncio.to_thread(self.register)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Json]] = asyncio.Queue()
        threading.Thread(target=self.watch_pods, args=(loop, queue), daemon=True).start()
        beat = asyncio.create_task(self.heartbeats())
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        getter: asyncio.Task[tuple[str, Json]] | None = None
        while not stop.is_set():
            getter = getter or asyncio.create_task(queue.get())
            stopper = asyncio.create_task(stop.wait())
            done, _ = await asyncio.wait({getter, stopper}, return_when=asyncio.FIRST_COMPLETED)
            stopper.cancel()
            if getter in done:
                kind, pod = getter.result()
                getter = None
                try:
                    await self.handle(kind, pod)
                except Exception:
                    log.exception("handling %s of pod %s failed", kind, pod.get("metadata", {}).get("name"))
        beat.cancel()
        await self.shutdown()


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


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="specpilot localnode", description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True, help="credentials of the node (system:node:<name>)")
    parser.add_argument("--node-name", default="specpilot-local")
    parser.add_argument("--gpus", type=int, default=8, help="nvidia.com/gpu capacity to advertise")
    parser.add_argument("--cpus", type=int, default=16, help="cpu capacity to advertise")
    parser.add_argument("--memory", default="128Gi", help="memory capacity to advertise")
    parser.add_argument(
        "--image", action="append", default=None, help="image repository this node runs as local processes (repeatable)"
    )
    parser.add_argument(
        "--pod-cidr", default="198.18.0.0/16", help="pod IP range, routed to the loopback interface (see cluster.sh)"
    )
    parser.add_argument("--state-dir", default=".cluster/node", help="pod directories and container logs")
    parser.add_argument("--api-server", default=None, help="API server URL written into pods' kubeconfigs")
    parser.add_argument("--ca-file", default=None, help="CA bundle written into pods' kubeconfigs")
    args = parser.parse_args(argv)
    args.image = args.image or ["specpilot/specpilot", "ghcr.io/specpilot/specpilot"]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    api = config.new_client_from_config(config_file=args.kubeconfig)
    asyncio.run(Agent(args, api).serve())
    return 0
