"""The `specpilot` command: one entry point, one subcommand per component.

Subcommands are imported lazily so that, for example, the mock vLLM does not pay for the
operator's imports at start-up.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence

from specpilot import __version__

# subcommand -> (module, one-line help); each module exposes `main(argv: list[str]) -> int`.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "operator": ("specpilot.controller.main", "run the operator that reconciles SpeculationPilots"),
    "crd": ("specpilot.api.crd", "print the SpeculationPilot CustomResourceDefinition (YAML)"),
    "mock-vllm": ("specpilot.mockvllm.server", "run a CPU mock of a vLLM 0.33 OpenAI server"),
    "loadgen": ("specpilot.loadgen.cli", "replay arrivals against an OpenAI-compatible URL"),
    "router": ("specpilot.router.app", "run the per-pilot scope router"),
    "localnode": ("specpilot.localnode.agent", "run the local node agent (pods as processes)"),
    "report": ("specpilot.plugin.report", "write a pilot's handover package (as kubectl specpilot report)"),
    "stepcost": ("specpilot.calibrate.measure", "measure a model's step costs on this machine (needs torch)"),
}


def _usage() -> str:
    lines = ["usage: specpilot <command> [args...]", "", "commands:"]
    lines += [f"  {name:<10} {help_}" for name, (_, help_) in SUBCOMMANDS.items()]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in {"-h", "--help", "help"}:
        print(_usage())
        return 0
    if args[0] in {"--version", "version"}:
        print(__version__)
        return 0
    entry = SUBCOMMANDS.get(args[0])
    if entry is None:
        print(f"specpilot: unknown command {args[0]!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(entry[0])
    run: Callable[[list[str]], int] = module.main
    return run(args[1:])


if __name__ == "__main__":
    sys.exit(main())
