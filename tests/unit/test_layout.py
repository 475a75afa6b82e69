"""Module names under operator/specpilot say what a module holds: two modules (or packages) share a name
only where it means the same part of separate programs (SHARED), so a reader looking for a name finds
the one module it means."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "operator" / "specpilot"

SHARED = {
    "__init__": "every package has one",
    "core": "each program's pure part is a package of this name (controller, router; see .importlinter)",
    "metrics": "each program's own Prometheus metrics (controller, router, mock vLLM) beside the metrics package",
    "cli": "each command's own command line: specpilot's (cli.py) and the load generator's (loadgen/cli.py)",
    "server": "each separate program's HTTP server process (mock vLLM, router)",
    "calibrate": "the kubectl plugin's command of that name (plugin/calibrate.py) beside the package it runs",
    "report": "the kubectl plugin's command of that name (plugin/report.py) beside the package it writes with",
    "kube": "each program's Kubernetes client on specpilot.kubeaccess (the operator's writes, the router's watches)",
}


def module_paths(root: Path) -> dict[str, list[str]]:
    """Every module and package under `root` by its name (a package by its folder's), with its paths."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        found[path.stem].append(path.relative_to(root).as_posix())
        if path.name == "__init__.py" and path.parent != root:
            found[path.parent.name].append(path.parent.relative_to(root).as_posix() + "/")
    return dict(found)


def shared_names(root: Path) -> dict[str, list[str]]:
    """The names used by more than one module or package under `root`."""
    return {name: paths for name, paths in module_paths(root).items() if len(paths) > 1}


def test_a_name_two_modules_share_is_found(tmp_path: Path) -> None:
    for relative in ("a/__init__.py", "a/window.py", "b/__init__.py", "b/window/__init__.py", "b/other.py"):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text("")
    found = shared_names(tmp_path)
    assert found["window"] == ["a/window.py", "b/window/"]
    assert "other" not in found and "a" not in found


def test_no_two_modules_share_a_name_unless_it_is_listed() -> None:
    unlisted = {name: paths for name, paths in shared_names(PACKAGE).items() if name not in SHARED}
    assert not unlisted, f"modules sharing a name under operator/specpilot, rename one of each: {unlisted}"


def test_every_listed_name_is_still_shared() -> None:
    shared = shared_names(PACKAGE)
    stale = sorted(name for name in SHARED if name not in shared)
    assert not stale, f"no longer shared, remove from tests/unit/test_layout.py: {stale}"
