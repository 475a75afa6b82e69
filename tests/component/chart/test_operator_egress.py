"""The operator pod's egress NetworkPolicy: off by default; on, the API server, the cluster's DNS, the
namespaces it serves, the Services' namespaces its outbound policy names and the Prometheus namespace,
and nothing else; never rendered without the API server's address."""

from __future__ import annotations

from typing import Any

from specpilot.testing.helm import CHART, by_kind, helm, template

ON = {"networkPolicy.operatorEgress.enabled": "true", "networkPolicy.operatorEgress.apiServerCIDRs": "{10.0.0.1/32}"}


def egress_policy(values: dict[str, str]) -> dict[str, Any] | None:
    found = [p for p in by_kind(template(values), "NetworkPolicy") if p["metadata"]["name"].endswith("-operator")]
    return found[0] if found else None


def namespaces_in(peer: dict[str, Any]) -> list[str]:
    (expression,) = peer["namespaceSelector"]["matchExpressions"]
    assert (expression["key"], expression["operator"]) == ("kubernetes.io/metadata.name", "In")
    return list(expression["values"])


def test_off_by_default() -> None:
    assert egress_policy({}) is None


def test_the_operator_reaches_the_api_server_dns_its_namespaces_and_what_its_policy_names() -> None:
    policy = egress_policy(
        {
            **ON,
            "watchNamespaces": "{team-a,team-b}",
            "networkPolicy.prometheusNamespace": "monitoring",
            # a Service in any spelling, a namespace's Services, and a host outside (no namespace of it)
            "policy.outboundHosts": "{prometheus-operated.monitoring:9090,*.shared,hook.audit.svc,api.example.com}",
        }
    )
    assert policy is not None
    (deployment,) = by_kind(template(ON), "Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Egress"] and policy["metadata"]["namespace"] == "specpilot-system"
    assert spec["podSelector"]["matchLabels"].items() <= pod_labels.items()
    api, dns, served, named = spec["egress"]
    assert api == {
        "to": [{"ipBlock": {"cidr": "10.0.0.1/32"}}],
        "ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}],
    }
    (dns_peer,) = dns["to"]
    assert dns_peer["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}
    assert dns_peer["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}
    assert {p["port"] for p in dns["ports"]} == {53} and {p["protocol"] for p in dns["ports"]} == {"UDP", "TCP"}
    assert namespaces_in(served["to"][0]) == ["team-a", "team-b"] and "ports" not in served
    assert sorted(namespaces_in(named["to"][0])) == ["audit", "monitoring", "shared"]


def test_cluster_wide_it_reaches_every_namespace_and_extra_rules_are_added() -> None:
    extra = {"networkPolicy.operatorEgress.extra[0].to[0].ipBlock.cidr": "203.0.113.0/24"}
    policy = egress_policy({**ON, "clusterWide": "true", **extra})
    assert policy is not None
    _api, _dns, served, added = policy["spec"]["egress"]
    assert served == {"to": [{"namespaceSelector": {}}]}
    assert added == {"to": [{"ipBlock": {"cidr": "203.0.113.0/24"}}]}


def test_never_rendered_without_the_api_servers_address() -> None:
    # `helm template` cannot look the address up; a policy without it would cut the operator off
    out = helm("template", "x", str(CHART), "--set", "networkPolicy.operatorEgress.enabled=true", check=False)
    assert out.returncode != 0 and "needs the API server's addresses" in out.stderr
