"""Named Prometheus endpoints through the chart: a ConfigMap with no secret in it lists them for the
operator in Prometheus' http_config shapes, each endpoint's Secret is mounted where the list points,
and the operator reads the list as rendered."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from specpilot.fetch.endpoints import parse_endpoints
from specpilot.testing.helm import CHART, NAMESPACE, RELEASE, by_kind, helm

ENDPOINTS = [
    {
        "name": "mimir",
        "url": "https://mimir-gateway.monitoring:8080/prometheus",
        "secretName": "mimir-credentials",
        "authorization": {"credentialsKey": "token"},
        "tls": {"caKey": "ca.crt", "certKey": "tls.crt", "keyKey": "tls.key", "serverName": "mimir.internal"},
        "headers": {"X-Scope-OrgID": "team-a"},
    },
    {
        "name": "thanos",
        "url": "http://thanos-query.monitoring:9090",
        "secretName": "thanos-basic",
        "basicAuth": {"username": "specpilot", "passwordKey": "password"},
    },
]


def rendered(tmp_path: Path, values: dict[str, Any]) -> list[dict[str, Any]]:
    file = tmp_path / "values.yaml"
    file.write_text(yaml.safe_dump(values))
    out = helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, "-f", str(file))
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def test_endpoints_reach_the_operator_with_their_secrets_mounted_where_the_list_points(tmp_path: Path) -> None:
    objects = rendered(tmp_path, {"prometheusEndpoints": ENDPOINTS})
    (config,) = [obj for obj in by_kind(objects, "ConfigMap") if obj["metadata"]["name"].endswith("-endpoints")]
    named = parse_endpoints(yaml.safe_load(config["data"]["endpoints.yaml"]))
    mimir, thanos = named["mimir"], named["thanos"]
    assert mimir.url == ENDPOINTS[0]["url"] and mimir.server_name == "mimir.internal"
    assert mimir.authorization is not None
    assert mimir.authorization.credentials_file == "/etc/specpilot/prometheus-endpoints/mimir/token"
    assert (
        mimir.tls_config is not None
        and mimir.tls_config.cert_file == "/etc/specpilot/prometheus-endpoints/mimir/tls.crt"
    )
    assert [h.values for h in mimir.http_headers.values()] == [["team-a"]]
    assert thanos.basic_auth is not None
    assert thanos.basic_auth.password_file == "/etc/specpilot/prometheus-endpoints/thanos/password"

    (deployment,) = by_kind(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert "--prometheus-endpoints=/etc/specpilot/prometheus-endpoints.yaml" in pod["containers"][0]["args"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert volumes["prometheus-endpoint-mimir"]["secret"] == {"secretName": "mimir-credentials"}
    assert mounts["prometheus-endpoint-mimir"]["mountPath"] == "/etc/specpilot/prometheus-endpoints/mimir"
    assert mounts["prometheus-endpoints"]["subPath"] == "endpoints.yaml"
    assert volumes["prometheus-endpoints"]["configMap"]["name"] == config["metadata"]["name"]


def test_without_endpoints_nothing_is_rendered_for_them(tmp_path: Path) -> None:
    objects = rendered(tmp_path, {})
    assert not [obj for obj in by_kind(objects, "ConfigMap") if obj["metadata"]["name"].endswith("-endpoints")]
    (deployment,) = by_kind(objects, "Deployment")
    assert not [a for a in deployment["spec"]["template"]["spec"]["containers"][0]["args"] if "endpoints" in a]


def test_the_schema_refuses_an_endpoint_without_its_url(tmp_path: Path) -> None:
    file = tmp_path / "values.yaml"
    file.write_text(yaml.safe_dump({"prometheusEndpoints": [{"name": "mimir"}]}))
    out = helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, "-f", str(file), check=False)
    assert out.returncode != 0 and "url" in out.stderr, out.stderr
