"""`kubectl specpilot <TAB>` through kubectl itself: kubectl runs `kubectl_complete-specpilot` (the
console script installed with the plugin) and offers what it prints."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from specpilot.testing.helm import kubectl

SCRIPTS = Path(sys.executable).parent


@pytest.mark.parametrize(("typed", "offered"), [(["pro"], "promote"), (["get", "--kube"], "--kubeconfig")])
def test_kubectl_completes_the_plugins_commands_and_flags(tmp_path: Path, typed: list[str], offered: str) -> None:
    assert (SCRIPTS / "kubectl_complete-specpilot").is_file(), "not installed: run `make venv`"
    env = {"PATH": f"{SCRIPTS}:{Path(kubectl()).parent}:/usr/bin:/bin", "HOME": str(tmp_path)}
    # `__complete` is what kubectl's shell completion scripts call on <TAB>.
    done = subprocess.run(
        [kubectl(), "__complete", "specpilot", *typed], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [offered, ":4"], done.stdout
