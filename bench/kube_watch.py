"""The router's list+watch (`specpilot.router.kube.Reflector`) against `kubernetes.aio`'s Watch.

N ConfigMaps in one namespace, each watched by a list+watch stream of its own (a field selector on
its name, as a router watches its routing table). Each client runs its N streams in a process of
its own, one client after the other; when all have listed, a driver updates every ConfigMap K
times, writing the wall-clock time into it. A stream records how long each update took to reach it
(API server write and watch delivery included, the same for both). The process reports its CPU
seconds (getrusage) while the updates ran, and in all with its start-up, and its peak RSS.

The library's side is written as its documentation shows it: `CoreV1Api.list_namespaced_config_map`,
then `kubernetes.aio.watch.Watch().stream(...)` from the list's resourceVersion, listing again on
410 Gone; each event's object arrives as a `V1ConfigMap` model.

Needs a running cluster, from KUBECONFIG (`make cluster-up`, then
`export KUBECONFIG=$PWD/.cluster/kubeconfig`):

    .venv/bin/python bench/kube_watch.py [--streams 100] [--updates 20] [--interval 0.5]
                                         [--clients own,kubernetes.aio]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes.aio import client, config, watch
from kubernetes.aio.client.exceptions import ApiException

from specpilot.controller.kube import Kube
from specpilot.kubeaccess import KubeAccess, load_access
from specpilot.router.kube import Reflector

NAMESPACE = "bench-watch"
LIBRARY = "kubernetes.aio"
CLIENTS = ("own", LIBRARY)


def configmap_name(index: int) -> str:
    return f"watched-{index:04d}"


class Deliveries:
    """What the streams of one process saw: the latency of each update, once per update."""

    def __init__(self, streams: int, updates: int) -> None:
        self.last = [0] * streams
        self.latencies: list[float] = []  # seconds
        self.listed: set[int] = set()
        self.updates = updates
        self.done = asyncio.Event()
        self.ready = asyncio.Event()
        self._remaining = streams  # streams short of the last update

    def listing(self, index: int) -> None:
        self.listed.add(index)
        if len(self.listed) == len(self.last):
            self.ready.set()

    def saw(self, index: int, data: dict[str, str] | None) -> None:
        """A stream's ConfigMap as it arrived (a list or a watch event)."""
        now = time.time()
        seq = int((data or {}).get("seq", "0"))
        if seq <= self.last[index]:
            return  # the listed state, or an update seen before (after a relist)
        self.last[index] = seq
        self.latencies.append(now - float((data or {})["sent"]))
        if seq == self.updates:
            self._remaining -= 1
            if not self._remaining:
                self.done.set()


async def own_streams(namespace: str, streams: int, deliveries: Deliveries) -> None:
    access = load_access()
    connector = aiohttp.TCPConnector(limit=streams + 10)  # one connection per watch, as the library's pool
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=30), cookie_jar=aiohttp.DummyCookieJar()
    ) as session:

        def reflector(index: int) -> Reflector:
            def changed(objects: list[dict[str, Any]]) -> None:
                deliveries.listing(index)
                deliveries.saw(index, objects[0].get("data") if objects else None)

            return Reflector(
                session=session,
                access=access,
                path=f"/api/v1/namespaces/{namespace}/configmaps",
                selector={"fieldSelector": f"metadata.name={configmap_name(index)}"},
                resource="configmaps",
                on_change=changed,
                on_restart=lambda *_: None,
            )

        await asyncio.gather(*(reflector(index).run() for index in range(streams)))


async def library_streams(namespace: str, streams: int, deliveries: Deliveries) -> None:
    configuration = client.Configuration()
    refresh = None
    try:
        config.load_incluster_config(client_configuration=configuration)
    except config.ConfigException:
        loader = await config.load_kube_config(client_configuration=configuration)
        refresh = asyncio.create_task(config.refresh_token(loader, configuration))
    configuration.connection_pool_maxsize = streams + 10
    async with client.ApiClient(configuration) as api:
        v1 = client.CoreV1Api(api)

        async def stream(index: int) -> None:
            selector = f"metadata.name={configmap_name(index)}"
            while True:
                listed = await v1.list_namespaced_config_map(namespace, field_selector=selector)
                deliveries.listing(index)
                deliveries.saw(index, listed.items[0].data if listed.items else None)
                try:
                    async with watch.Watch() as watcher:
                        async for event in watcher.stream(
                            v1.list_namespaced_config_map,
                            namespace,
                            field_selector=selector,
                            resource_version=listed.metadata.resource_version,
                            allow_watch_bookmarks=True,
                        ):
                            if event["type"] in ("ADDED", "MODIFIED"):
                                deliveries.saw(index, event["object"].data)
                except ApiException as error:
                    if error.status != 410:
                        raise  # 410 Gone: list again

        try:
            await asyncio.gather(*(stream(index) for index in range(streams)))
        finally:
            if refresh is not None:
                refresh.cancel()


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def rss_mib() -> float:
    match = re.search(r"VmRSS:\s+(\d+) kB", Path("/proc/self/status").read_text())
    return int(match.group(1)) / 1024 if match else float("nan")


async def child(args: argparse.Namespace) -> None:
    """One client's N streams: 'ready' once all listed, then a JSON report when every update arrived
    (or the deadline passed)."""
    deliveries = Deliveries(args.streams, args.updates)
    streams = own_streams if args.child == "own" else library_streams
    running = asyncio.create_task(streams(args.namespace, args.streams, deliveries))
    waiting = asyncio.create_task(deliveries.ready.wait())
    await asyncio.wait({running, waiting}, return_when=asyncio.FIRST_COMPLETED)
    if running.done():
        running.result()  # raises what stopped the streams
    print("ready", flush=True)
    cpu = cpu_seconds()
    with contextlib.suppress(TimeoutError):  # then report what arrived
        await asyncio.wait_for(deliveries.done.wait(), timeout=args.deadline)
    report = {
        "cpu_s": cpu_seconds() - cpu,
        "cpu_total_s": cpu_seconds(),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "rss_mib": rss_mib(),
        "latencies": deliveries.latencies,
    }
    print(json.dumps(report), flush=True)
    running.cancel()
    os._exit(0)  # leave the watches as they are: the figures are out


async def api_call(session: aiohttp.ClientSession, access: KubeAccess, method: str, path: str, body: Any = None) -> int:
    headers = {"Content-Type": "application/json"}
    token = access.token()
    if token:
        headers["Authorization"] = token
    data = None if body is None else json.dumps(body)
    async with session.request(method, access.server + path, data=data, headers=headers, ssl=access.ssl()) as resp:
        await resp.read()
        return resp.status


async def update_all(kube: Kube, streams: int, seq: int, gate: asyncio.Semaphore) -> None:
    async def one(index: int) -> None:
        async with gate:
            body = {"data": {"seq": str(seq), "sent": repr(time.time())}}
            await kube.merge_patch("v1", "ConfigMap", NAMESPACE, configmap_name(index), body)

    await asyncio.gather(*(one(index) for index in range(streams)))


async def run_client(name: str, args: argparse.Namespace, kube: Kube) -> dict[str, Any]:
    gate = asyncio.Semaphore(20)

    async def reset(index: int) -> None:
        meta = {"name": configmap_name(index), "namespace": NAMESPACE}
        async with gate:
            await kube.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"seq": "0"}})

    await asyncio.gather(*(reset(index) for index in range(args.streams)))  # seq 0 before the client lists
    deadline = args.deadline + args.updates * args.interval + 5  # from the child's 'ready'
    argv = [sys.executable, __file__, "--child", name, "--namespace", NAMESPACE]
    argv += ["--streams", str(args.streams), "--updates", str(args.updates), "--deadline", str(deadline)]
    process = await asyncio.create_subprocess_exec(*argv, stdout=subprocess.PIPE)
    assert process.stdout is not None
    try:
        line = await asyncio.wait_for(process.stdout.readline(), timeout=180)
        if line.strip() != b"ready":
            raise SystemExit(f"{name}: the streams did not start (exit {await process.wait()})")
        await asyncio.sleep(1.0)  # every watch request sent after its list
        for seq in range(1, args.updates + 1):
            started = time.monotonic()
            await update_all(kube, args.streams, seq, gate)
            await asyncio.sleep(max(0.0, args.interval - (time.monotonic() - started)))
        line = await asyncio.wait_for(process.stdout.readline(), timeout=deadline + 30)
        report: dict[str, Any] = json.loads(line)
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()
    return report


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def table(reports: dict[str, dict[str, Any]], args: argparse.Namespace) -> list[str]:
    expected = args.streams * args.updates
    rows: list[tuple[str, str, Any]] = [
        ("CPU while updating (s)", ".2f", lambda r: r["cpu_s"]),
        ("CPU per delivered update (ms)", ".3f", lambda r: 1000 * r["cpu_s"] / max(len(r["latencies"]), 1)),
        ("CPU in all, start-up included (s)", ".2f", lambda r: r["cpu_total_s"]),
        ("peak RSS (MiB)", ".1f", lambda r: r["peak_rss_mib"]),
        ("RSS at the end (MiB)", ".1f", lambda r: r["rss_mib"]),
        ("delivery latency p50 (ms)", ".1f", lambda r: 1000 * quantile(r["latencies"], 0.5)),
        ("delivery latency p99 (ms)", ".1f", lambda r: 1000 * quantile(r["latencies"], 0.99)),
        (f"updates delivered (of {expected})", ".0f", lambda r: len(r["latencies"])),
    ]
    both = len(reports) == len(CLIENTS)
    lines = [
        f"{args.streams} list+watch streams on ConfigMaps, {args.updates} updates each, {args.interval} s apart;"
        " one process per client",
        f"  {'':<36}" + "".join(f" {name:>14}" for name in reports) + (f" {'library/own':>12}" if both else ""),
    ]
    for label, fmt, value in rows:
        values = [float(value(report)) for report in reports.values()]
        line = f"  {label:<36}" + "".join(f" {v:>14{fmt}}" for v in values)
        if both:
            line += f" {values[1] / values[0]:>12.2f}" if values[0] else f" {'-':>12}"
        lines.append(line)
    return lines


async def driver(args: argparse.Namespace) -> None:
    access = load_access()
    reports: dict[str, dict[str, Any]] = {}
    async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as session:
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        for _ in range(240):  # a previous run's namespace may still be going
            status = await api_call(session, access, "POST", "/api/v1/namespaces", namespace)
            if status != 409:
                break
            await asyncio.sleep(0.5)
        if status not in (200, 201):
            raise SystemExit(f"could not create namespace {NAMESPACE} (HTTP {status}): delete what is left of it")
        kube = Kube(access, session, observe=lambda kind, seconds: None)
        try:
            for name in args.clients:
                print(f"measuring {args.streams} streams on {name} ...", file=sys.stderr, flush=True)
                reports[name] = await run_client(name, args, kube)
        finally:
            await api_call(session, access, "DELETE", f"/api/v1/namespaces/{NAMESPACE}")
    print()
    print("\n".join(table(reports, args)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=100, help="list+watch streams, one ConfigMap each")
    parser.add_argument("--updates", type=int, default=20, help="updates of each ConfigMap")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between rounds of updates")
    parser.add_argument("--deadline", type=float, default=60.0, help="seconds a client may take past the updates")
    parser.add_argument(
        "--clients",
        default=",".join(CLIENTS),
        type=lambda text: [name for name in text.split(",") if name],
        help="own (Reflector), kubernetes.aio, or both in that order (comma-separated)",
    )
    parser.add_argument("--child", choices=CLIENTS, help=argparse.SUPPRESS)
    parser.add_argument("--namespace", default=NAMESPACE, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        asyncio.run(child(args))
        return 0
    unknown = [name for name in args.clients if name not in CLIENTS]
    if unknown:
        parser.error(f"unknown client {', '.join(unknown)}: choose from {', '.join(CLIENTS)}")
    if not os.environ.get("KUBECONFIG"):
        print(
            "kube_watch.py needs a running cluster and KUBECONFIG naming it: `make cluster-up`, then\n"
            "  export KUBECONFIG=$PWD/.cluster/kubeconfig",
            file=sys.stderr,
        )
        return 2
    asyncio.run(driver(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
