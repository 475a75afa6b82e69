"""operator/Dockerfile's install steps, run as written in a fresh directory (no Docker engine here):
every subcommand starts from the installed virtualenv, and running writes nothing into it, so the
image works on a read-only root filesystem."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

from specpilot.cli import SUBCOMMANDS

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "operator" / "Dockerfile"


def build_stage() -> tuple[list[tuple[list[str], str]], list[str]]:
    """The first stage's COPY (sources, destination) and RUN instructions, in order."""
    copies, runs = [], []
    for line in DOCKERFILE.read_text().splitlines():
        if line.startswith("FROM ") and copies:
            break
        if line.startswith("COPY "):
            *sources, destination = line.split()[1:]
            copies.append((sources, destination))
        elif line.startswith("RUN "):
            runs.append(line[len("RUN ") :])
    return copies, runs


def snapshot(root: Path) -> dict[str, float]:
    return {str(p): p.stat().st_mtime for p in root.rglob("*") if not p.is_symlink()}


def test_install_steps_give_every_subcommand_and_write_nothing_at_run_time(tmp_path: Path) -> None:
    copies, runs = build_stage()
    assert runs == ["sh /src/operator/install.sh /opt/specpilot /src"], "the test runs exactly this step"
    for sources, destination in copies:
        target = tmp_path / destination.lstrip("/")
        for source in sources:
            path = ROOT / source
            if path.is_dir():
                shutil.copytree(path, target, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
            else:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy(path, target)
    prefix, source = tmp_path / "opt/specpilot", tmp_path / "src"
    argv = shlex.split(runs[0].replace("/opt/specpilot", str(prefix)).replace("/src", str(source)))
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    build = subprocess.run(argv, capture_output=True, text=True, env=env, check=False, timeout=840)
    assert build.returncode == 0, build.stdout + build.stderr
    shutil.rmtree(source)  # as the image holds no source tree, only the installed package
    before = snapshot(prefix)
    for command in SUBCOMMANDS:
        # Imports every module the subcommand needs (PYTHONDONTWRITEBYTECODE unset: a missing .pyc would be written).
        out = subprocess.run(
            [str(prefix / "bin/specpilot"), command, "--help"],
            check=False,
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert out.returncode == 0, f"specpilot {command} --help: {out.stderr}"
        assert "usage" in out.stdout.lower()
    assert snapshot(prefix) == before, "running a subcommand wrote into the installed tree"
