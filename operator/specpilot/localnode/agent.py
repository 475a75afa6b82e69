"""`specpilot localnode`: register a Node, watch its pods, run them as local processes.

Each pod gets its own IP on the loopback interface (from --pod-cidr) so that every pod can bind
the same port, and the EndpointSlice controller publishes real, reachable addresses. There is no kube-proxy or DNS:
clients find pods through EndpointSlices.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import json
import logging
import os
import signal
import struct
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from specpilot.localnode.containers import PodSetup
from specpilot.localnode.node import NodeHeartbeat
from specpilot.localnode.podspec import Json
from specpilot.localnode.runtime import PodRuntime

log = logging.getLogger("specpilot.localnode")

SHUTDOWN_GRACE_SECONDS = 2.0


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
    """The node agent: keeps the Node object and its Lease fresh, and runs one PodRuntime per pod."""

    def __init__(self, args: argparse.Namespace, api: client.ApiClient) -> None:
        self.args = args
        self.core = client.CoreV1Api(api)
        self.node = args.node_name
        self.state_dir = Path(args.state_dir)
        self.pods: dict[str, PodRuntime] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.shutting_down = False
        self.ips = IpPool(args.pod_cidr)
        bindir = str(Path(sys.executable).parent)
        base_env = {
            "PATH": f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "HOME": os.environ.get("HOME", "/root"),
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            "PYTHONUNBUFFERED": "1",
        }
        self.setup = PodSetup(args, self.core, base_env)
        self.heartbeat = NodeHeartbeat(args, self.core, client.CoordinationV1Api(api))

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
        containers = await self.setup.containers(pod, pod_dir, ip)

        async def report(status: Json) -> None:
            await asyncio.to_thread(
                self.core.patch_namespaced_pod_status, meta["name"], meta["namespace"], {"status": status}
            )

        runtime = PodRuntime(pod, pod_ip=ip, host_ip="127.0.0.1", pod_dir=pod_dir, containers=containers, report=report)
        self.pods[uid] = runtime
        self.tasks[uid] = asyncio.create_task(self.drive(runtime))
        log.info("admitted %s/%s on %s", meta["namespace"], meta["name"], ip)

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
        await asyncio.to_thread(self.heartbeat.register)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Json]] = asyncio.Queue()
        threading.Thread(target=watch_pods, args=(self.core, self.node, loop, queue), daemon=True).start()
        beat = asyncio.create_task(self.heartbeat.run())
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


def watch_pods(
    core: client.CoreV1Api, node: str, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[tuple[str, Json]]
) -> None:
    """List+watch the pods bound to `node` (thread), queueing each for the loop; relist on expiry or error."""
    selector = f"spec.nodeName={node}"
    while True:
        try:
            listing = core.list_pod_for_all_namespaces(field_selector=selector, _preload_content=False)
            data = json.loads(listing.data)
            for pod in data["items"]:
                loop.call_soon_threadsafe(queue.put_nowait, ("SYNC", pod))
            listed = {"metadata": {"uid": "", "listed": [p["metadata"]["uid"] for p in data["items"]]}}
            loop.call_soon_threadsafe(queue.put_nowait, ("LISTED", listed))
            rv = data["metadata"]["resourceVersion"]
            for event in watch.Watch().stream(
                core.list_pod_for_all_namespaces,
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
