"""`specpilot report NAME`: the same as `kubectl specpilot report NAME`."""

from __future__ import annotations

from specpilot.plugin import kubectl


def main(argv: list[str]) -> int:
    return kubectl.main(["report", *argv])
