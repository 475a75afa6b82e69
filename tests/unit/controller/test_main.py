"""`specpilot operator`'s command line: what it watches and how it logs."""

from __future__ import annotations

import json
import logging

import pytest

from specpilot.controller.main import configure_logging, parse_args


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
    assert config.prometheus_auth is not None and config.prometheus_auth.covers("https://prometheus.example/api")
    assert not config.prometheus_auth.covers("https://prometheus.example.attacker.io/")
    assert parse_args(["--all-namespaces"], {}).prometheus_auth is None
    with pytest.raises(SystemExit):
        parse_args(flags, {})
    assert "need --prometheus-auth-url" in capsys.readouterr().err


def test_the_peering_name_is_an_object_name_or_empty_for_standalone(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_args(["--all-namespaces", "--peering", "team-a-specpilot"], {}).peering == "team-a-specpilot"
    assert parse_args(["--all-namespaces"], {"SPECPILOT_PEERING": "ops.specpilot"}).peering == "ops.specpilot"
    assert parse_args(["--all-namespaces", "--peering", ""], {}).peering is None
    with pytest.raises(SystemExit):
        parse_args(["--all-namespaces", "--peering", "Team_A"], {})
    assert "argument --peering: 'Team_A' is not an object name" in capsys.readouterr().err
