"""The router's configuration: flags and environment in, one checked value out, and back to flags."""

from __future__ import annotations

import pytest

from specpilot.wire.names import SCOPE_HEADER, Arm
from specpilot.wire.routerconfig import RouterConfig, RouterConfigError, split_host_port

STATIC = ((Arm.BASELINE, ("127.0.0.1:8001", "127.0.0.2:8001")), (Arm.SPECULATIVE, ()))


@pytest.mark.parametrize(
    "config",
    [
        pytest.param(RouterConfig(pilot="p1", namespace="team-a"), id="defaults"),
        pytest.param(
            RouterConfig(
                pilot="p1",
                namespace="team-a",
                listen="$(POD_IP):8080",  # Kubernetes expands it in container args
                admin_listen="[::1]:9191",
                scope_header="X-Task-Group",
                affinity_header="X-Session",
                default_scope="misc",
                request_timeout=12.5,
                connect_timeout=0.25,
                max_table_age=0,
                max_body_bytes=1024,
                max_header_bytes=4096,
                max_headers=10,
                max_samples=7,
                max_mirrored=3,
                drain_seconds=0.1,
                log_level="debug",
                ordinary_arm=Arm.CONTROL,
            ),
            id="every-value-changed",
        ),
        pytest.param(
            RouterConfig(
                pilot="bench", listen="127.0.0.1:0", static_routes="/tmp/routes.json", static_endpoints=STATIC
            ),
            id="static",
        ),
        pytest.param(
            RouterConfig(pilot="p", static_endpoints=((Arm.ALTERNATIVE, ("[fd00::1]:8000",)),), max_table_age=1e-3),
            id="static-without-a-table",
        ),
    ],
)
def test_parse_reads_back_what_to_args_renders(config: RouterConfig) -> None:
    args = config.to_args()
    assert all(arg.startswith("--") and "=" in arg for arg in args)
    assert RouterConfig.parse(args, {}) == config
    # The flags say everything: an environment cannot change what they say.
    environ = {"SPECPILOT_REQUEST_TIMEOUT": "1", "SPECPILOT_LISTEN": ":1", "SPECPILOT_LOG_LEVEL": "ERROR"}
    assert RouterConfig.parse(args, environ) == config


def test_defaults() -> None:
    config = RouterConfig.parse(["--pilot", "p1"], {"POD_NAMESPACE": "ns"})
    assert config == RouterConfig(pilot="p1", namespace="ns")
    assert (config.listen, config.admin_listen, config.scope_header) == ("0.0.0.0:8080", ":9090", SCOPE_HEADER)
    assert (config.request_timeout, config.connect_timeout, config.max_table_age) == (600.0, 5.0, 300.0)
    assert config.kubernetes and config.watched_namespace() == "ns"


def test_every_flag_falls_back_to_the_environment() -> None:
    environ = {
        "SPECPILOT_PILOT": "p2",
        "SPECPILOT_NAMESPACE": "ns",
        "POD_NAMESPACE": "ignored",
        "SPECPILOT_LISTEN": "127.0.0.1:1",
        "SPECPILOT_ADMIN_LISTEN": "127.0.0.1:2",
        "SPECPILOT_SCOPE_HEADER": "X-Group",
        "SPECPILOT_AFFINITY_HEADER": "X-Session",
        "SPECPILOT_DEFAULT_SCOPE": "rest",
        "SPECPILOT_REQUEST_TIMEOUT": "30",
        "SPECPILOT_CONNECT_TIMEOUT": "2.5",
        "SPECPILOT_MAX_TABLE_AGE": "0",
        "SPECPILOT_MAX_BODY_BYTES": "100",
        "SPECPILOT_MAX_HEADER_BYTES": "200",
        "SPECPILOT_MAX_HEADERS": "3",
        "SPECPILOT_MAX_SAMPLES": "4",
        "SPECPILOT_MAX_MIRRORED": "5",
        "SPECPILOT_DRAIN_SECONDS": "0",
        "SPECPILOT_LOG_LEVEL": "WARNING",
        "SPECPILOT_ORDINARY_ARM": "control",
    }
    assert RouterConfig.parse([], environ) == RouterConfig(
        pilot="p2",
        namespace="ns",
        listen="127.0.0.1:1",
        admin_listen="127.0.0.1:2",
        scope_header="X-Group",
        affinity_header="X-Session",
        default_scope="rest",
        request_timeout=30,
        connect_timeout=2.5,
        max_table_age=0,
        max_body_bytes=100,
        max_header_bytes=200,
        max_headers=3,
        max_samples=4,
        max_mirrored=5,
        drain_seconds=0,
        log_level="WARNING",
        ordinary_arm=Arm.CONTROL,
    )


@pytest.mark.parametrize(
    ("argv", "environ", "namespace"),
    [
        ([], {"POD_NAMESPACE": "pod"}, "pod"),
        ([], {"SPECPILOT_NAMESPACE": "mine", "POD_NAMESPACE": "pod"}, "mine"),
        ([], {"SPECPILOT_NAMESPACE": "", "POD_NAMESPACE": "pod"}, "pod"),
        (["--namespace", "flag"], {"SPECPILOT_NAMESPACE": "mine", "POD_NAMESPACE": "pod"}, "flag"),
    ],
    ids=["pod", "specpilot-first", "empty-is-unset", "flag-first"],
)
def test_namespace_falls_back_to_the_pods(argv: list[str], environ: dict[str, str], namespace: str) -> None:
    assert RouterConfig.parse(["--pilot", "p", *argv], environ).namespace == namespace


def test_flags_win_over_the_environment() -> None:
    config = RouterConfig.parse(["--pilot=p", "--namespace=ns", "--max-samples", "9"], {"SPECPILOT_MAX_SAMPLES": "1"})
    assert config.max_samples == 9


def test_an_empty_optional_value_is_none() -> None:
    config = RouterConfig.parse(["--pilot=p", "--namespace=ns"], {"SPECPILOT_AFFINITY_HEADER": ""})
    assert config.affinity_header is None


def test_static_endpoints_need_no_namespace() -> None:
    argv = [
        "--pilot=p",
        "--static-endpoints",
        "baseline=127.0.0.1:8001,127.0.0.2:8001",
        "--static-endpoints=speculative=",
    ]
    config = RouterConfig.parse(argv, {})
    assert config.static_endpoints == STATIC and config.namespace is None and not config.kubernetes


@pytest.mark.parametrize(
    ("argv", "environ", "problem"),
    [
        pytest.param(["--nope"], {}, "unrecognized arguments: --nope", id="unknown-flag"),
        pytest.param(["--request-timeout=soon"], {}, "--request-timeout: invalid float value", id="not-a-number"),
        pytest.param([], {"SPECPILOT_MAX_SAMPLES": "many"}, "--max-samples: invalid int value", id="env-not-a-number"),
        pytest.param(["--request-timeout=0"], {}, "--request-timeout: must be positive", id="zero-timeout"),
        pytest.param(["--connect-timeout=-1"], {}, "--connect-timeout: must be positive", id="negative-timeout"),
        pytest.param(["--request-timeout=nan"], {}, "--request-timeout: must be positive", id="nan-timeout"),
        pytest.param(["--request-timeout=inf"], {}, "--request-timeout: must be positive", id="infinite-timeout"),
        pytest.param(["--max-table-age=-1"], {}, "--max-table-age: must be 0 or more", id="negative-age"),
        pytest.param(["--drain-seconds=-1"], {}, "--drain-seconds: must be 0 or more", id="negative-drain"),
        pytest.param(["--max-samples=0"], {}, "--max-samples: must be positive", id="no-samples"),
        pytest.param(["--max-mirrored=0"], {}, "--max-mirrored: must be positive", id="no-mirrored"),
        pytest.param(["--max-body-bytes=-5"], {}, "--max-body-bytes: must be positive", id="body"),
        pytest.param(["--listen=8080"], {}, "--listen: want HOST:PORT", id="no-colon"),
        pytest.param(["--listen=host:http"], {}, "--listen: want HOST:PORT", id="port-name"),
        pytest.param(["--listen=:70000"], {}, "--listen: want HOST:PORT", id="port-range"),
        pytest.param(["--admin-listen=::1:9090"], {}, "--admin-listen: an IPv6 host needs brackets", id="ipv6"),
        pytest.param(["--admin-listen=a b:1"], {}, "--admin-listen: want HOST:PORT", id="space"),
        pytest.param(["--scope-header=X Scope"], {}, "--scope-header: not a header name", id="header"),
        pytest.param(["--affinity-header=a:b"], {}, "--affinity-header: not a header name", id="affinity"),
        pytest.param(["--default-scope=Misc"], {}, "--default-scope: not a scope name", id="scope-name"),
        pytest.param(["--log-level=LOUD"], {}, "--log-level: want one of", id="log-level"),
        pytest.param(
            ["--ordinary-arm=speculative"], {}, "--ordinary-arm: want one of baseline, control", id="ordinary-arm"
        ),
        pytest.param(
            ["--ordinary-arm=prod"], {}, "--ordinary-arm.*want one of baseline, control", id="ordinary-arm-unknown"
        ),
        pytest.param(["--static-endpoints=canary=h:1"], {}, "--static-endpoints: .*ARM one of", id="arm"),
        pytest.param(["--static-endpoints=127.0.0.1:1"], {}, "--static-endpoints: .*ARM=HOST:PORT", id="no-arm"),
        pytest.param(["--static-endpoints=baseline=h"], {}, "--static-endpoints: want HOST:PORT", id="no-port"),
        pytest.param(["--static-endpoints=baseline=:1"], {}, "--static-endpoints: want a host", id="no-host"),
        pytest.param(["--static-endpoints=baseline=h:0"], {}, "--static-endpoints: want a host and a port", id="port"),
        pytest.param(
            ["--static-endpoints=baseline=h:1", "--static-endpoints=baseline=h:2"],
            {},
            "--static-endpoints: arm baseline given more than once",
            id="arm-twice",
        ),
        pytest.param(["--static-routes=r.json"], {"POD_NAMESPACE": "ns"}, "--static-routes needs", id="routes-alone"),
    ],
)
def test_bad_values_are_refused_naming_the_flag(argv: list[str], environ: dict[str, str], problem: str) -> None:
    with pytest.raises(RouterConfigError, match=problem):
        RouterConfig.parse(["--pilot=p", "--namespace=ns", *argv], environ)


@pytest.mark.parametrize(
    ("argv", "environ", "problem"),
    [
        pytest.param([], {"POD_NAMESPACE": "ns"}, r"--pilot \(or SPECPILOT_PILOT\) is required", id="no-pilot"),
        pytest.param(["--pilot="], {"POD_NAMESPACE": "ns"}, "--pilot", id="empty-pilot"),
        pytest.param([], {"SPECPILOT_PILOT": "", "POD_NAMESPACE": "ns"}, "--pilot", id="empty-env-pilot"),
        pytest.param(["--pilot=p"], {}, r"--namespace \(or SPECPILOT_NAMESPACE / POD_NAMESPACE\) is required", id="ns"),
        pytest.param(["--pilot=p"], {"POD_NAMESPACE": ""}, "--namespace", id="empty-namespace"),
    ],
)
def test_what_is_required_is_named(argv: list[str], environ: dict[str, str], problem: str) -> None:
    with pytest.raises(RouterConfigError, match=problem):
        RouterConfig.parse(argv, environ)


def test_a_config_is_checked_when_made() -> None:
    with pytest.raises(RouterConfigError, match="--request-timeout"):
        RouterConfig(pilot="p", request_timeout=-1)
    with pytest.raises(RouterConfigError, match="--namespace"):
        RouterConfig(pilot="p").watched_namespace()


@pytest.mark.parametrize(
    ("address", "parsed"),
    [("0.0.0.0:8080", ("0.0.0.0", 8080)), (":9090", ("", 9090)), ("[::1]:1", ("::1", 1)), ("pod:0", ("pod", 0))],
)
def test_split_host_port(address: str, parsed: tuple[str, int]) -> None:
    assert split_host_port(address) == parsed
