"""The chart: lint-clean, its CRDs the project's own, a Deployment that runs non-root on a read-only
root, peering whenever there is more than one replica (a peering object per release), and a
dashboard of metrics that exist."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.unit.controller.specs import load

from specpilot.controller.core.render import render
from specpilot.controller.core.routing import routing_table
from specpilot.controller.metrics import OperatorMetrics
from specpilot.router.metrics import RouterMetrics
from specpilot.testing.helm import CHART, ROOT, VALUES_README, by_kind, chart_readme, helm, template

SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def router_image(deployment: dict[str, Any]) -> str | None:
    """The routers' image the operator's container is given (SPECPILOT_ROUTER_IMAGE), or None: its own."""
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    values = [str(e["value"]) for e in container["env"] if e["name"] == "SPECPILOT_ROUTER_IMAGE"]
    return values[0] if values else None


@pytest.mark.parametrize(
    "values",
    [
        [],
        ["--set", "watchNamespaces={a,b}", "--set", "replicaCount=2"],
        ["--set", "metrics.serviceMonitor.enabled=true"],
    ],
    ids=["default", "namespaced", "service-monitor"],
)
def test_helm_lint_is_clean(values: list[str]) -> None:
    out = helm("lint", "--strict", str(CHART), *values)
    assert "0 chart(s) failed" in out.stdout


@pytest.mark.parametrize(
    ("chart_file", "source"),
    [
        ("files/crds/specpilot.io_speculationpilots.yaml", "crds/specpilot.io_speculationpilots.yaml"),
        ("crds/kopf-peering-crds.yaml", "manifests/operator/kopf-peering-crds.yaml"),
    ],
)
def test_chart_crds_are_the_projects_own_files(chart_file: str, source: str) -> None:
    assert (CHART / chart_file).read_bytes() == (ROOT / source).read_bytes(), (
        f"charts/specpilot/{chart_file} differs from {source}: cp {source} charts/specpilot/{chart_file}"
    )
    # Helm's crds/ holds only what never changes: it installs them once and never upgrades them
    assert [p.name for p in (CHART / "crds").iterdir()] == ["kopf-peering-crds.yaml"]


def crds(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in by_kind(objects, "CustomResourceDefinition")}


def test_the_pilot_crd_is_a_template_that_upgrades_and_stays_on_uninstall() -> None:
    source = yaml.safe_load((ROOT / "crds/specpilot.io_speculationpilots.yaml").read_text())
    (rendered,) = crds(template()).values()  # a template, so `helm upgrade` applies it
    kept = {**source["metadata"], "annotations": {"helm.sh/resource-policy": "keep"}}
    assert rendered == {**source, "metadata": kept}
    (dropped,) = crds(template({"crds.keep": "false"})).values()
    assert dropped == source  # uninstalling the release then deletes it, and every pilot with it
    assert not crds(template({"crds.install": "false"}))  # owned elsewhere (another release, GitOps)
    # Kopf's peering CRDs: in crds/, installed before the peering objects that need them
    assert sorted(crds(template({"crds.install": "false"}, crds=True))) == [
        "clusterkopfpeerings.kopf.dev",
        "kopfpeerings.kopf.dev",
    ]


def test_operator_runs_non_root_on_a_read_only_root_with_resources() -> None:
    (deployment,) = by_kind(template(), "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    assert container["livenessProbe"]["httpGet"]["port"] == "liveness"
    # Listening on the pod IP rather than 0.0.0.0: the same ports on every pod, never shared.
    assert "--liveness=$(POD_IP):8081" in container["args"] and "--metrics=$(POD_IP):8082" in container["args"]
    # where the release workflow publishes it
    assert container["image"] == "ghcr.io/specpilot/specpilot:0.1.0"
    assert router_image(deployment) is None  # the routers run the operator's own pod's image


def test_standby_replicas_need_peering() -> None:
    (deployment,) = by_kind(template({"replicaCount": "2"}), "Deployment")
    assert "--peering=specpilot" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert [p["metadata"]["name"] for p in by_kind(template({"clusterWide": "true"}), "ClusterKopfPeering")] == [
        "specpilot"
    ]
    assert [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in by_kind(template(), "KopfPeering")] == [
        ("specpilot-system", "specpilot")
    ]
    out = helm("template", "x", str(CHART), "--set", "replicaCount=2", "--set", "peering.enabled=false", check=False)
    assert out.returncode != 0 and "replicaCount > 1 needs peering.enabled" in out.stderr


def peering_names(objects: list[dict[str, Any]]) -> set[str]:
    """Every place a render names its peering object: the object(s), `--peering`, RBAC's resourceNames."""
    (deployment,) = by_kind(objects, "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    names = {arg.removeprefix("--peering=") for arg in args if arg.startswith("--peering=")}
    names |= {o["metadata"]["name"] for o in objects if o["kind"] in ("ClusterKopfPeering", "KopfPeering")}
    rules = [r for o in objects if o["kind"] in ("ClusterRole", "Role") for r in o["rules"]]
    return names | {name for r in rules if r["apiGroups"] == ["kopf.dev"] for name in r.get("resourceNames", [])}


@pytest.mark.parametrize(
    "values",
    [{}, {"clusterWide": "true"}, {"watchNamespaces": "{team-a}"}],
    ids=["default", "cluster-wide", "namespaced"],
)
def test_two_releases_never_share_a_peering_object(values: dict[str, str]) -> None:
    assert peering_names(template(values, release="blue")) == {"blue-specpilot"}
    assert peering_names(template(values, release="green")) == {"green-specpilot"}
    assert peering_names(template({**values, "peering.name": "ops"}, release="blue")) == {"ops"}


def test_metrics_service_and_optional_monitors() -> None:
    default = template()
    (service,) = by_kind(default, "Service")
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 8082, "targetPort": "metrics", "protocol": "TCP"}]
    assert not by_kind(default, "ServiceMonitor") and not by_kind(default, "PodMonitor")
    monitored = template({"metrics.serviceMonitor.enabled": "true", "metrics.podMonitor.enabled": "true"})
    (monitor,) = by_kind(monitored, "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics" and monitor["spec"]["endpoints"][0]["honorLabels"]
    (routers,) = by_kind(monitored, "PodMonitor")
    assert routers["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "router"
    assert routers["spec"]["podMetricsEndpoints"][0]["port"] == "admin"


def exported_names() -> set[str]:
    names = set()
    for registry in (OperatorMetrics().registry, RouterMetrics().registry):
        for family in registry.collect():
            names |= {family.name + suffix for suffix in SUFFIXES[family.type]}
    return names


def test_dashboard_queries_only_metrics_the_operator_and_router_export() -> None:
    (config_map,) = by_kind(template(), "ConfigMap")
    dashboard = json.loads(config_map["data"]["specpilot.json"])
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [a["expr"] for a in dashboard["annotations"]["list"]]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    used = {name for expr in exprs for name in re.findall(r"\bspecpilot_[a-z_]+", expr)}
    assert used and not used - exported_names(), f"not exported: {sorted(used - exported_names())}"
    # What the issue asks to see: per scope weight, time-per-committed-token ratio, verdicts, flips.
    for metric in ("specpilot_scope_weight", "specpilot_router_decode_seconds_sum", "specpilot_scope_verdicts_total"):
        assert metric in used
    assert "specpilot_scope_flips_total" in dashboard["annotations"]["list"][0]["expr"]
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("watchNamespace=team-a", "additional properties 'watchNamespace' not allowed"),
        ("replicaCount=two", "at '/replicaCount': got string, want integer"),
        ("watchNamespaces={Team_A}", "at '/watchNamespaces/0': 'Team_A' does not match pattern"),
        ("logLevel=LOUD", "at '/logLevel'"),
        ("metrics.service.port=0", "at '/metrics/service/port'"),
        ("podDisruptionBudget.maxUnavailable=0", "at '/podDisruptionBudget/maxUnavailable'"),
        ("global.imageRegistry=https://registry.example", "at '/global/imageRegistry'"),
    ],
)
def test_bad_values_are_refused_naming_the_value(setting: str, message: str) -> None:
    out = helm("template", "x", str(CHART), "--set", setting, check=False)
    assert out.returncode != 0 and message in out.stderr, out.stderr


def test_the_chart_readme_is_current_and_documents_every_value() -> None:
    expected = chart_readme()
    assert VALUES_README.read_text() == expected, "values.yaml changed: run `make chart-readme`"
    rows = [line for line in expected.splitlines() if line.startswith("| `")]
    assert rows and all(not line.endswith("|  |") for line in rows), [r for r in rows if r.endswith("|  |")]


def test_names_digest_log_format_disruption_budget_and_spread() -> None:
    objects = template(
        {
            "fullnameOverride": "ops",
            "nameOverride": "pilots",
            "image.digest": "sha256:" + "a" * 64,
            "logFormat": "json",
            "replicaCount": "2",
            "revisionHistoryLimit": "3",
            "topologySpreadConstraints[0].maxSkew": "1",
            "topologySpreadConstraints[0].topologyKey": "topology.kubernetes.io/zone",
            "topologySpreadConstraints[0].whenUnsatisfiable": "ScheduleAnyway",
        }
    )
    (deployment,) = by_kind(objects, "Deployment")
    (budget,) = by_kind(objects, "PodDisruptionBudget")
    assert deployment["metadata"]["name"] == budget["metadata"]["name"] == "ops"
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector["app.kubernetes.io/name"] == "pilots"
    assert budget["spec"] == {
        "maxUnavailable": 1,
        "unhealthyPodEvictionPolicy": "AlwaysAllow",
        "selector": {"matchLabels": selector},
    }
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "ghcr.io/specpilot/specpilot@sha256:" + "a" * 64
    assert "--log-format=json" in container["args"]
    assert router_image(deployment) is None
    assert deployment["spec"]["revisionHistoryLimit"] == 3
    (spread,) = pod["topologySpreadConstraints"]
    assert spread["labelSelector"] == {"matchLabels": selector} and spread["maxSkew"] == 1
    defaults = template()
    # A single replica's budget could only stall a drain: none is rendered for it.
    assert not by_kind(defaults, "PodDisruptionBudget")
    assert not by_kind(template({"replicaCount": "2", "podDisruptionBudget.enabled": "false"}), "PodDisruptionBudget")
    (plain,) = by_kind(defaults, "Deployment")
    assert "--log-format=text" in plain["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "topologySpreadConstraints" not in plain["spec"]["template"]["spec"]


@pytest.mark.parametrize(
    ("values", "operator", "router"),
    [
        (
            {"global.imageRegistry": "mirror.example:5000/hub/"},
            "mirror.example:5000/hub/specpilot/specpilot:0.1.0",
            None,
        ),
        (
            {"global.imageRegistry": "mirror.example", "image.digest": "sha256:" + "b" * 64},
            "mirror.example/specpilot/specpilot@sha256:" + "b" * 64,
            None,
        ),
        (
            {"image.registry": "", "image.repository": "registry.example/team/specpilot"},
            "registry.example/team/specpilot:0.1.0",
            None,
        ),
        # A routerImage is a full reference: used as given.
        ({"global.imageRegistry": "mirror.example", "routerImage": "other.example/r:1"}, None, "other.example/r:1"),
    ],
    ids=["registry", "registry-and-digest", "repository-in-full", "router-image-in-full"],
)
def test_the_image_registry_is_in_front_of_every_image_the_chart_derives(
    values: dict[str, str], operator: str | None, router: str | None
) -> None:
    (deployment,) = by_kind(template(values), "Deployment")
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == (operator or "mirror.example/specpilot/specpilot:0.1.0")
    assert router_image(deployment) == router  # None: the operator runs the routers on its own image


@pytest.mark.parametrize(
    ("values", "named"),
    [({}, False), ({"clusterWide": "true"}, False), ({"watchNamespaces": "{team-a}"}, True)],
    ids=["default", "cluster-wide", "namespaced-elsewhere"],
)
def test_the_routers_image_is_named_only_where_the_operator_cannot_read_its_own_pod(
    values: dict[str, str], named: bool
) -> None:
    # It lists pods only in the namespaces it serves: serving its own, it reads its pod's image.
    (deployment,) = by_kind(template(values), "Deployment")
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert router_image(deployment) == (image if named else None)


def test_the_chart_installs_as_a_dependency_of_an_umbrella_chart(tmp_path: Path) -> None:
    umbrella = tmp_path / "platform"
    (umbrella / "templates").mkdir(parents=True)
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    (umbrella / "Chart.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v2",
                "name": "platform",
                "version": "1.0.0",
                "dependencies": [{"name": "specpilot", "version": chart["version"], "repository": f"file://{CHART}"}],
            }
        )
    )
    (umbrella / "values.yaml").write_text(yaml.safe_dump({"global": {"imageRegistry": "registry.example"}}))
    helm("dependency", "build", str(umbrella))
    for extra in ([], ["--set", "specpilot.replicaCount=2", "--set", "global.env=prod"]):
        out = helm("template", "platform", str(umbrella), "--namespace", "platform", *extra)
        (deployment,) = by_kind([d for d in yaml.safe_load_all(out.stdout) if d], "Deployment")
        assert deployment["metadata"]["name"] == "platform-specpilot"
        image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
        assert image == "registry.example/specpilot/specpilot:0.1.0" and router_image(deployment) is None
        assert deployment["spec"]["replicas"] == (2 if extra else 1)


def test_policy_and_prometheus_credentials_reach_the_operator() -> None:
    objects = template(
        {
            "policy.outboundHosts": "{prometheus.example:9091,*.corp.example}",
            "policy.engineImages": "{registry.corp.example/vllm/*}",
            "prometheusAuth.url": "https://prometheus.example:9091/",
            "prometheusAuth.secretName": "prometheus-credentials",
        }
    )
    (deployment,) = by_kind(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    for arg in (
        "--allow-outbound=prometheus.example:9091",
        "--allow-outbound=*.corp.example",
        "--allow-image=registry.corp.example/vllm/*",
        "--prometheus-auth-url=https://prometheus.example:9091/",
        "--prometheus-token-file=/etc/specpilot/prometheus/token",
        "--prometheus-ca-file=/etc/specpilot/prometheus/ca.crt",
    ):
        assert arg in args, args
    (volume,) = [v for v in pod["volumes"] if v["name"] == "prometheus-auth"]
    assert volume["secret"] == {"secretName": "prometheus-credentials"}
    mounts = pod["containers"][0]["volumeMounts"]
    assert {"name": "prometheus-auth", "mountPath": "/etc/specpilot/prometheus", "readOnly": True} in mounts
    (plain,) = by_kind(template(), "Deployment")
    assert not [a for a in plain["spec"]["template"]["spec"]["containers"][0]["args"] if "allow-" in a or "prom" in a]


def test_the_outbound_addresses_cluster_domain_and_the_operators_own_account_reach_the_operator() -> None:
    objects = template({"policy.outboundAddresses": "{10.1.2.3/32}", "policy.clusterDomain": "corp.internal"})
    (deployment,) = by_kind(objects, "Deployment")
    (account,) = by_kind(objects, "ServiceAccount")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert {"--allow-address=10.1.2.3/32", "--cluster-domain=corp.internal"} <= set(container["args"])
    own = f"specpilot-system/{account['metadata']['name']}"
    assert {"name": "SPECPILOT_SERVICE_ACCOUNT", "value": own} in container["env"]


NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a label selector (matchLabels, and Exists expressions) selects these labels."""
    exists = all(e["operator"] == "Exists" and e["key"] in labels for e in selector.get("matchExpressions", []))
    return exists and all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def test_network_policies_admit_only_what_each_pod_needs() -> None:
    objects = template(
        {
            "watchNamespaces": "{team-a,team-b}",
            "networkPolicy.enabled": "true",
            "networkPolicy.prometheusNamespace": "mon",
        }
    )
    policies = by_kind(objects, "NetworkPolicy")
    assert sorted((p["metadata"]["namespace"], p["metadata"]["name"]) for p in policies) == [
        ("team-a", "specpilot-engines"),
        ("team-a", "specpilot-routers"),
        ("team-b", "specpilot-engines"),
        ("team-b", "specpilot-routers"),
    ]
    engines = next(p for p in policies if p["metadata"]["name"].endswith("engines"))["spec"]
    routers = next(p for p in policies if p["metadata"]["name"].endswith("routers"))["spec"]
    # The selectors pick the pods the operator renders: the arms' and the router's.
    ref, spec = load(ROOT / "manifests/examples/local-demo.yaml")
    out = render(ref, spec, table=routing_table(ref.name, spec, {}, generation=1, now=NOW), router_image="i")
    arm_labels = [plan.deployment["spec"]["template"]["metadata"]["labels"] for plan in out.arms]
    router = next(o for o in out.objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "demo-router")
    router_labels = router["spec"]["template"]["metadata"]["labels"]
    assert all(_selects(engines["podSelector"], labels) for labels in arm_labels)
    assert not _selects(engines["podSelector"], router_labels)
    assert _selects(routers["podSelector"], router_labels)
    (to_engines,) = engines["ingress"]
    assert to_engines["ports"] == [{"port": 8000, "protocol": "TCP"}]
    router_source, operator_source, prometheus_source = to_engines["from"]
    assert _selects(router_source["podSelector"], router_labels)
    assert operator_source["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "specpilot-system"}
    (operator_pod,) = by_kind(objects, "Deployment")
    assert _selects(operator_source["podSelector"], operator_pod["spec"]["template"]["metadata"]["labels"])
    assert prometheus_source == {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "mon"}}}
    clients, admin = routers["ingress"]
    assert clients == {"ports": [{"port": 8080, "protocol": "TCP"}]}  # from anywhere
    assert admin["ports"] == [{"port": 9090, "protocol": "TCP"}] and admin["from"] == [
        operator_source,
        prometheus_source,
    ]
    default = by_kind(template({"networkPolicy.enabled": "true"}), "NetworkPolicy")
    assert {p["metadata"]["namespace"] for p in default} == {"specpilot-system"}  # the one it serves
    refused = helm(
        *("template", "x", str(CHART), "--set", "networkPolicy.enabled=true", "--set", "clusterWide=true"), check=False
    )
    assert refused.returncode != 0 and "with clusterWide needs the pilots' namespaces" in refused.stderr
