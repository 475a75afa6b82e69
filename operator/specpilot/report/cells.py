"""How one figure reads in report.md's text and tables: in its format and unit, or n/a where it is unknown."""

from __future__ import annotations

from typing import Any


def fig(value: Any, spec: str = ".2f", unit: str = "") -> str:
    return "n/a" if value is None else f"{value:{spec}}{unit}"
