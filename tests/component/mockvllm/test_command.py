"""`specpilot mock-vllm` as a process: start-up errors, serving, and a clean SIGTERM."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

COMMAND = [sys.executable, "-m", "specpilot.cli", "mock-vllm"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["m", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        (["m", "--speculative-config", '{"model": "d", "num_speculative_tokens": '], "not valid JSON"),
        (["m", "--speculative-config", '{"model": "d", "num_speculative_tokens": 2, "k": 1}'], "unknown key(s) k"),
        (["m", "--max-model-len", "1M"], "greater than the derived max_model_len"),
    ],
    ids=["unknown-flag", "malformed-json", "unknown-key", "too-long"],
)
def test_bad_command_lines_fail_at_start_up_with_a_clear_message(args: list[str], message: str) -> None:
    done = subprocess.run([*COMMAND, *args], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 2
    assert done.stderr.startswith("specpilot mock-vllm: error: ")
    assert message in done.stderr


@contextmanager
def mock(*flags: str) -> Iterator[subprocess.Popen[str]]:
    """The mock serving org/model on a free loopback port, its log on stderr; killed if still running."""
    process = subprocess.Popen(
        [*COMMAND, "org/model", "--host", "127.0.0.1", "--port", "0", *flags], stderr=subprocess.PIPE, text=True
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()


def listening_port(process: subprocess.Popen[str], *, within: float = 20) -> int | None:
    """The port the mock says it serves on, read from its log."""
    assert process.stderr is not None
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        match = re.search(r"Starting vLLM API server 0 on http://127\.0\.0\.1:(\d+)", process.stderr.readline())
        if match:
            return int(match.group(1))
    return None


def stops_on_sigterm(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=10) == 0


def test_the_command_serves_and_stops_on_sigterm() -> None:
    with mock("--time-scale", "0.01") as process:
        port = listening_port(process)
        assert port is not None
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/version", timeout=5) as response:
            assert response.read() == b'{"version": "0.33.0"}'
        stops_on_sigterm(process)


def test_a_model_load_delay_keeps_the_port_closed_until_it_passes() -> None:
    """As a real server loading its weights: a restart costs its load time before the pod is Ready."""
    with mock("--model-load-seconds", "1.5") as process:
        assert process.stderr is not None
        started = time.monotonic()
        assert "Loading model weights for 1.5 s" in process.stderr.readline()
        port = listening_port(process)
        assert port is not None and time.monotonic() - started >= 1.4
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as response:
            assert response.status == 200
        stops_on_sigterm(process)


def test_a_server_stopped_while_loading_exits_cleanly() -> None:
    with mock("--model-load-seconds", "60") as process:
        assert process.stderr is not None
        assert "Loading model weights for 60 s" in process.stderr.readline()
        stops_on_sigterm(process)
