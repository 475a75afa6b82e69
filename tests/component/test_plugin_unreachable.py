"""`kubectl specpilot` against an API server that is not there: one line, exit 1, no traceback."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import yaml

from specpilot.plugin.kubectl import main


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_unreachable_api_server_is_one_line_and_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server = f"https://127.0.0.1:{closed_port()}"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "gone", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "me", "user": {"token": "t"}}],
        "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "me", "namespace": "team-a"}}],
        "current-context": "gone",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    for argv in (["get", "--kubeconfig", str(path)], ["--kubeconfig", str(path), "list", "-A"]):
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert err.startswith(f"error: cannot reach the API server at {server}: "), err
        assert "refused" in err.lower(), err
