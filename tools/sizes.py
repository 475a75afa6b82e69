"""The size limits of the code in operator/specpilot: no module over 500 lines, no class over 150 lines
and no function over 60 lines (classes and functions measured from the syntax tree). Those over today
are listed in tools/sizes.txt with their size, and may shrink but not grow; a new one fails. `python
tools/sizes.py` prints every one over its limit; `--write` records the present sizes (only after a
change that shrank them)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "operator" / "specpilot"
ALLOWED = Path(__file__).with_suffix(".txt")
MODULE_LINES = 500
CLASS_LINES = 150
FUNCTION_LINES = 60


def oversized() -> dict[str, int]:
    """Each module over its limit, as its path, and each class and function over its limit, as
    `path:qualified.name`, with its length in lines."""
    found: dict[str, int] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        text = path.read_text()
        if len(text.splitlines()) > MODULE_LINES:
            found[relative] = len(text.splitlines())
        tree = ast.parse(text, filename=relative)
        for node, name in _named(tree, ""):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            limit = CLASS_LINES if isinstance(node, ast.ClassDef) else FUNCTION_LINES
            if lines > limit:
                found[f"{relative}:{name}"] = lines
    return found


Definition = ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef


def _named(node: ast.AST, prefix: str) -> list[tuple[Definition, str]]:
    out: list[tuple[Definition, str]] = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            name = f"{prefix}{child.name}"
            out.append((child, name))
            out.extend(_named(child, f"{name}."))
    return out


def allowed() -> dict[str, int]:
    entries = (line.split() for line in ALLOWED.read_text().splitlines() if line and not line.startswith("#"))
    return {name: int(lines) for lines, name in entries}


def main(argv: list[str]) -> int:
    found = oversized()
    if "--write" in argv:
        header = "# Modules, classes and functions over their size limit (tools/sizes.py): they may shrink, not grow.\n"
        ALLOWED.write_text(header + "".join(f"{lines} {name}\n" for name, lines in sorted(found.items())))
        return 0
    known = allowed()
    grown = {name: lines for name, lines in found.items() if lines > known.get(name, 0)}
    for name, lines in sorted(found.items(), key=lambda item: -item[1]):
        mark = "  GREW" if name in grown and name in known else "  NEW" if name in grown else ""
        print(f"{lines:5d} {name}{mark}")
    if grown:
        print(
            f"{len(grown)} over the limit and not allowed at that size (modules {MODULE_LINES}, classes "
            f"{CLASS_LINES}, functions {FUNCTION_LINES} lines): shorten them",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
