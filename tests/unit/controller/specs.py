"""The example pilots as the controller's unit tests read them: a manifest's spec under a fixed
PilotRef, and a spec with one field changed."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from specpilot.api.spec import SpeculationPilotSpec
from specpilot.controller.core.objects import PilotRef
from specpilot.controller.core.workload_ref import Workload, read_workload

ROOT = Path(__file__).resolve().parents[3]


def load(path: Path) -> tuple[PilotRef, SpeculationPilotSpec]:
    doc = yaml.safe_load(path.read_text())
    ref = PilotRef(name=doc["metadata"]["name"], namespace="team-a", uid="00000000-0000-0000-0000-000000000001")
    return ref, SpeculationPilotSpec.from_wire(doc["spec"])


def workload_of(spec: SpeculationPilotSpec) -> Workload | None:
    """The Deployment an example's spec.workloadRef names, from manifests/examples/workload/."""
    ref = spec.workload_ref
    if ref is None:
        return None
    for path in sorted((ROOT / "manifests/examples/workload").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        if doc["metadata"]["name"] == ref.name:
            found = read_workload(doc, ref)
            assert isinstance(found, Workload), found
            return found
    raise AssertionError(f"no example Deployment {ref.name}")


def with_spec(spec: SpeculationPilotSpec, path: str, value: Any) -> SpeculationPilotSpec:
    """A copy of `spec` with the camelCase field at dotted `path` set to `value`."""
    doc = copy.deepcopy(spec.to_wire())
    *parents, last = path.split(".")
    node = doc
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    return SpeculationPilotSpec.from_wire(doc)
