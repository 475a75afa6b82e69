"""A real Prometheus server for the tests: the Debian package's binary, run on a loopback port with a
generated configuration and a temporary storage directory, scraping every second.

`PROMETHEUS` is the binary (``prometheus`` on the PATH, else /usr/bin/prometheus); tests that need it
skip with `skip_reason` when it is absent (``apt-get install prometheus``; CI installs it).
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from specpilot.testing.waiting import answers, wait_until

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
SCRAPE_INTERVAL = "1s"


def skip_reason() -> str | None:
    """Why Prometheus tests cannot run here, or None."""
    if not Path(PROMETHEUS).is_file():
        return "no prometheus binary (apt-get install prometheus, as .ci/run does)"
    return None


def static_job(job: str, targets: Sequence[tuple[str, dict[str, str]]], *, path: str = "/metrics") -> dict[str, Any]:
    """A scrape job of (host:port, target labels) pairs."""
    return {
        "job_name": job,
        "metrics_path": path,
        "static_configs": [{"targets": [address], "labels": labels} for address, labels in targets],
    }


class Prometheus:
    """A running server: its base URL, and a few reads of its API."""

    def __init__(self, url: str, process: subprocess.Popen[bytes], log: Path, config: Path) -> None:
        self.url = url
        self.process = process
        self.log = log
        self.config = config

    def api(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}{path}{query}", timeout=10) as response:
            return json.loads(response.read())

    def reconfigure(self, scrape_configs: Sequence[dict[str, Any]]) -> None:
        """Replace the scrape jobs and reload (``POST /-/reload``)."""
        _write_config(self.config, scrape_configs)
        request = urllib.request.Request(f"{self.url}/-/reload", method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200

    def wait_until_scraped(self, count: int, *, timeout: float = 30) -> None:
        """Until `count` targets have been scraped at least once since a reload, well or not."""

        def scraped() -> bool:
            targets = self.api("/api/v1/targets")["data"]["activeTargets"]
            return sum(1 for t in targets if t["health"] != "unknown") >= count

        try:
            wait_until(f"{count} targets scraped", scraped, timeout=timeout)
        except AssertionError as error:
            raise AssertionError(f"{error}: {self.api('/api/v1/targets')}\n{self.tail()}") from None

    def healthy_targets(self) -> list[dict[str, Any]]:
        return [t for t in self.api("/api/v1/targets")["data"]["activeTargets"] if t["health"] == "up"]

    def wait_until_up(self, count: int, *, timeout: float = 30) -> None:
        """Until `count` targets have been scraped successfully (a Prometheus that exited fails at once)."""

        def up() -> bool:
            if self.process.poll() is not None:
                raise AssertionError("Prometheus exited")
            return len(self.healthy_targets()) >= count

        try:
            wait_until(f"{count} targets up", up, timeout=timeout)
        except AssertionError as error:
            raise AssertionError(f"{error}: {self.api('/api/v1/targets')}\n{self.tail()}") from None

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@contextmanager
def running_prometheus(directory: Path, scrape_configs: Sequence[dict[str, Any]]) -> Iterator[Prometheus]:
    """Start Prometheus on a free loopback port with `scrape_configs`; stop it (and keep its log) after."""
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "prometheus.yml"
    _write_config(config, scrape_configs)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = directory / "prometheus.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={directory / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--web.enable-lifecycle",
                "--storage.tsdb.retention.time=1h",
                "--log.level=info",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    server = Prometheus(f"http://127.0.0.1:{port}", process, log, config)
    try:

        def ready() -> bool:
            if process.poll() is not None:
                raise AssertionError("Prometheus exited")
            return answers(f"{server.url}/-/ready")

        try:
            wait_until("Prometheus to be ready", ready, timeout=30, every=0.1)
        except AssertionError as error:
            raise AssertionError(f"Prometheus did not start: {error}\n{server.tail()}") from None
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


def _write_config(path: Path, scrape_configs: Sequence[dict[str, Any]]) -> None:
    config = {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "scrape_timeout": SCRAPE_INTERVAL, "evaluation_interval": "5s"},
        "scrape_configs": list(scrape_configs),
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
