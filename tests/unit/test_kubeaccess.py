"""Credentials that expire are renewed: `load_access().token()` asks the `kubernetes` config loaders
at each call, so an exec plugin's token is fetched again once it expires, and a rotated in-cluster
service-account token is read again from its file."""

from __future__ import annotations

import datetime as dt
import shutil
import sys
from pathlib import Path

import certifi
import pytest
import yaml
from kubernetes import client
from kubernetes.config import incluster_config, kube_config

from specpilot import kubeaccess
from specpilot.controller.handlers import connection_info
from specpilot.kubeaccess import load_access

# An exec plugin: a new token at each run (counted in `calls` beside it), expiring when `expiry` says.
PLUGIN = """\
import json, os, pathlib
request = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
here = pathlib.Path(__file__).parent
calls = here / "calls"
n = int(calls.read_text()) + 1 if calls.exists() else 1
calls.write_text(str(n))
expiry = (here / "expiry").read_text()
print(json.dumps({
    "apiVersion": request["apiVersion"],
    "kind": "ExecCredential",
    "status": {"token": f"exec-{n}", "expirationTimestamp": expiry},
}))
"""


class Clock:
    """The `datetime` module as the config loaders see it, with a `now` that stands still until the test
    moves it forward (on a whole second, as the plugin writes its expiry): the plugin's runs take real
    time, which on a loaded machine would otherwise bring a renewal forward."""

    def __init__(self) -> None:
        self.offset = dt.timedelta()
        self.start = dt.datetime.now(dt.UTC).replace(microsecond=0)
        clock = self

        class Now(dt.datetime):
            @classmethod
            def now(cls, tz: dt.tzinfo | None = None) -> dt.datetime:
                now = clock.now()
                return now.astimezone(tz) if tz is not None else now.astimezone().replace(tzinfo=None)

        self.datetime = Now
        self.timedelta = dt.timedelta

    def now(self) -> dt.datetime:
        return self.start + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += dt.timedelta(seconds=seconds)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(kube_config, "datetime", fake)
    monkeypatch.setattr(incluster_config, "datetime", fake)
    monkeypatch.setattr(kubeaccess, "datetime", fake.datetime)
    return fake


class Plugin:
    def __init__(self, directory: Path, clock: Clock) -> None:
        self.directory = directory
        self.clock = clock
        (directory / "plugin.py").write_text(PLUGIN)

    def expire_in(self, seconds: float) -> None:
        """How long from the test's now the plugin's next credentials live (negative: expired)."""
        expiry = self.clock.now() + dt.timedelta(seconds=seconds)
        (self.directory / "expiry").write_text(expiry.strftime("%Y-%m-%dT%H:%M:%SZ"))

    @property
    def calls(self) -> int:
        path = self.directory / "calls"
        return int(path.read_text()) if path.exists() else 0


@pytest.fixture(params=["client.authentication.k8s.io/v1beta1", "client.authentication.k8s.io/v1"])
def plugin(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: Clock) -> Plugin:
    """Outside a cluster, with a kubeconfig whose user gets its token from an exec plugin."""
    api_version = str(request.param)
    exec_config = {"apiVersion": api_version, "command": sys.executable, "args": [str(tmp_path / "plugin.py")]}
    if api_version.endswith("/v1"):
        exec_config["interactiveMode"] = "Never"  # required from v1 on
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:6443"}}],
        "users": [{"name": "u", "user": {"exec": exec_config}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig))
    monkeypatch.delenv(incluster_config.SERVICE_HOST_ENV_NAME, raising=False)
    monkeypatch.delenv(incluster_config.SERVICE_PORT_ENV_NAME, raising=False)
    monkeypatch.setenv("KUBECONFIG", str(path))
    # The package reads KUBECONFIG once, when imported: point its default there as well.
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(path))
    return Plugin(tmp_path, clock)


def test_an_exec_plugin_token_is_kept_until_it_expires_then_fetched_again(plugin: Plugin, clock: Clock) -> None:
    plugin.expire_in(3600)
    access = load_access()
    assert access.server == "http://127.0.0.1:6443" and access.ssl() is False
    assert [access.token(), access.token(), access.token()] == ["Bearer exec-1"] * 3
    assert plugin.calls == 1  # cached while valid: no run per request
    clock.advance(3600)
    plugin.expire_in(3600)
    assert access.token() == "Bearer exec-2"
    assert access.token() == "Bearer exec-2"  # and the new one is kept in turn
    assert plugin.calls == 2


def test_a_short_lived_exec_plugin_token_is_renewed_before_it_expires_not_per_request(
    plugin: Plugin, clock: Clock
) -> None:
    # Renewed 5 minutes ahead of `expirationTimestamp`, or with a fifth of its life left when it lives
    # less than 25 minutes: an expired token is never reused, and a short-lived one is not fetched again
    # at each request (a plugin run per request would stall every call).
    plugin.expire_in(-60)
    access = load_access()
    assert access.token() == "Bearer exec-2"  # loading ran the plugin once, the first request again
    plugin.expire_in(60)
    assert [access.token(), access.token()] == ["Bearer exec-3", "Bearer exec-3"]
    clock.advance(47)
    assert access.token() == "Bearer exec-3"
    plugin.expire_in(3600)
    clock.advance(2)  # 11 s left of 60: renewed
    assert [access.token(), access.token()] == ["Bearer exec-4", "Bearer exec-4"]
    assert plugin.calls == 4


@pytest.fixture
def mount(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Inside a cluster: the service account's projected token and CA, in `tmp_path`."""
    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("sa-1")
    shutil.copy(certifi.where(), ca)  # any CA bundle the TLS context can load
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(ca))
    monkeypatch.setenv(incluster_config.SERVICE_HOST_ENV_NAME, "10.96.0.1")
    monkeypatch.setenv(incluster_config.SERVICE_PORT_ENV_NAME, "443")
    return token


def test_a_rotated_service_account_token_is_read_again_within_a_minute(mount: Path, clock: Clock) -> None:
    # The kubelet renews a projected token at 80% of its life and the old one stays valid until it
    # expires: 2 minutes at the shortest expirationSeconds (10 minutes), 12 at the default hour.
    access = load_access()
    assert access.server == "https://10.96.0.1:443"
    assert access.token() == "bearer sa-1"
    mount.write_text("sa-2")  # the kubelet rotates the projected token
    clock.advance(30)
    assert access.token() == "bearer sa-1"  # the file is read at most once a minute
    clock.advance(31)
    assert access.token() == "bearer sa-2"
    mount.write_text("sa-3")
    clock.advance(61)
    assert access.token() == "bearer sa-3"


def test_kopf_logs_in_with_the_renewing_credentials_and_again_when_they_are_due() -> None:
    cfg = client.Configuration()
    cfg.host, cfg.cert_file, cfg.key_file = "https://10.96.0.1:443", "/tmp/c.crt", "/tmp/c.key"
    cfg.api_key = {"BearerToken": "bearer sa-1"}
    at = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    expiry = at + dt.timedelta(minutes=10)
    credentials = kubeaccess.Credentials(
        lambda: kubeaccess.Loaded(cfg, False, at, expiry=expiry), clock=lambda: at + dt.timedelta(minutes=1)
    )
    info = connection_info(credentials)
    assert (info.server, info.scheme, info.token) == ("https://10.96.0.1:443", "bearer", "sa-1")
    assert (info.certificate_path, info.private_key_path) == ("/tmp/c.crt", "/tmp/c.key")
    assert info.expiration == expiry - dt.timedelta(minutes=2), "a fifth of its life ahead"


FAILING_PLUGIN = """\
import sys
print("token expired: log in again", file=sys.stderr)
sys.exit(3)
"""


def test_a_failing_exec_plugin_stops_the_load_naming_the_user_and_the_command(
    plugin: Plugin, capfd: pytest.CaptureFixture[str]
) -> None:
    (plugin.directory / "plugin.py").write_text(FAILING_PLUGIN)
    with pytest.raises(kubeaccess.NoCredential) as raised:
        load_access()  # never a Credentials without a token: the API server would see system:anonymous
    message = str(raised.value)
    assert "kubeconfig user 'u'" in message
    assert f"`{sys.executable} {plugin.directory / 'plugin.py'}`" in message
    assert "exec: process returned 3. token expired: log in again" in message
    assert "ERROR:root" not in capfd.readouterr().err  # said once, in the error that stops the start


def test_a_plugin_that_fails_on_renewal_keeps_the_credential_it_gave(plugin: Plugin, clock: Clock) -> None:
    plugin.expire_in(60)
    access = load_access()
    assert access.token() == "Bearer exec-1"
    (plugin.directory / "plugin.py").write_text(FAILING_PLUGIN)
    clock.advance(50)  # due for renewal; the plugin now fails
    assert access.token() == "Bearer exec-1"
