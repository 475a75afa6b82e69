"""The import contracts bite: one forbidden import in a copy of the package breaks exactly its contract.

Each case copies ``operator/specpilot`` to a temporary directory, adds one import, and runs
``lint-imports`` with the repository's ``.importlinter`` on the copy (``PYTHONPATH`` puts the copy
ahead of the editable install; the repository itself is clean, so a broken contract proves the
copy was the one analysed).
"""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / ".importlinter"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def contract_names() -> dict[str, str]:
    """Contract id (``[importlinter:contract:<id>]``) -> the name lint-imports reports it by."""
    parser = configparser.ConfigParser()
    parser.read(CONFIG)
    prefix = "importlinter:contract:"
    return {
        section[len(prefix) :]: parser[section]["name"] for section in parser.sections() if section.startswith(prefix)
    }


CONTRACTS = contract_names()


def lint_copy(tmp_path: Path, module: str | None = None, line: str = "") -> tuple[int, dict[str, str], str]:
    """lint-imports on a copy of the package with `line` appended to `module` (created if absent)."""
    shutil.copytree(
        ROOT / "operator" / "specpilot", tmp_path / "specpilot", ignore=shutil.ignore_patterns("__pycache__")
    )
    if module is not None:
        path = tmp_path / "specpilot" / module
        path.parent.mkdir(exist_ok=True)
        with path.open("a") as f:
            f.write(f"\n{line}\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "COLUMNS": "500"}  # wide: a contract's verdict on one line
    result = subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo", str(CONFIG)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    output = result.stdout + result.stderr
    verdicts = {
        key: next((v for v in ("KEPT", "BROKEN") if f"{name} {v}" in output), "?") for key, name in CONTRACTS.items()
    }
    return result.returncode, verdicts, output


def test_the_contracts_are_the_ones_these_cases_name() -> None:
    assert set(CONTRACTS) == {"layers", "programs", "operator", "controller", "pure", "standalone", "testing"}


def test_the_package_as_it_is_keeps_every_contract(tmp_path: Path) -> None:
    code, verdicts, output = lint_copy(tmp_path)
    assert (code, verdicts) == (0, dict.fromkeys(CONTRACTS, "KEPT")), output


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        pytest.param("router/core/choice.py", "import specpilot.api", "programs", id="router-imports-api"),
        pytest.param(
            "mockvllm/http_api.py", "import specpilot.loadgen.summary", "programs", id="programs-import-each-other"
        ),
        pytest.param("wire/routes.py", "from specpilot.api import spec", "layers", id="wire-imports-api"),
        pytest.param("wire/names.py", "import specpilot.router.core.choice", "operator", id="wire-imports-the-router"),
        pytest.param(
            "api/status/pilot_status.py",
            "from specpilot.mockvllm import costmodel",
            "operator",
            id="api-imports-mockvllm",
        ),
        pytest.param("wire/names.py", "import socket", "pure", id="wire-imports-socket"),
        pytest.param("api/spec/pilot_spec.py", "import aiohttp", "pure", id="api-imports-aiohttp"),
        pytest.param("router/core/state.py", "import subprocess", "pure", id="router-core-imports-subprocess"),
        pytest.param("controller/core/plan.py", "import aiohttp", "pure", id="controller-core-imports-aiohttp"),
        pytest.param(
            "controller/core/new.py", "import kubernetes", "pure", id="new-controller-core-module-imports-kubernetes"
        ),
        pytest.param(
            "controller/core/plan.py",
            "from specpilot.controller import metrics",
            "controller",
            id="controller-core-imports-the-shell",
        ),
        pytest.param(
            "controller/ports.py",
            "from specpilot.controller import route_owner",
            "controller",
            id="ports-import-an-adapter",
        ),
        pytest.param(
            "calibrate/measure.py", "import specpilot.wire.names", "standalone", id="measuring-code-imports-specpilot"
        ),
        pytest.param("calibrate/job.py", "import kubernetes", "pure", id="calibration-job-imports-kubernetes"),
        # A package that does not exist yet is held to its contract as soon as it does.
        pytest.param("analysis/__init__.py", "import kubernetes", "pure", id="new-analysis-imports-kubernetes"),
        pytest.param("report/__init__.py", "import specpilot.router", "operator", id="new-report-imports-the-router"),
        pytest.param("cli.py", "import specpilot.testing.waiting", "testing", id="cli-imports-the-test-support"),
        pytest.param(
            "controller/core/plan.py",
            "from specpilot.testing import decision_profile",
            "testing",
            id="controller-core-imports-the-test-support",
        ),
    ],
)
def test_a_forbidden_import_breaks_its_contract(tmp_path: Path, module: str, line: str, broken: str) -> None:
    code, verdicts, output = lint_copy(tmp_path, module, line)
    expected = {key: "BROKEN" if key == broken else "KEPT" for key in CONTRACTS}
    assert (code, verdicts) == (1, expected), output
