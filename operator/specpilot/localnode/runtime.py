"""One pod on the local node: its container processes, probes, restarts and graceful stop."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import aiohttp

from specpilot.localnode import podspec
from specpilot.localnode.podspec import ContainerState, Json, Probe

log = logging.getLogger("specpilot.localnode")

RESTART_BACKOFF_BASE = 1.0
RESTART_BACKOFF_MAX = 30.0


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int) -> Callable[[], None]:
    """A pre-exec hook: the container gets SIGKILL when the node agent dies, however it dies.

    Containers run in sessions of their own, so nothing else would end them with a killed agent,
    and an orphan would hold its pod IP and port against the next cluster.
    """

    def hook() -> None:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the agent died before the hook ran
            os._exit(137)

    return hook


async def run_probe(probe: Probe) -> bool:
    """One probe attempt, as the kubelet makes it: HTTP 200-399, a TCP connect, or exit code 0."""
    try:
        if probe.kind == "http":
            timeout = aiohttp.ClientTimeout(total=probe.timeout)
            async with aiohttp.ClientSession(timeout=timeout) as session, session.get(probe.target) as resp:
                return 200 <= resp.status < 400
        if probe.kind == "tcp":
            host, port = probe.target.rsplit(":", 1)
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), probe.timeout)
            writer.close()
            return True
        proc = await asyncio.create_subprocess_exec(
            *probe.target.split("\0"), stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
        )
        try:
            return await asyncio.wait_for(proc.wait(), probe.timeout) == 0
        except TimeoutError:
            proc.kill()
            return False
    except (OSError, aiohttp.ClientError, TimeoutError):
        return False


@dataclass
class Container:
    """A container's process and the counters the kubelet keeps for it."""

    spec: Json
    argv: list[str] | None  # None: cannot run (state says why)
    env: dict[str, str]
    log_path: Path
    readiness: Probe | None
    liveness: Probe | None
    state: ContainerState
    proc: asyncio.subprocess.Process | None = None
    started_mono: float = 0.0
    backoff_until: float = 0.0
    probe_ok: int = 0
    probe_fail: int = 0
    live_fail: int = 0
    next_probe: float = 0.0  # readiness
    next_live: float = 0.0  # liveness, on its own period
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def start(self, cwd: Path) -> None:
        assert self.argv is not None
        with self.log_path.open("ab") as out:
            try:
                self.proc = await asyncio.create_subprocess_exec(
                    *self.argv,
                    env=self.env,
                    cwd=cwd,
                    stdout=out,
                    stderr=out,
                    stdin=asyncio.subprocess.DEVNULL,
                    start_new_session=True,
                    preexec_fn=_die_with_parent(os.getpid()),
                )
            except OSError as exc:
                self.state = replace(
                    self.state,
                    state="waiting",
                    reason="RunContainerError",
                    message=f"cannot start {self.argv[0]!r}: {exc}",
                )
                return
        self.started_mono = time.monotonic()
        self.probe_ok = self.probe_fail = self.live_fail = 0
        self.next_probe = self.started_mono + (self.readiness.initial_delay if self.readiness else 0)
        self.next_live = self.started_mono + (self.liveness.initial_delay if self.liveness else 0)
        self.state = replace(
            self.state,
            state="running",
            reason="",
            message="",
            pid=self.proc.pid,
            started_at=now_iso(),
            ready=self.readiness is None,
            exit_code=None,
            finished_at=None,
        )
        log.info("started %s (pid %d): %s", self.state.name, self.proc.pid, self.argv[0])

    async def stop(self, grace: float) -> None:
        """SIGTERM the process group, wait up to `grace` seconds, then SIGKILL."""
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), grace)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
        with contextlib.suppress(ProcessLookupError):  # stragglers of the group
            os.killpg(proc.pid, signal.SIGKILL)


class PodRuntime:
    """Drives one pod until it is deleted: start, probe, restart, report, stop."""

    def __init__(
        self,
        pod: Json,
        *,
        pod_ip: str,
        host_ip: str,
        pod_dir: Path,
        containers: list[Container],
        report: Callable[[Json], Awaitable[None]],
    ) -> None:
        self.pod = pod
        self.pod_ip = pod_ip
        self.host_ip = host_ip
        self.pod_dir = pod_dir
        self.containers = containers
        self.report = report
        self.policy: str = pod["spec"].get("restartPolicy", "Always")
        self.start_time = now_iso()
        self.stopping = asyncio.Event()
        self.grace: float = 30.0
        self.last_status: Json | None = None
        self.conditions: list[Json] = []

    def observed(self, served: Json) -> None:
        """The pod's status as the API serves it: where another writer overwrote a condition this node
        reports, the next tick writes the node's own again, as a kubelet's status manager does."""
        if self.last_status is not None and podspec.conditions_overwritten(served, self.last_status):
            self.last_status = None

    def request_stop(self, grace: float) -> None:
        self.grace = grace
        self.stopping.set()

    async def run(self) -> None:
        """Main loop: tick every 0.2 s until asked to stop, then stop containers."""
        for c in self.containers:
            if c.argv is not None:
                await c.start(self.pod_dir)
        await self._publish()
        while not self.stopping.is_set():
            await self._tick()
            await self._publish()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), 0.2)
        await asyncio.gather(*(c.stop(self.grace) for c in self.containers))

    async def _tick(self) -> None:
        now = time.monotonic()
        for c in self.containers:
            if c.argv is None:
                continue
            if c.proc is not None and c.proc.returncode is not None and c.state.state == "running":
                self._exited(c, c.proc.returncode, now)
            if c.state.state == "running":
                await self._probe(c, now)
            elif c.state.reason == podspec.REASON_CRASH_LOOP and now >= c.backoff_until:
                c.state = replace(c.state, restart_count=c.state.restart_count + 1)
                await c.start(self.pod_dir)

    def _exited(self, c: Container, code: int, now: float) -> None:
        reason = "Completed" if code == 0 else "Error"
        terminated: Json = {
            "exitCode": code,
            "reason": reason,
            "startedAt": c.state.started_at,
            "finishedAt": now_iso(),
        }
        log.info("container %s exited with %d", c.state.name, code)
        if podspec.restart_wanted(self.policy, code):
            delay = min(RESTART_BACKOFF_MAX, RESTART_BACKOFF_BASE * 2 ** min(c.state.restart_count, 8))
            if now - c.started_mono > 60:
                delay = RESTART_BACKOFF_BASE
            c.backoff_until = now + delay
            c.state = replace(
                c.state,
                state="waiting",
                reason=podspec.REASON_CRASH_LOOP,
                ready=False,
                pid=None,
                message=f"back-off {delay:.0f}s restarting failed container={c.state.name}",
                last_terminated=terminated,
            )
        else:
            c.state = replace(
                c.state,
                state="terminated",
                exit_code=code,
                finished_at=terminated["finishedAt"],
                ready=False,
                reason=reason,
            )

    async def _probe(self, c: Container, now: float) -> None:
        if c.readiness is not None and now >= c.next_probe:
            c.next_probe = now + c.readiness.period
            if await run_probe(c.readiness):
                c.probe_ok, c.probe_fail = c.probe_ok + 1, 0
                if c.probe_ok >= c.readiness.success_threshold:
                    c.state = replace(c.state, ready=True)
            else:
                c.probe_ok, c.probe_fail = 0, c.probe_fail + 1
                if c.probe_fail >= c.readiness.failure_threshold or not c.state.ready:
                    c.state = replace(c.state, ready=False)
        if c.liveness is not None and now >= c.next_live:
            c.next_live = now + c.liveness.period
            if await run_probe(c.liveness):
                c.live_fail = 0
            else:
                c.live_fail += 1
                if c.live_fail >= c.liveness.failure_threshold:
                    log.info("container %s failed its liveness probe; restarting", c.state.name)
                    await c.stop(float(self.pod["spec"].get("terminationGracePeriodSeconds", 30)))

    async def _publish(self) -> None:
        status = podspec.pod_status(
            policy=self.policy,
            containers=[c.state for c in self.containers],
            pod_ip=self.pod_ip,
            host_ip=self.host_ip,
            start_time=self.start_time,
            now=now_iso(),
            previous_conditions=self.conditions,
        )
        if status != self.last_status:
            try:
                await self.report(status)
            except Exception as exc:  # the next tick retries; the pod keeps running
                log.warning("status update for %s failed: %s", self.pod["metadata"]["name"], exc)
                return
            self.last_status = status
            self.conditions = status["conditions"]
