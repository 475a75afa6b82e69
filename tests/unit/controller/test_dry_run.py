"""Which changes are dry-run before a reconcile applies any: all, but a RoleBinding to a Role that is
not there yet, which the API server cannot admit before the Role exists (the operator holds no
`bind` verb; tests/cluster/test_chart.py runs it so)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import yaml

from specpilot.api.spec import SpeculationPilotSpec
from specpilot.controller.core.changes import _binds_absent_role
from specpilot.controller.core.objects import PilotRef
from specpilot.controller.core.observe import ChildSummary
from specpilot.controller.core.render import render
from specpilot.controller.core.routing import routing_table
from specpilot.controller.core.snapshot import Observation
from tests.unit.controller.specs import ROOT


def objects() -> dict[str, dict[str, Any]]:
    doc = yaml.safe_load((ROOT / "manifests/examples/local-demo.yaml").read_text())
    ref = PilotRef(name="demo", namespace="team-a", uid="00000000-0000-0000-0000-000000000001")
    spec = SpeculationPilotSpec.from_wire(doc["spec"])
    table = routing_table(ref.name, spec, {}, generation=1, now=datetime(2026, 12, 1, tzinfo=UTC))
    rendered = render(ref, spec, table=table, router_image="specpilot/specpilot:test")
    return {o["kind"]: o for o in rendered.objects}


def test_only_a_binding_to_an_absent_role_skips_the_dry_run() -> None:
    by_kind = objects()
    nothing = Observation(children={})
    role = by_kind["Role"]["metadata"]["name"]
    with_role = Observation(children={("Role", role): ChildSummary(kind="Role", name=role, generation=0, managed={})})
    assert _binds_absent_role(by_kind["RoleBinding"], nothing)
    assert not _binds_absent_role(by_kind["RoleBinding"], with_role)
    for kind in ("Role", "ServiceAccount", "Deployment", "Service", "ConfigMap"):
        assert not _binds_absent_role(by_kind[kind], nothing), kind


def test_the_role_is_applied_before_its_binding() -> None:
    kinds = list(objects())
    assert kinds.index("Role") < kinds.index("RoleBinding")
