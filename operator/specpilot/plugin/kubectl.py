"""`kubectl specpilot`: see pilots by scope, act on them, write their handover package, and calibrate step costs.

    kubectl specpilot get [PILOT] [--watch]       a table per scope: state, weight, last window, decision
    kubectl specpilot list [-A]                   one line per pilot: phase, speculative scopes, decision
    kubectl specpilot promote SCOPE [--pilot P]   move the scope to its next stage now
    kubectl specpilot abort [SCOPE] [--pilot P]   flip the scope (or every scope) back to ordinary decoding
    kubectl specpilot resume SCOPE [--pilot P]    pilot a rolled-back scope again from its first stage
    kubectl specpilot decide [--pilot P]          state the decision now, before every scope has settled
    kubectl specpilot report PILOT [-o DIR]       write the handover package (also `specpilot report`)
    kubectl specpilot follow-up PILOT [--name N] [--image I] [--model M] [--no-schedule]
                                                  print the next pilot: its recommended schedule, or a new target
    kubectl specpilot calibrate NAME --target-config F --image I [--draft-config F] [--dry-run]
                                                  measure the model's step costs on a GPU into configmap/NAME
    kubectl specpilot version                     the plugin's version
    kubectl specpilot completion bash|zsh         a shell completion script (source it)

The kubeconfig conventions are kubectl's: --kubeconfig, else KUBECONFIG (a list of files), else
~/.kube/config; --context; -n/--namespace, else the context's namespace, else "default"; these
flags go before or after the command. Errors are one line on stderr and exit 1, as kubectl's. Manual
actions are the pilot's annotations (`api.pilot`): the operator acts on them once and removes them.
Installed as the console script `kubectl-specpilot`, so kubectl finds it on PATH as a plugin, and
`kubectl_complete-specpilot`, which kubectl runs to complete `kubectl specpilot <TAB>`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from specpilot import __version__
from specpilot.analysis.evidence import Evidence
from specpilot.api.pilot import (
    ABORT_ANNOTATION,
    ALL_SCOPES,
    DECIDE_ANNOTATION,
    GROUP,
    PROMOTE_ANNOTATION,
    RESUME_ANNOTATION,
)
from specpilot.plugin import calibrate
from specpilot.plugin.client import Client, PluginError, connect
from specpilot.plugin.followup import FollowUpError, Overrides, follow_up
from specpilot.plugin.table import render, render_list
from specpilot.report.build import build
from specpilot.report.followed import FollowedPilot, follows
from specpilot.report.package import write_package

Json = dict[str, Any]


class _Parser(argparse.ArgumentParser):
    """argparse with kubectl's habits: a usage error is one line and exits 1."""

    def error(self, message: str) -> NoReturn:
        self.exit(1, f"error: {message}\nSee 'kubectl specpilot --help' for usage.\n")


def _global_flags(parser: argparse.ArgumentParser, *, after_command: bool) -> None:
    """The connection flags; after the command they default to nothing, so that values given before
    it are kept (argparse would overwrite them with a subcommand's defaults)."""
    default = argparse.SUPPRESS if after_command else None
    parser.add_argument(
        "--kubeconfig", default=default, help="kubeconfig file (default: KUBECONFIG, then ~/.kube/config)"
    )
    parser.add_argument("--context", default=default, help="kubeconfig context (default: the current context)")
    parser.add_argument("-n", "--namespace", default=default, help="namespace (default: the context's, else default)")


def _parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    _global_flags(common, after_command=True)
    parser = _Parser(prog="kubectl specpilot", description=__doc__.split("\n\n")[0])
    _global_flags(parser, after_command=False)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    get = commands.add_parser("get", parents=[common], help="each pilot's scopes as a table")
    get.add_argument("pilot", nargs="?", help="one pilot (default: every pilot in the namespace)")
    get.add_argument("-w", "--watch", action="store_true", help="print the table again on every change")
    listed = commands.add_parser("list", parents=[common], help="one line per pilot")
    listed.add_argument("-A", "--all-namespaces", action="store_true", help="pilots of every namespace")
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
    _follow_up_parser(commands, common)
    calibrate.add_parser(commands, common)
    commands.add_parser("version", help="the plugin's version")
    completion = commands.add_parser("completion", help="a shell completion script")
    completion.add_argument("shell", choices=("bash", "zsh"))
    return parser


def _follow_up_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    follow = commands.add_parser(
        "follow-up", parents=[common], help="print the next pilot: the recommended schedule, or a new target"
    )
    follow.add_argument("pilot")
    follow.add_argument("--name", help="the new pilot's name (default: PILOT-follow-up)")
    follow.add_argument("--image", help="a new engine image (spec.engine.image); everything else is carried")
    follow.add_argument("--model", help="a new target model (spec.engine.model); everything else is carried")
    follow.add_argument(
        "--no-schedule", action="store_true", help="carry the draft unchanged instead of the recommended schedule"
    )


def _follow_up(args: argparse.Namespace, client: Client, out: Callable[[str], None]) -> int:
    """The next pilot on stdout (to commit or apply); what the user should know besides, on stderr."""
    pilot = client.pilot(args.pilot)
    report = build(pilot, client.evidence(args.pilot) or Evidence())
    overrides = Overrides(name=args.name, image=args.image, model=args.model, keep_draft=args.no_schedule)
    try:
        made = follow_up(pilot, report, overrides)
    except FollowUpError as error:
        raise PluginError(f"{args.pilot}: {error}") from None
    for note in made.notes:
        print(note, file=sys.stderr)
    out(made.render().rstrip("\n"))
    return 0


def _followed(client: Client, pilot: Json) -> FollowedPilot | None:
    """The pilot `pilot` follows (its annotation's) and its evidence, where that one is still in the
    namespace; listed, so that only its absence, not a refusal, reads as gone."""
    name = follows(pilot)
    if name is None:
        return None
    found = next((p for p in client.pilots() if p["metadata"]["name"] == name), None)
    if found is None:
        return None
    return FollowedPilot(found, client.evidence(name) or Evidence())


def _vocabulary() -> list[str]:
    """The plugin's commands and flags, what completion offers."""
    words: list[str] = []
    for action in _parser()._actions:  # the only way argparse lists its commands and flags
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                words.append(name)
                words.extend(f for a in sub._actions for f in a.option_strings)
        else:
            words.extend(action.option_strings)
    return list(dict.fromkeys(words))


def completions(words: Sequence[str]) -> list[str]:
    """What completes the last of the words typed after `kubectl specpilot` (as the scripts offer)."""
    typed = words[-1] if words else ""
    return [word for word in _vocabulary() if word.startswith(typed)]


def completion_script(shell: str) -> str:
    """Completion of the plugin's commands and flags, for `kubectl-specpilot` (kubectl runs plugins
    by that name); zsh through its bash-compatible completion."""
    vocabulary = " ".join(_vocabulary())
    bash = (
        "_kubectl_specpilot() {\n"
        '    local cur="${COMP_WORDS[COMP_CWORD]}"\n'
        f'    mapfile -t COMPREPLY < <(compgen -W "{vocabulary}" -- "$cur")\n'
        "}\n"
        "complete -F _kubectl_specpilot kubectl-specpilot\n"
    )
    if shell == "bash":
        return bash
    return "#compdef kubectl-specpilot\nautoload -U +X bashcompinit && bashcompinit\n" + bash


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
    if args.command == "list":
        pilots = client.all_pilots() if args.all_namespaces else client.pilots()
        where = "any namespace" if args.all_namespaces else f"{client.namespace} namespace"
        out(render_list(pilots) if pilots else f"No speculationpilots found in {where}.")
        return 0
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
    if args.command == "calibrate":
        return calibrate.run(args, client, out)
    if args.command == "follow-up":
        return _follow_up(args, client, out)
    if args.command == "report":
        pilot = client.pilot(args.pilot)
        evidence = client.evidence(args.pilot) or Evidence()
        folder = Path(args.output or f"{args.pilot}-report")
        write_package(pilot, evidence, folder, followed=_followed(client, pilot))
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


def _namespace(args: argparse.Namespace, connect_to: Callable[..., Client]) -> str:
    """The namespace a dry run renders into: -n, else the kubeconfig context's, else default (as kubectl's
    client-side dry run, which needs no kubeconfig either: a kubeconfig named with --kubeconfig must be sound)."""
    if args.namespace:
        return str(args.namespace)
    try:
        return connect_to(kubeconfig=args.kubeconfig, context=args.context, namespace=None).namespace
    except PluginError:
        if args.kubeconfig:
            raise
        return "default"


def complete_main(argv: Sequence[str] | None = None) -> int:
    """`kubectl_complete-specpilot`: kubectl runs it for `kubectl specpilot <TAB>` with the words typed
    after `specpilot`, the last one being completed, and reads one completion a line, then a directive
    (`:4`, cobra's ShellCompDirectiveNoFileComp: no file names)."""
    for word in completions(list(sys.argv[1:] if argv is None else argv)):
        print(word)
    print(":4")
    return 0


def main(argv: Sequence[str] | None = None, *, connect_to: Callable[..., Client] = connect) -> int:
    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.command == "version":
        print(f"kubectl-specpilot: v{__version__}")
        return 0
    if args.command == "completion":
        print(completion_script(args.shell), end="")
        return 0
    try:
        if args.command == "calibrate" and args.dry_run:
            print(calibrate.dry_run(calibrate.calibration(args, _namespace(args, connect_to))), end="")
            return 0
        client = connect_to(kubeconfig=args.kubeconfig, context=args.context, namespace=args.namespace)
        return run(args, client, lambda line: print(line, flush=True))
    except PluginError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
