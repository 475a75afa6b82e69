"""The plugin's command line: kubectl's flag habits, list, version, completion, one-line errors."""

from __future__ import annotations

import json
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from specpilot import __version__
from specpilot.kubeaccess import Credentials, Loaded
from specpilot.plugin.client import Client, PluginError
from specpilot.plugin.kubectl import _parser, complete_main, completion_script, completions, main
from specpilot.plugin.table import render_list


@pytest.mark.parametrize(
    "argv",
    [
        ["-n", "team-a", "--context", "prod", "promote", "chat"],
        ["promote", "chat", "-n", "team-a", "--context", "prod"],
        ["--context", "prod", "promote", "-n", "team-a", "chat"],
    ],
    ids=["before", "after", "both"],
)
def test_connection_flags_go_before_or_after_the_command(argv: list[str]) -> None:
    args = _parser().parse_args(argv)
    assert (args.command, args.scope, args.namespace, args.context, args.kubeconfig) == (
        "promote",
        "chat",
        "team-a",
        "prod",
        None,
    )


def test_a_usage_error_is_one_line_and_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["frobnicate"])
    assert exited.value.code == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0].startswith("error: argument COMMAND: invalid choice: 'frobnicate'")
    assert lines[1:] == ["See 'kubectl specpilot --help' for usage."]


def test_version_and_completion_need_no_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version"], connect_to=lambda **_: pytest.fail("version connected")) == 0
    assert capsys.readouterr().out == f"kubectl-specpilot: v{__version__}\n"
    assert main(["completion", "zsh"], connect_to=lambda **_: pytest.fail("completion connected")) == 0
    assert capsys.readouterr().out.startswith("#compdef kubectl-specpilot\n")


GOOD_CLUSTER = '{name: c, cluster: {server: "https://127.0.0.1:1", certificate-authority-data: "!!x"}}'
GOOD_REST = "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\nusers: [{name: u, user: {}}]\n"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("apiVersion: v1\nclusters: [\n", "not valid YAML at line 3, column 1: expected the node content"),
        ("- a\n- b\n", "expected a mapping (clusters, contexts, users), got a list"),
        ("clusters: {c: {}}\n", "clusters must be a list of entries, each with a name"),
        ("contexts: [{name: x}]\ncurrent-context: x\n", "Expected key context"),
        (f"clusters: [{GOOD_CLUSTER}]\n{GOOD_REST}", "Invalid base64-encoded string"),
        (b"\xff\xfe", "not UTF-8 text"),
    ],
    ids=["yaml", "a-list", "clusters-a-mapping", "context-without-context", "bad-ca-data", "binary"],
)
def test_a_malformed_kubeconfig_is_one_line_naming_the_file_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str | bytes, problem: str
) -> None:
    path = tmp_path / "kubeconfig"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    assert main(["list", "--kubeconfig", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: kubeconfig {path}: ") and problem in err, err


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize(("typed", "offered"), [("pro", "promote"), ("--kube", "--kubeconfig"), ("comp", "completion")])
def test_bash_completion_completes_commands_and_flags(typed: str, offered: str) -> None:
    script = completion_script("bash")
    probe = (
        f'{script}\nCOMP_WORDS=(kubectl-specpilot {typed}); COMP_CWORD=1; _kubectl_specpilot; echo "${{COMPREPLY[@]}}"'
    )
    done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True, timeout=30)
    assert done.stdout.split() == [offered]


@pytest.mark.parametrize(
    ("words", "offered"),
    [(["pro"], ["promote"]), (["get", "--kube"], ["--kubeconfig"]), (["comp"], ["completion"]), (["zzz"], [])],
)
def test_kubectls_completion_command_offers_what_the_scripts_offer(
    capsys: pytest.CaptureFixture[str], words: list[str], offered: list[str]
) -> None:
    assert complete_main(words) == 0
    # one completion a line, then cobra's directive: no file names
    assert capsys.readouterr().out.splitlines() == [*offered, ":4"]
    assert completions(words) == offered


def test_list_is_one_line_per_pilot() -> None:
    pilots = [
        {
            "metadata": {"namespace": "team-a", "name": "demo"},
            "status": {
                "phase": "Healthy",
                "speculativeScopes": "1/3",
                "decision": {"outcome": "AdoptWithinEnvelope"},
                "fallbacks": [{"scope": "code", "reason": "ThresholdExceeded"}],
            },
        },
        {"metadata": {"namespace": "team-b", "name": "new"}},
    ]
    assert render_list(pilots).splitlines() == [
        "NAMESPACE   NAME   PHASE     SPECULATIVE   DECISION              LAST FALLBACK",
        "team-a      demo   Healthy   1/3           AdoptWithinEnvelope   code: ThresholdExceeded",
        "team-b      new    -         -             -                     -",
    ]


def api_client() -> Client:
    configuration = client.Configuration()
    configuration.host = "https://127.0.0.1:6443"
    return Client(Credentials(lambda: Loaded(configuration, False, datetime.now(UTC))), "team-a")


def refusing(error: Exception) -> object:
    def call(*args: object, **kwargs: object) -> object:
        raise error

    return call


def test_server_errors_are_one_line() -> None:
    forbidden = ApiException(status=403, reason="Forbidden")
    forbidden.body = json.dumps(
        {
            "kind": "Status",
            "message": 'speculationpilots.specpilot.io "demo" is forbidden: User "jane" cannot get resource\n'
            '"speculationpilots" in API group "specpilot.io" in the namespace "team-a"',
        }
    )
    cases = [
        (
            forbidden,
            'speculationpilot \'demo\': Forbidden: speculationpilots.specpilot.io "demo" is forbidden: User "jane" '
            'cannot get resource "speculationpilots" in API group "specpilot.io" in the namespace "team-a"',
        ),
        (ApiException(status=404, reason="Not Found"), "speculationpilot 'demo' not found in namespace 'team-a'"),
        (
            urllib3.exceptions.MaxRetryError(
                None,  # type: ignore[arg-type]
                "/apis",
                urllib3.exceptions.NewConnectionError(None, "Failed to establish a new connection: Connection refused"),  # type: ignore[arg-type]
            ),
            "cannot reach the API server at https://127.0.0.1:6443: Failed to establish a new connection: "
            "Connection refused",
        ),
    ]
    api = api_client()
    for error, message in cases:
        with pytest.raises(PluginError) as raised:
            api._call("speculationpilot 'demo'", refusing(error))
        assert str(raised.value) == message
        assert "\n" not in str(raised.value)
