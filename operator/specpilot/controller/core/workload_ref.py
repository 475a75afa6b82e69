"""A Deployment a team already runs vLLM in (`spec.workloadRef`), as read each tick: its pod template,
the engine container in it, and what the engine serves. The other arms run copies of that template,
the speculative arm with one switch added to the engine container, hardened as every engine pod is; a
template that asks for what no engine pod may (`api.podsecurity`) is refused. Pure."""

from __future__ import annotations

import copy
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from specpilot.api.flags import flag_value
from specpilot.api.podsecurity import annotation_refusals, pod_refusals
from specpilot.api.spec import WorkloadRef
from specpilot.api.status import WorkloadStatus
from specpilot.api.validate import Problem
from specpilot.controller.core.observe import DeploymentState, deployment_state
from specpilot.wire.names import ENGINE_PORT

Json = dict[str, Any]

# How a container starts vLLM's OpenAI server: `vllm serve MODEL`, the server module, or the project's
# CPU stand-in, which takes the same arguments.
SERVE = (("vllm", "serve"), ("specpilot", "mock-vllm"))
SERVER_MODULE = "vllm.entrypoints.openai.api_server"


@dataclass(frozen=True)
class Workload:
    """The referenced Deployment: its name, pod template, pod selector and rollout state, and which of
    the template's containers is the engine."""

    name: str
    template: Json
    selector: Mapping[str, str]
    state: DeploymentState
    container: int

    @property
    def engine(self) -> Json:
        """The engine container as the Deployment runs it."""
        return dict(self.template["spec"]["containers"][self.container])

    @property
    def image(self) -> str:
        return str(self.engine.get("image", ""))

    @property
    def argv(self) -> list[str]:
        """The engine's command line: its command and args, a shell's script split into words."""
        return _argv(self.engine)


def _script_at(words: Sequence[str]) -> int | None:
    """Where a shell's `-c` script stands in a command line, if the container starts vLLM from one."""
    return words.index("-c") + 1 if "-c" in words[:-1] else None


def _argv(container: Mapping[str, Any]) -> list[str]:
    words = [str(word) for word in (*(container.get("command") or ()), *(container.get("args") or ()))]
    at = _script_at(words)
    if at is None:
        return words
    try:
        script = shlex.split(words[at])
    except ValueError:  # quoting a shell would refuse too: read it as one word
        script = [words[at]]
    return [*words[:at], *script, *words[at + 1 :]]


def _serve_at(argv: Sequence[str]) -> int | None:
    """Where `vllm serve` (or the stand-in) starts in argv: the index of its first word."""
    names = [word.rsplit("/", 1)[-1] for word in argv]
    return next((index for index, pair in enumerate(pairwise(names)) if pair in SERVE), None)


def serves_vllm(container: Mapping[str, Any]) -> bool:
    """Whether the container starts vLLM's OpenAI server."""
    words = _argv(container)
    return SERVER_MODULE in words or _serve_at(words) is not None


def read_workload(obj: Mapping[str, Any] | None, ref: WorkloadRef) -> Workload | list[Problem]:
    """The Deployment as a workload to pilot, or why it cannot be one, naming spec.workloadRef's fields."""
    if obj is None:
        return [Problem("spec.workloadRef.name", f"no Deployment {ref.name} in the pilot's namespace")]
    spec = obj.get("spec") or {}
    template = spec.get("template") or {}
    containers = list((template.get("spec") or {}).get("containers") or [])
    selector = spec.get("selector") or {}
    problems = []
    if selector.get("matchExpressions"):
        problems.append(
            Problem(
                "spec.workloadRef.name",
                f"Deployment {ref.name} selects its pods with matchExpressions, which the Service that reaches "
                "them cannot: select with matchLabels",
            )
        )
    index = _engine_container(containers, ref)
    if isinstance(index, Problem):
        return [*problems, index]
    port = flag_value(_argv(containers[index]), "--port")
    if port is not None and port != str(ENGINE_PORT):
        problems.append(
            Problem(
                "spec.workloadRef.name",
                f"its engine serves on port {port}; the routers and probes reach engines on vLLM's default "
                f"{ENGINE_PORT}: drop --port",
            )
        )
    refused = [
        *annotation_refusals(
            (template.get("metadata") or {}).get("annotations") or {}, "spec.template.metadata.annotations"
        ),
        *pod_refusals(template.get("spec") or {}, "spec.template.spec"),
    ]
    problems += [Problem("spec.workloadRef.name", f"Deployment {ref.name}'s {where}: {why}") for where, why in refused]
    if problems:
        return problems
    return Workload(
        name=ref.name,
        template=copy.deepcopy(template),
        selector=dict(selector.get("matchLabels") or {}),
        state=deployment_state(obj),
        container=index,
    )


def _engine_container(containers: Sequence[Mapping[str, Any]], ref: WorkloadRef) -> int | Problem:
    names = [str(c.get("name", "")) for c in containers]
    if ref.container is not None:
        if ref.container in names:
            return names.index(ref.container)
        return Problem("spec.workloadRef.container", f"Deployment {ref.name} has no container {ref.container}")
    serving = [index for index, container in enumerate(containers) if serves_vllm(container)]
    if len(serving) == 1:
        return serving[0]
    found = "none of its containers runs" if not serving else "more than one of its containers runs"
    return Problem(
        "spec.workloadRef.container",
        f"{found} `vllm serve` or {SERVER_MODULE}: name the engine container ({', '.join(names)})",
    )


def served_model(workload: Workload) -> str:
    """The model name clients send: --served-model-name's first, else the model served."""
    argv = workload.argv
    named = flag_value(argv, "--served-model-name")
    return named or _model(argv)


def _model(argv: Sequence[str]) -> str:
    flagged = flag_value(argv, "--model")
    if flagged:
        return flagged
    at = _serve_at(argv)
    if at is not None and at + 2 < len(argv) and not argv[at + 2].startswith("-"):
        return argv[at + 2]
    return "facebook/opt-125m"  # vLLM's default model


def tensor_parallel_size(workload: Workload) -> int:
    value = flag_value(workload.argv, "--tensor-parallel-size", "-tp")
    return int(value) if value is not None and value.isdigit() else 1


def copied_pod(workload: Workload, extra_args: Sequence[str] = ()) -> Json:
    """The workload's pod spec for another arm: as it is, with `extra_args` after the engine's own
    (inside a shell's script when it starts vLLM from one)."""
    pod = copy.deepcopy(workload.template.get("spec") or {})
    container = pod["containers"][workload.container]
    script = _script_index(container)
    if extra_args and script is not None:
        key, index = script
        values = list(container[key])
        values[index] = f"{values[index]} {shlex.join(extra_args)}"
        container[key] = values
    elif extra_args:
        container["args"] = [*(container.get("args") or []), *extra_args]
    return pod


def _script_index(container: Mapping[str, Any]) -> tuple[str, int] | None:
    """Where a shell's `-c` script sits in the container (its key and index), if it starts vLLM from one."""
    command, args = list(container.get("command") or []), list(container.get("args") or [])
    at = _script_at([*command, *args])
    if at is None:
        return None
    return ("command", at) if at < len(command) else ("args", at - len(command))


def copied_metadata(workload: Workload, labels: Mapping[str, str], annotations: Mapping[str, str]) -> Json:
    """A copy's pod metadata: the workload's labels but those its Deployment selects by (a copy must never
    join the production pods' Deployment or the Services that select like it), under the operator's."""
    meta = workload.template.get("metadata") or {}
    kept = {key: value for key, value in (meta.get("labels") or {}).items() if key not in workload.selector}
    return {
        "labels": {**kept, **labels},
        "annotations": {**(meta.get("annotations") or {}), **annotations},
    }


def workload_status(workload: Workload) -> WorkloadStatus:
    return WorkloadStatus(name=workload.name, image=workload.image[:512], args=[a[:1024] for a in workload.argv[:128]])


def what_changed(old: WorkloadStatus, new: WorkloadStatus) -> str:
    """What changed in the engine container, in words: its image, the flags added and removed."""
    said = [f"image {old.image} -> {new.image}"] if old.image != new.image else []
    added = [arg for arg in new.args if arg not in old.args]
    removed = [arg for arg in old.args if arg not in new.args]
    if added:
        said.append(f"added {' '.join(added)}"[:300])
    if removed:
        said.append(f"removed {' '.join(removed)}"[:300])
    return "; ".join(said) or "its pod template"
