"""`kubectl specpilot calibrate NAME`: measure the step costs of the team's model shapes on its own GPU.

It creates the calibration's ConfigMap and Job (`calibrate.job`), waits for the Job, reads the
measurements from its pod's log and writes them into the ConfigMap under STEPCOST_KEY, in the schema
the step-cost fit reads. `--dry-run` prints the two objects instead (apply them, then `--collect` fills the
ConfigMap); `--collect` waits for a Job already created and collects it.

Why the plugin collects rather than the pod writing its own ConfigMap: the pod then needs no
service-account token, Role or RoleBinding (which Kubernetes' `edit` role may not create), and only the
team's image runs, so no other image has to be reachable from the GPU nodes.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from specpilot.api.common import DNS_LABEL_PATTERN, DNS_SUBDOMAIN_PATTERN
from specpilot.api.spec import Toleration
from specpilot.api.spec.engine_spec import GPU_RESOURCE
from specpilot.calibrate import measure
from specpilot.calibrate.job import PULL_SECONDS, Calibration, ConfigMapKey, ModelConfig, render
from specpilot.plugin.client import Client, PluginError
from specpilot.wire.names import STEPCOST_KEY

Json = dict[str, Any]
POLL_SECONDS = 5.0
KUBECTL_KINDS = {"ConfigMap": "configmap", "Job": "job.batch"}  # as kubectl names what it created


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    """The subcommand and its flags."""
    calibrate = commands.add_parser(
        "calibrate", parents=[common], help="measure the step costs of a model's shapes on a GPU (a Job)"
    )
    calibrate.add_argument("name", help="the calibration: its Job and the ConfigMap its measurements go into")
    models = "a local config.json (or a model folder holding one), or configmap:NAME[/KEY] (default key config.json)"
    calibrate.add_argument("--target-config", help=f"the target model's config: {models}")
    calibrate.add_argument("--draft-config", help="the draft model's config, the same way (an EAGLE head's too)")
    calibrate.add_argument("--target-name", default="target", help="the target's name in the measurements")
    calibrate.add_argument("--draft-name", default="draft", help="the draft's name in the measurements")
    calibrate.add_argument("--image", help="an image of the team's with python3 and torch (a vLLM image has both)")
    calibrate.add_argument("--gpu-resource", default=GPU_RESOURCE, help=f"the GPU to ask for (default {GPU_RESOURCE})")
    calibrate.add_argument("--node-selector", action="append", default=[], metavar="KEY=VALUE", help="repeatable")
    calibrate.add_argument(
        "--toleration", action="append", default=[], metavar="KEY[=VALUE][:EFFECT]", help="repeatable, as taints read"
    )
    calibrate.add_argument("--grid", choices=("quick", "standard"), default="quick", help="which steps (quick)")
    calibrate.add_argument("--max-batch", type=int, help="leave out larger batches (a small GPU's memory)")
    calibrate.add_argument("--budget", type=int, default=600, help="seconds of measuring at most (default 600)")
    calibrate.add_argument("--dry-run", action="store_true", help="print the ConfigMap and the Job, create nothing")
    calibrate.add_argument("--collect", action="store_true", help="wait for the Job created before and collect it")


def _model_config(text: str, role: str) -> ModelConfig:
    """A `--*-config` value: a ConfigMap's key as it is, or a local file's text, whose shape is checked now."""
    if text.startswith("configmap:"):
        name, _, key = text.removeprefix("configmap:").partition("/")
        if not re.fullmatch(DNS_SUBDOMAIN_PATTERN, name):
            raise PluginError(f"--{role}-config {text!r}: configmap:NAME[/KEY] names no ConfigMap")
        return ConfigMapKey(name=name, key=key or "config.json")
    path = Path(text)
    path = path / "config.json" if path.is_dir() else path
    try:
        content = path.read_text()
        measure.shape_of(json.loads(content))
    except (OSError, ValueError) as error:
        raise PluginError(f"--{role}-config {path}: {error}") from None
    return content


def _toleration(text: str) -> Json:
    """`key=value:Effect`, `key:Effect` or `key`, as `kubectl taint` writes a taint."""
    rest, _, effect = text.partition(":")
    key, equals, value = rest.partition("=")
    try:
        found = Toleration.model_validate(
            {"key": key, "operator": "Equal" if equals else "Exists", "value": value or None, "effect": effect or None}
        )
    except ValueError:
        effects = "NoSchedule, PreferNoSchedule or NoExecute"
        raise PluginError(f"--toleration {text!r}: expected KEY[=VALUE][:EFFECT], the effect {effects}") from None
    return found.to_wire()


def calibration(args: argparse.Namespace, namespace: str) -> Calibration:
    """The flags as a calibration, or the first one that is wrong."""
    if not re.fullmatch(DNS_LABEL_PATTERN, args.name) or len(args.name) > 63:
        raise PluginError(f"calibration name {args.name!r}: lower-case letters, digits and '-', at most 63")
    if not args.target_config or not args.image:
        raise PluginError("calibrate needs --target-config and --image (an image with torch)")
    selector = dict(pair.partition("=")[::2] for pair in args.node_selector)
    if any(not key for key in selector):
        raise PluginError("--node-selector takes KEY=VALUE")
    return Calibration(
        name=args.name,
        namespace=namespace,
        image=args.image,
        code=resources.files(measure.__package__ or "").joinpath("measure.py").read_text(),
        target=_model_config(args.target_config, "target"),
        draft=_model_config(args.draft_config, "draft") if args.draft_config else None,
        target_name=args.target_name,
        draft_name=args.draft_name,
        gpu_resource=args.gpu_resource,
        node_selector=selector,
        tolerations=[_toleration(text) for text in args.toleration],
        grid=args.grid,
        max_batch=args.max_batch,
        budget_seconds=args.budget,
    )


class _Literal(yaml.SafeDumper):
    """Multi-line strings (the measuring code, the configs) as YAML block literals, readable as they are."""


_Literal.add_representer(
    str,
    lambda dumper, text: dumper.represent_scalar(
        "tag:yaml.org,2002:str", text, style="|" if "\n" in text and " \n" not in text else None
    ),
)


def dry_run(calibration: Calibration) -> str:
    """The objects as YAML, after a comment saying how their measurements are collected."""
    note = (
        f"# Apply these, then `kubectl specpilot calibrate {calibration.name} -n {calibration.namespace} --collect`\n"
        f"# writes the Job's measurements into configmap/{calibration.name} ({STEPCOST_KEY}).\n"
    )
    return note + yaml.dump_all(render(calibration), Dumper=_Literal, sort_keys=False, width=120)


def measurements(log: str) -> Json:
    """The measurements the pod printed (its last MARKER line), checked."""
    lines = [line for line in log.splitlines() if line.startswith(measure.MARKER)]
    if not lines:
        tail = " | ".join(log.strip().splitlines()[-3:]) or "nothing"
        raise PluginError(f"the pod printed no measurements; its log ends: {tail}")
    document = json.loads(lines[-1].removeprefix(measure.MARKER))
    found = measure.problems(document)
    if found:
        raise PluginError(f"the measurements cannot be used: {'; '.join(found)}")
    return dict(document)


def wait(
    client: Client,
    name: str,
    *,
    timeout: float,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Until the Job has succeeded; its failure, or no end within `timeout`, is an error naming why."""
    until = clock() + timeout
    while True:
        status = client.job(name).get("status") or {}
        if status.get("succeeded"):
            return
        failed = [c for c in status.get("conditions") or () if c.get("type") == "Failed" and c.get("status") == "True"]
        if failed or status.get("failed"):
            why = failed[0].get("message") or failed[0].get("reason") if failed else "its pod failed"
            raise PluginError(f"job {name!r} failed: {why}; its log ends: {_tail(client, name)}")
        if clock() >= until:
            raise PluginError(f"job {name!r} has not finished in {timeout:.0f} s: collect later with --collect")
        sleep(POLL_SECONDS)


def _tail(client: Client, name: str) -> str:
    try:
        return " | ".join(client.job_log(name).strip().splitlines()[-3:]) or "nothing"
    except PluginError as error:
        return str(error)


def collect(client: Client, name: str) -> str:
    """Write the finished Job's measurements into the calibration's ConfigMap; what was written, in a line."""
    document = measurements(client.job_log(name))
    client.patch_config_map(name, {STEPCOST_KEY: json.dumps(document, indent=1) + "\n"})
    measured = sum(1 for row in document["rows"] if "ms" in row)
    stopped = ", stopped at its budget" if document.get("stopped") else ""
    return (
        f"configmap/{name}: {STEPCOST_KEY} written ({measured} of {len(document['rows'])} steps measured, "
        f"{', '.join(document.get('params', {}))} on {document['gpu']}, {document.get('elapsed_s', 0):.0f} s{stopped})"
    )


def run(args: argparse.Namespace, client: Client, out: Callable[[str], None]) -> int:
    """Create, wait and collect; or, with --collect, wait and collect what was created before."""
    if not args.collect:
        for obj in render(calibration(args, client.namespace)):
            client.create(obj)
            out(f"{KUBECTL_KINDS[obj['kind']]}/{args.name} created")
    # A minute past the Job's own deadline, so that a Job the deadline ends is reported with its reason.
    timeout = args.budget + PULL_SECONDS + 60
    out(f"waiting for job.batch/{args.name} (interrupted, it goes on: collect it later with --collect)")
    wait(client, args.name, timeout=timeout)
    out(collect(client, args.name))
    return 0
