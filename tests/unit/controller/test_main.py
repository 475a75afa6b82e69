"""`specpilot operator`'s command line: what it watches and how it logs."""

from __future__ import annotations

import base64
import json
import logging
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from specpilot.controller.kube import ApiError, Kube
from specpilot.controller.main import (
    PUBLISHED_IMAGE,
    StartError,
    api_server_addresses,
    configure_logging,
    parse_args,
    router_image,
    token_account,
)


def test_logs_are_text_unless_json_is_asked_for() -> None:
    assert parse_args(["--all-namespaces"], {}).log_format == "text"
    assert parse_args(["--all-namespaces", "--log-format", "json"], {}).log_format == "json"
    assert parse_args(["--all-namespaces"], {"SPECPILOT_LOG_FORMAT": "json"}).log_format == "json"


def test_an_unknown_log_format_is_refused_naming_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--all-namespaces", "--log-format", "xml"], {})
    assert "argument --log-format: invalid choice: 'xml' (choose from" in capsys.readouterr().err


def test_json_logs_are_one_object_per_line(capfd: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        configure_logging(parse_args(["--all-namespaces", "--log-format", "json"], {}))
        logging.getLogger("specpilot.operator").info("team-a/demo: ScopePromoted: chat to stage 2")
        (line,) = [line for line in capfd.readouterr().err.splitlines() if "ScopePromoted" in line]
        record = json.loads(line)
        assert record["message"] == "team-a/demo: ScopePromoted: chat to stage 2"
        assert record["severity"] == "info" and "timestamp" in record
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def test_the_policy_comes_from_flags_or_the_environment() -> None:
    config = parse_args(["--all-namespaces", "--allow-outbound", "*.corp.example", "--allow-image", "reg/vllm/*"], {})
    assert (config.policy.outbound, config.policy.images) == (("*.corp.example",), ("reg/vllm/*",))
    env = {"SPECPILOT_ALLOW_OUTBOUND": "a.example, b.example:9090", "SPECPILOT_ALLOW_IMAGES": ""}
    config = parse_args(["--all-namespaces"], env)
    assert (config.policy.outbound, config.policy.images) == (("a.example", "b.example:9090"), ())


def test_prometheus_credentials_need_the_prometheus_they_are_for(capsys: pytest.CaptureFixture[str]) -> None:
    flags = ["--all-namespaces", "--prometheus-token-file", "/etc/specpilot/prometheus/token"]
    config = parse_args([*flags, "--prometheus-auth-url", "https://prometheus.example/"], {})
    held = config.prometheus.flags
    assert held is not None and held.covers("https://prometheus.example/api")
    assert not held.covers("https://prometheus.example.attacker.io/")
    assert parse_args(["--all-namespaces"], {}).prometheus.flags is None
    with pytest.raises(SystemExit):
        parse_args(flags, {})
    assert "need --prometheus-auth-url" in capsys.readouterr().err


SECRET = "s3cr3t-value"


def test_named_prometheus_endpoints_come_from_a_file_and_reach_the_policy(tmp_path: Path) -> None:
    file = tmp_path / "endpoints.yaml"
    file.write_text(
        yaml.safe_dump(
            {
                "endpoints": [
                    {
                        "name": "mimir",
                        "url": "https://mimir.monitoring:8080/prometheus",
                        "basic_auth": {"username": "specpilot", "password": SECRET},
                        "tls_config": {"ca_file": "/ca.crt", "cert_file": "/tls.crt", "key_file": "/tls.key"},
                        "http_headers": {"X-Scope-OrgID": {"values": ["team-a"]}},
                    },
                    {"name": "thanos", "url": "http://thanos.monitoring:9090"},
                ]
            }
        )
    )
    config = parse_args(["--all-namespaces", "--prometheus-endpoints", str(file)], {})
    assert set(config.prometheus.named) == {"mimir", "thanos"}
    assert config.policy.endpoints == ("mimir", "thanos")
    assert SECRET not in repr(config), "an inline secret is kept out of the configuration's repr"
    headers, secrets = config.prometheus.named["mimir"].headers()
    assert headers["X-Scope-OrgID"] == "team-a" and headers["Authorization"].startswith("Basic ")
    assert SECRET in secrets


@pytest.mark.parametrize(
    ("endpoint", "complaint"),
    [
        ({"name": "m", "url": "https://m", "basic_auth": {"password": SECRET}}, "username"),
        ({"name": "m", "url": "https://m", "authorization": {"credentials": SECRET, "credentials_file": "/t"}}, "one"),
        ({"name": "m", "url": "https://m", "tls_config": {"cert_file": "/c"}}, "key_file"),
        ({"name": "m", "url": "https://m", "http_headers": {"Authorization": {"secrets": [SECRET]}}}, "Authorization"),
        ({"name": "m", "url": "https://m", "oauth2": {"client_secret": SECRET}}, "oauth2"),
    ],
    ids=["no-username", "two-credentials", "cert-without-key", "authorization-header", "unknown-field"],
)
def test_a_bad_endpoints_file_names_the_field_and_never_a_secret(
    endpoint: dict[str, object], complaint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "endpoints.yaml"
    file.write_text(yaml.safe_dump({"endpoints": [endpoint]}))
    with pytest.raises(SystemExit):
        parse_args(["--all-namespaces", "--prometheus-endpoints", str(file)], {})
    err = capsys.readouterr().err
    assert "--prometheus-endpoints" in err and complaint in err and SECRET not in err, err


def test_the_peering_name_is_an_object_name_or_empty_for_standalone(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_args(["--all-namespaces", "--peering", "team-a-specpilot"], {}).peering == "team-a-specpilot"
    assert parse_args(["--all-namespaces"], {"SPECPILOT_PEERING": "ops.specpilot"}).peering == "ops.specpilot"
    assert parse_args(["--all-namespaces", "--peering", ""], {}).peering is None
    with pytest.raises(SystemExit):
        parse_args(["--all-namespaces", "--peering", "Team_A"], {})
    assert "argument --peering: 'Team_A' is not an object name" in capsys.readouterr().err


def _token(claims: dict[str, object]) -> str:
    payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    return f"eyJhbGciOiJSUzI1NiJ9.{payload}.signature"


def test_the_operators_own_service_account_comes_from_the_flag_else_its_token(tmp_path: Path) -> None:
    assert parse_args(["--all-namespaces"], {"SPECPILOT_SERVICE_ACCOUNT": "ops/specpilot"}).policy.accounts == (
        ("ops", "specpilot"),
    )
    token = tmp_path / "token"
    token.write_text(_token({"sub": "system:serviceaccount:team-a:specpilot-operator"}))
    assert token_account(token) == "team-a/specpilot-operator"
    token.write_text(_token({"sub": "alice@example.com"}))
    assert token_account(token) is None
    token.write_text("not a token")
    assert token_account(token) is None
    assert token_account(tmp_path / "absent") is None


def test_a_service_account_that_is_no_namespace_and_name_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--all-namespaces", "--service-account", "specpilot"], {})
    assert "--service-account: expected NAMESPACE/NAME, got 'specpilot'" in capsys.readouterr().err


def test_addresses_the_installer_allows_and_the_cluster_domain_come_from_flags_or_the_environment(
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = parse_args(
        ["--all-namespaces", "--allow-address", "127.0.0.0/8", "--cluster-domain", "Corp.Internal."], {}
    )
    assert [str(net) for net in config.allowed] == ["127.0.0.0/8"] and config.policy.cluster_domain == "corp.internal"
    config = parse_args(["--all-namespaces"], {"SPECPILOT_ALLOW_ADDRESSES": "::1, 10.96.0.1"})
    assert [str(net) for net in config.allowed] == ["::1/128", "10.96.0.1/32"]
    with pytest.raises(SystemExit):
        parse_args(["--all-namespaces", "--allow-address", "localhost"], {})
    assert "--allow-address: 'localhost' does not appear to be an IPv4 or IPv6 network" in capsys.readouterr().err


def test_the_api_servers_addresses_are_its_service_host_and_the_address_called() -> None:
    found = api_server_addresses({"KUBERNETES_SERVICE_HOST": "10.96.0.1"}, "https://[fd00::1]:6443")
    assert sorted(map(str, found)) == ["10.96.0.1", "fd00::1"]
    assert api_server_addresses({}, "https://api.cluster.example:6443") == frozenset()


class OwnPod:
    """The API server as `router_image` asks it: the operator's own pod, or a refusal."""

    def __init__(self, pod: dict[str, Any] | None = None, refusal: ApiError | None = None) -> None:
        self.found, self.refusal, self.asked = pod, refusal, []

    async def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.asked.append((namespace, name))
        if self.refusal is not None:
            raise self.refusal
        return self.found


POD_ENV = {"POD_NAMESPACE": "specpilot-system", "POD_ID": "specpilot-7d9f-x2"}
OWN_POD = {
    "spec": {
        "containers": [
            {"name": "mesh-proxy", "image": "istio/proxyv2:1.24"},
            {"name": "operator", "image": "registry.example.com/specpilot/specpilot:0.1.0"},
        ]
    }
}


async def test_the_routers_run_the_operators_own_image_unless_one_is_named() -> None:
    assert parse_args(["--namespace", "a"], {}).router_image is None
    api = OwnPod(OWN_POD)
    assert await router_image(None, cast(Kube, api), POD_ENV) == "registry.example.com/specpilot/specpilot:0.1.0"
    assert api.asked == [("specpilot-system", "specpilot-7d9f-x2")]
    named = parse_args(["--namespace", "a"], {"SPECPILOT_ROUTER_IMAGE": "r.example/router:2"}).router_image
    assert await router_image(named, cast(Kube, OwnPod()), POD_ENV) == "r.example/router:2"
    # run from a shell, outside any pod: this version's published image, never a Docker Hub name
    assert await router_image(None, cast(Kube, OwnPod()), {}) == PUBLISHED_IMAGE
    assert PUBLISHED_IMAGE.startswith("ghcr.io/specpilot/specpilot:")


@pytest.mark.parametrize(
    ("api", "says"),
    [
        (OwnPod(refusal=ApiError(403, "pods is forbidden")), "unreadable (403: pods is forbidden)"),
        (OwnPod(None), "not found"),
    ],
    ids=["forbidden", "gone"],
)
async def test_an_unreadable_own_pod_stops_the_start_naming_the_fix(api: OwnPod, says: str) -> None:
    with pytest.raises(StartError) as raised:
        await router_image(None, cast(Kube, api), POD_ENV)
    assert f"own pod specpilot-system/specpilot-7d9f-x2 {says}" in str(raised.value)
    assert "give --router-image (env SPECPILOT_ROUTER_IMAGE)" in str(raised.value)
