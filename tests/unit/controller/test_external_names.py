"""A pilot may call its own namespace's Services, not whatever one of them names: a Service of type
ExternalName is followed to its target, which the outbound policy judges as if the spec named it."""

from __future__ import annotations

import pytest

from specpilot.testing.fakes import Json
from specpilot.testing.harness import Harness, pilot_doc


def external(target: str) -> Json:
    return {"metadata": {"name": "checks"}, "spec": {"type": "ExternalName", "externalName": target}}


def invalid_spec(h: Harness) -> Json | None:
    return next((c for c in h.status()["conditions"] if c["type"] == "InvalidSpec" and c["status"] == "True"), None)


@pytest.mark.parametrize(
    ("target", "why"),
    [
        ("kubernetes.default.svc.cluster.local", "it never calls the Kubernetes API server for a pilot"),
        ("hooks.elsewhere.example", "it calls the pilot's own namespace's Services (team-a)"),
        ("checks.team-b.svc.cluster.local", "it calls the pilot's own namespace's Services (team-a)"),
        ("169.254.169.254", "it never calls link-local or cloud metadata addresses"),
    ],
)
async def test_an_external_name_service_is_judged_by_its_target(target: str, why: str) -> None:
    h = Harness(pilot_doc(webhooks=["verdict"]))
    h.kube.objects[("Service", "team-a", "checks")] = external(target)
    await h.reconcile()
    invalid = invalid_spec(h)
    assert invalid is not None, h.status()["conditions"]
    assert "spec.quality.webhooks[0].url" in invalid["message"]
    assert f"checks is a Service of type ExternalName for {target}, and the operator may not call" in invalid["message"]
    assert why in invalid["message"]
    assert not h.kube.verbs("apply"), "nothing is deployed for it"


async def test_a_service_that_leads_within_the_namespace_or_is_ordinary_is_called() -> None:
    h = Harness(pilot_doc(webhooks=["verdict"]))
    h.kube.objects[("Service", "team-a", "checks")] = external("checks-v2.team-a.svc.cluster.local")
    h.kube.objects[("Service", "team-a", "checks-v2")] = {
        "metadata": {"name": "checks-v2"},
        "spec": {"type": "ClusterIP"},
    }
    await h.reconcile()
    assert invalid_spec(h) is None
    assert h.kube.verbs("apply")


async def test_a_loop_of_external_names_is_refused() -> None:
    h = Harness(pilot_doc(webhooks=["verdict"]))
    h.kube.objects[("Service", "team-a", "checks")] = external("checks.team-a.svc.cluster.local")
    await h.reconcile()
    invalid = invalid_spec(h)
    assert invalid is not None and "more than 4 ExternalName Services in a row" in invalid["message"]
