"""Reading `vllm serve` flags from an engine's command line, as the engine's argument parser does."""

from __future__ import annotations

from collections.abc import Sequence


def flag_value(argv: Sequence[str], *names: str) -> str | None:
    """The value of the last of `names` in argv, given as `--flag=value` or `--flag value` (the last one
    counts, as with argparse); None when absent."""
    found = None
    for index, word in enumerate(argv):
        flag, equals, value = word.partition("=")
        if flag in names:
            found = value if equals else (argv[index + 1] if index + 1 < len(argv) else None)
    return found
