"""`kubectl specpilot`: see pilots by scope, act on them, and write their handover package.

    kubectl specpilot get [PILOT] [--watch]       a table per scope: state, weight, last window, decision
    kubectl specpilot promote SCOPE [--pilot P]   move the scope to its next stage now
    kubectl specpilot abort [SCOPE] [--pilot P]   flip the scope (or every scope) back to ordinary decoding
    kubectl specpilot resume SCOPE [--pilot P]    pilot a rolled-back scope again from its first stage
    kubectl specpilot decide [--pilot P]          state the decision now, before every scope has settled
    kubectl specpilot report PILOT [-o DIR]       write the handover package (also `specpilot report`)

The kubeconfig conventions are kubectl's: --kubeconfig, else KUBECONFIG (a list of files), else
~/.kube/config; --context; -n/--namespace, else the context's namespace, else "default". Manual
actions are the pilot's annotations (`api.pilot`): the operator acts on them once and removes them.
Installed as the console script `kubectl-specpilot`, so kubectl finds it on PATH as a plugin.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from specpilot.analysis.evidence import Evidence
from specpilot.api.pilot import (
    ABORT_ANNOTATION,
    ALL_SCOPES,
    DECIDE_ANNOTATION,
    GROUP,
    PROMOTE_ANNOTATION,
    RESUME_ANNOTATION,
)
from specpilot.plugin.client import Client, PluginError, connect
from specpilot.plugin.table import render
from specpilot.report.package import write_package

Json = dict[str, Any]


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--kubeconfig", help="kubeconfig file (default: KUBECONFIG, then ~/.kube/config)")
    common.add_argument("--context", help="kubeconfig context (default: the current context)")
    common.add_argument("-n", "--namespace", help="namespace (default: the context's, else default)")
    parser = argparse.ArgumentParser(prog="kubectl specpilot", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    get = commands.add_parser("get", parents=[common], help="each pilot's scopes as a table")
    get.add_argument("pilot", nargs="?", help="one pilot (default: every pilot in the namespace)")
    get.add_argument("-w", "--watch", action="store_true", help="print the table again on every change")
    for name, help_, scope in (
        ("promote", "move a scope to its next stage now", "required"),
        ("abort", "flip a scope, or every scope, back to ordinary decoding", "optional"),
        ("resume", "pilot a rolled-back scope again from its first stage", "required"),
        ("decide", "state the decision now from the evidence so far", None),
    ):
        command = commands.add_parser(name, parents=[common], help=help_)
        if scope == "required":
            command.add_argument("scope")
        elif scope == "optional":
            command.add_argument("scope", nargs="?", help="a scope (default: every scope)")
        command.add_argument("--pilot", help="the pilot (default: the only one in the namespace)")
    report = commands.add_parser("report", parents=[common], help="write the handover package")
    report.add_argument("pilot")
    report.add_argument("-o", "--output", help="folder to write (default: ./PILOT-report)")
    return parser


def _pilot(client: Client, name: str | None) -> Json:
    """The named pilot, or the namespace's only one; errors name what exists."""
    if name is not None:
        return client.pilot(name)
    pilots = client.pilots()
    if len(pilots) == 1:
        return pilots[0]
    names = ", ".join(p["metadata"]["name"] for p in pilots) or "none"
    raise PluginError(f"namespace {client.namespace!r} has {len(pilots)} pilots ({names}): name one with --pilot")


def _scope(pilot: Json, scope: str) -> str:
    names = [s["name"] for s in pilot["spec"].get("scopes", [])]
    if scope not in names:
        raise PluginError(
            f"pilot {pilot['metadata']['name']!r} has no scope {scope!r} (its scopes: {', '.join(names) or 'none'})"
        )
    return scope


def _annotate(client: Client, pilot: Json, key: str, value: str, what: str) -> str:
    """Add `value` to the annotation (a comma-separated list, as the operator reads it)."""
    current = (pilot["metadata"].get("annotations") or {}).get(key)
    values = [v.strip() for v in current.split(",")] if current and value != ALL_SCOPES else []
    if value not in values:
        values.append(value)
    name = pilot["metadata"]["name"]
    client.annotate(name, {key: ",".join(values)})
    return f"speculationpilot.{GROUP}/{name} {what}"


def _watch(client: Client, name: str | None, out: Callable[[str], None]) -> None:
    last = None
    for pilots in client.watch(name):
        table = render(pilots)
        if table != last:
            out(table)
            last = table


def run(args: argparse.Namespace, client: Client, out: Callable[[str], None]) -> int:
    if args.command == "get":
        if args.watch:
            _watch(client, args.pilot, out)
            return 0
        pilots = [client.pilot(args.pilot)] if args.pilot else client.pilots()
        if not pilots:
            out(f"No speculationpilots found in {client.namespace} namespace.")
            return 0
        out(render(pilots))
        return 0
    if args.command == "report":
        pilot = client.pilot(args.pilot)
        evidence = client.evidence(args.pilot) or Evidence()
        folder = Path(args.output or f"{args.pilot}-report")
        write_package(pilot, evidence, folder)
        decision = (pilot.get("status") or {}).get("decision")
        stated = decision["outcome"] if decision else "no decision stated yet (provisional in the report)"
        out(f"{args.pilot}: {stated}")
        out(f"report written to {folder / 'report.md'}")
        return 0
    pilot = _pilot(client, args.pilot)
    if args.command == "decide":
        out(_annotate(client, pilot, DECIDE_ANNOTATION, "requested", "asked to state its decision"))
        return 0
    key = {"promote": PROMOTE_ANNOTATION, "abort": ABORT_ANNOTATION, "resume": RESUME_ANNOTATION}[args.command]
    scope = ALL_SCOPES if args.command == "abort" and args.scope is None else _scope(pilot, args.scope)
    target = "every scope" if scope == ALL_SCOPES else f"scope {scope}"
    out(_annotate(client, pilot, key, scope, f"{args.command} requested for {target}"))
    return 0


def main(argv: Sequence[str] | None = None, *, connect_to: Callable[..., Client] = connect) -> int:
    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        client = connect_to(kubeconfig=args.kubeconfig, context=args.context, namespace=args.namespace)
        return run(args, client, lambda line: print(line, flush=True))
    except PluginError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
