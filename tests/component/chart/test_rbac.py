"""The chart's RBAC, in both modes: exactly what the operator calls, derived from its code; no
Secrets but those rbac.webhookSecrets names (read by name), no wildcards, and every permission the
routers' Role grants (RBAC lets the operator grant only what it holds). By default it writes only in the
namespaces it serves, never cluster-wide and never in a system namespace; cluster-wide writes are opt-in
(clusterWide)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from specpilot.api.pilot import GROUP, PLURAL
from specpilot.api.spec import Rehearsal, SpeculationPilotSpec
from specpilot.controller import handlers, kube
from specpilot.controller.core.objects import PilotRef
from specpilot.controller.core.rehearsal.manifests import render_rehearsal, render_step_load
from specpilot.controller.core.render import Rendered, render
from specpilot.controller.core.routing import routing_table
from specpilot.testing.helm import CHART, ROOT, by_kind, helm, template

Permission = tuple[str, str, str, str | None]  # (apiGroup, resource, verb, resourceName)
NAMESPACED = {"watchNamespaces": "{team-a,team-b}"}
CLUSTER_WIDE = {"clusterWide": "true"}
SYSTEM_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease")
PEERING = "specpilot"
AGGREGATE = "rbac.authorization.k8s.io/aggregate-to-"
READ = ("get", "list", "watch")
WRITE = ("create", "update", "patch", "delete", "deletecollection")


def expand(rules: list[dict[str, Any]]) -> set[Permission]:
    return {
        (group, resource, verb, name)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
        for name in rule.get("resourceNames") or [None]
    }


def rendered_pilot() -> Rendered:
    doc = yaml.safe_load((ROOT / "manifests/examples/local-demo.yaml").read_text())
    ref = PilotRef(name="demo", namespace="team-a", uid="00000000-0000-0000-0000-000000000001")
    spec = SpeculationPilotSpec.from_wire(doc["spec"])
    table = routing_table(ref.name, spec, {}, generation=1, now=datetime(2026, 12, 1, tzinfo=UTC))
    image = "specpilot/specpilot:test"
    # with a rehearsal running, so that its kinds (a step's Job) are counted too
    spec = spec.model_copy(update={"rehearsal": Rehearsal()})
    load = render_step_load(ref, spec, step=0, router_ip="10.0.0.1", mix="{}", rate=1, seconds=60, image=image)
    extra = (*render_rehearsal(ref, spec, table=table, image=image), load)
    return render(ref, spec, table=table, router_image=image, extra=extra, restarting=True)


def group_of(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def operator_needs(peering_resource: str) -> set[Permission]:
    """What the operator calls in a namespace it serves, from its own tables and renderer."""
    objects = rendered_pilot().objects
    children = {(group_of(o["apiVersion"]), kube.RESOURCES[(o["apiVersion"], o["kind"])]) for o in objects}
    watched = {(group, plural) for group, _, plural in handlers.CHILD_RESOURCES}
    assert children == watched, "every kind a pilot owns is watched for drift, and only those"
    needs: set[Permission] = set()
    # Children: applied server-side (create when absent, patch), watched by Kopf indices, deleted in
    # the teardown.
    needs |= {(g, res, verb, None) for g, res in children for verb in ("create", "patch", "list", "watch", "delete")}
    needs |= {("", "pods", verb, None) for verb in ("list", "watch")}  # the pods index, a workload's pods
    # Read each tick: spec.workloadRef's Deployment (never written) and spec.router.takeover's Service
    # (merge-patched, as children are: `patch`).
    needs |= {("apps", "deployments", "get", None), ("", "services", "get", None)}
    needs |= {("", "events", "create", None)}  # Kube.event, and Kopf's warnings
    needs |= {(GROUP, PLURAL, verb, None) for verb in ("list", "watch", "patch")}  # Kopf; manual annotations
    needs |= {(GROUP, f"{PLURAL}/status", "patch", None)}  # Kube.replace_status
    # Whatever the routers' Role grants, the operator must hold (no `escalate`).
    (role,) = [o for o in objects if o["kind"] == "Role"]
    needs |= {(g, res, verb, None) for g, res, verb, _ in expand(role["rules"])}
    needs |= {("kopf.dev", peering_resource, "list", None), ("kopf.dev", peering_resource, "watch", None)}
    needs |= {("kopf.dev", peering_resource, "patch", PEERING)}
    return needs


def operators(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """The operator's own roles of a kind, without those that Kubernetes' user-facing roles aggregate."""
    return [o for o in by_kind(objects, kind) if not any(k.startswith(AGGREGATE) for k in o["metadata"]["labels"])]


def writes(rules: list[dict[str, Any]]) -> set[Permission]:
    return {permission for permission in expand(rules) if permission[2] in WRITE}


def bound_write_namespaces(objects: list[dict[str, Any]]) -> set[str]:
    """Where the chart's bindings grant the operator's account a write verb: a namespace, or `*` for
    every namespace (a ClusterRoleBinding of a role that writes)."""
    roles = {
        (o["kind"], o["metadata"].get("namespace", "*"), o["metadata"]["name"]): o
        for o in objects
        if o["kind"] in ("Role", "ClusterRole")
    }
    where: set[str] = set()
    for binding in by_kind(objects, "RoleBinding") + by_kind(objects, "ClusterRoleBinding"):
        namespace = binding["metadata"].get("namespace", "*")
        ref = binding["roleRef"]
        role = roles[(ref["kind"], namespace if ref["kind"] == "Role" else "*", ref["name"])]
        if writes(role["rules"]):
            where.add(namespace if binding["kind"] == "RoleBinding" else "*")
    return where


@pytest.mark.parametrize(
    ("values", "namespace", "served"),
    [
        ({}, "specpilot-system", {"specpilot-system"}),
        ({}, "ops", {"ops"}),
        (NAMESPACED, "specpilot-system", {"team-a", "team-b"}),
    ],
    ids=["default", "default-elsewhere", "namespaced"],
)
def test_by_default_the_operator_writes_only_in_the_namespaces_it_serves(
    values: dict[str, str], namespace: str, served: set[str]
) -> None:
    objects = template(values, namespace=namespace)
    assert bound_write_namespaces(objects) == served
    assert not writes([rule for o in operators(objects, "ClusterRole") for rule in o["rules"]])
    assert not {o["metadata"].get("namespace") for o in objects} & set(SYSTEM_NAMESPACES)
    (deployment,) = by_kind(objects, "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert sorted(a.removeprefix("--namespace=") for a in args if a.startswith("--namespace=")) == sorted(served)
    assert "--all-namespaces" not in args


def test_cluster_wide_writes_are_opt_in_and_take_no_namespace_list() -> None:
    assert bound_write_namespaces(template(CLUSTER_WIDE)) == {"*"}
    out = helm("template", "x", str(CHART), "--set", "clusterWide=true", "--set", "watchNamespaces={a}", check=False)
    assert out.returncode != 0 and "clusterWide serves every namespace: leave watchNamespaces empty" in out.stderr


@pytest.mark.parametrize("namespace", SYSTEM_NAMESPACES)
def test_a_system_namespace_is_never_served(namespace: str) -> None:
    out = helm("template", "x", str(CHART), "--set", f"watchNamespaces={{team-a,{namespace}}}", check=False)
    assert out.returncode != 0 and f"watchNamespaces: {namespace} is a system namespace" in out.stderr


def test_cluster_wide_mode_grants_exactly_what_the_operator_calls() -> None:
    objects = template(CLUSTER_WIDE)
    (role,) = operators(objects, "ClusterRole")
    assert not by_kind(objects, "Role") and not by_kind(objects, "RoleBinding")
    discovery = {("apiextensions.k8s.io", "customresourcedefinitions", v, None) for v in ("list", "watch")}
    assert expand(role["rules"]) == operator_needs("clusterkopfpeerings") | discovery
    (binding,) = by_kind(objects, "ClusterRoleBinding")
    (account,) = by_kind(objects, "ServiceAccount")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": "specpilot-system"}
    ]


def test_namespaced_mode_grants_a_role_per_namespace_and_nothing_else_cluster_wide() -> None:
    objects = template(NAMESPACED)
    roles = by_kind(objects, "Role")
    assert sorted(role["metadata"]["namespace"] for role in roles) == ["team-a", "team-b"]
    for role in roles:
        assert expand(role["rules"]) == operator_needs("kopfpeerings")
    bindings = by_kind(objects, "RoleBinding")
    assert sorted((b["metadata"]["namespace"], b["roleRef"]["kind"]) for b in bindings) == [
        ("team-a", "Role"),
        ("team-b", "Role"),
    ]
    (cluster_role,) = operators(objects, "ClusterRole")  # read-only discovery, and only that
    assert expand(cluster_role["rules"]) == {
        ("apiextensions.k8s.io", "customresourcedefinitions", "list", None),
        ("apiextensions.k8s.io", "customresourcedefinitions", "watch", None),
        ("", "namespaces", "list", None),
        ("", "namespaces", "watch", None),
    }
    assert not operators(template({**NAMESPACED, "rbac.discovery": "false"}), "ClusterRole")
    (deployment,) = by_kind(objects, "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--namespace=team-a" in args and "--namespace=team-b" in args and "--all-namespaces" not in args
    peerings = by_kind(objects, "KopfPeering")
    assert sorted(p["metadata"]["namespace"] for p in peerings) == ["team-a", "team-b"]


@pytest.mark.parametrize("values", [{}, CLUSTER_WIDE, NAMESPACED], ids=["default", "cluster-wide", "namespaced"])
def test_no_secrets_no_wildcards_no_escalation(values: dict[str, str]) -> None:
    rules = [rule for o in template(values) if o["kind"] in ("Role", "ClusterRole") for rule in o["rules"]]
    assert rules
    for rule in rules:
        for key in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
            assert not any("*" in item for item in rule.get(key) or []), f"wildcard in {key}: {rule}"
        assert not {"secrets", "serviceaccounts/token", "pods/exec", "pods/attach"} & set(rule["resources"]), rule
        assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"]), rule


@pytest.mark.parametrize("values", [CLUSTER_WIDE, NAMESPACED], ids=["cluster-wide", "namespaced"])
def test_webhook_secrets_are_read_by_name_and_only_read(values: dict[str, str]) -> None:
    objects = template({**values, "rbac.webhookSecrets": "{hooks,scorer}"})
    roles = operators(objects, "ClusterRole" if "clusterWide" in values else "Role")
    for role in roles:
        secrets = {p for p in expand(role["rules"]) if p[1] == "secrets"}
        assert secrets == {("", "secrets", "get", "hooks"), ("", "secrets", "get", "scorer")}


def aggregated_into(objects: list[dict[str, Any]], role: str) -> set[Permission]:
    """What Kubernetes' `role` (admin, edit or view) takes in from the chart: the rules of every
    ClusterRole its aggregation rule selects by label."""
    return {
        permission
        for o in by_kind(objects, "ClusterRole")
        if o["metadata"]["labels"].get(AGGREGATE + role) == "true"
        for permission in expand(o["rules"])
    }


@pytest.mark.parametrize(
    "values",
    [{}, CLUSTER_WIDE, NAMESPACED, {"rbac.create": "false"}],
    ids=["default", "cluster-wide", "namespaced", "no-operator-rbac"],
)
def test_teams_granted_view_edit_or_admin_may_read_or_run_pilots(values: dict[str, str]) -> None:
    objects = template(values)
    read = {(GROUP, res, verb, None) for res in (PLURAL, f"{PLURAL}/status") for verb in READ}
    write = {(GROUP, PLURAL, verb, None) for verb in WRITE}
    assert aggregated_into(objects, "view") == read
    # the status stays the operator's: nobody else's write would survive its next reconcile
    assert aggregated_into(objects, "edit") == aggregated_into(objects, "admin") == read | write
    assert not aggregated_into(template({**values, "rbac.aggregatedRoles": "false"}), "admin")


def test_cluster_wide_the_operators_writes_in_system_namespaces_and_its_own_are_refused_at_admission() -> None:
    objects = template(CLUSTER_WIDE, namespace="ops")
    (role,) = operators(objects, "ClusterRole")
    (policy,) = by_kind(objects, "ValidatingAdmissionPolicy")
    (binding,) = by_kind(objects, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    spec = policy["spec"]
    guarded = {
        (group, resource)
        for rule in spec["matchConstraints"]["resourceRules"]
        if set(rule["operations"]) == {"CREATE", "UPDATE", "DELETE"}  # a patch is an UPDATE to admission
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    # every kind the ClusterRole lets it write but its own pilots, their Events and its peering object
    own = {PLURAL, f"{PLURAL}/status", "events", "clusterkopfpeerings"}
    assert guarded == {(group, res) for group, res, _, _ in writes(role["rules"]) if res not in own}
    (names,) = spec["matchConstraints"]["namespaceSelector"]["matchExpressions"]
    assert (names["key"], names["operator"]) == ("kubernetes.io/metadata.name", "In")
    assert sorted(names["values"]) == sorted([*SYSTEM_NAMESPACES, "ops"])
    (account,) = by_kind(objects, "ServiceAccount")
    (condition,) = spec["matchConditions"]
    assert (
        condition["expression"]
        == f"request.userInfo.username == 'system:serviceaccount:ops:{account['metadata']['name']}'"
    )
    (refusal,) = spec["validations"]
    assert (
        refusal["expression"] == "false" and "writes nothing in the system namespaces or its own" in refusal["message"]
    )
    assert spec["failurePolicy"] == "Fail"
    # namespaced mode is granted nothing there, and needs no guard
    assert not by_kind(template(), "ValidatingAdmissionPolicy")
    assert not by_kind(template({**CLUSTER_WIDE, "rbac.systemNamespacesGuard": "false"}), "ValidatingAdmissionPolicy")
