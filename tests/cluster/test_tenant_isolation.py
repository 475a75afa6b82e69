"""One tenant cannot reach past its pilot: with the chart in its default mode (it serves pilots in its own
namespace, where its ServiceAccount lives), a user bound to `edit` there tries each way out through a
pilot and is refused each time, by the API server or by the operator, in words that name the field.

Through the operator: URLs that lead, through an ExternalName Service of the namespace, to the API
server's ClusterIP, to loopback or to another namespace's Service; and engine pods that would run as the
operator's own ServiceAccount. Each makes the pilot InvalidSpec (its condition and its Event name the field
and where it leads), and nothing of it is deployed. Through the API server: a URL carrying credentials, a
token mounted without the opt-in, and a probe aimed at another host.
"""

from __future__ import annotations

import copy
import json
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from specpilot.api.podsecurity import PROBE_HOST
from specpilot.testing.helm import CHART, helm, set_args
from specpilot.testing.waiting import wait_until
from tests.cluster.listener import recording
from tests.cluster.local import ROOT, Cluster, fresh_namespace
from tests.cluster.operator_process import apply_crd, condition
from tests.cluster.releases import NO_CRD, Release, helm_env

pytestmark = pytest.mark.cluster

DEMO = yaml.safe_load((ROOT / "manifests" / "examples" / "local-demo.yaml").read_text())
PILOTS = "speculationpilots.specpilot.io"
NOT_OWN = "the operator may not call"  # policy.followed: the ExternalName's target is judged as if named


@dataclass(frozen=True)
class Tenant:
    """The release, the namespace it serves, the user bound to `edit` there, and another namespace."""

    release: Release
    user: str
    other: str

    @property
    def namespace(self) -> str:
        return self.release.namespace


@pytest.fixture(scope="module")
def tenant(cluster: Cluster) -> Iterator[Tenant]:
    """The chart in its default mode (no watchNamespaces, not clusterWide), and an `edit` user in the
    namespace it serves: its own."""
    name = f"spt-{uuid.uuid4().hex[:6]}"
    values = {"image.tag": "dev", "peering.name": name, **NO_CRD}
    apply_crd(cluster)
    install = ("install", name, str(CHART), "--namespace", name, "--create-namespace", "--wait", "--timeout", "120s")
    out = helm(*install, *set_args(values), env=helm_env(cluster), check=False)
    release = Release(name=name, namespace=name, account=f"{name}-specpilot", values=values)
    try:
        assert out.returncode == 0, f"{out.stdout}\n{out.stderr}\n{cluster.pods_report(name)}"
        assert f"serves SpeculationPilots in: {name}" in out.stdout
        user = f"tenant-{name}"
        cluster.kubectl("create", "rolebinding", f"{user}-edit", "--clusterrole=edit", f"--user={user}", "-n", name)
        # the release's aggregated ClusterRole joins `edit` a moment after the install
        wait_until(
            "edit to take in the release's role",
            lambda: (
                cluster.kubectl(
                    "auth", "can-i", "create", PILOTS, "-n", name, f"--as={user}", check=False
                ).stdout.strip()
                == "yes"
            ),
            timeout=60,
        )
        with fresh_namespace(cluster) as other:
            yield Tenant(release=release, user=user, other=other)
    finally:
        cluster.kubectl("delete", PILOTS, "--all", "-n", name, "--timeout=60s", check=False, timeout=70)
        helm("uninstall", name, "--namespace", name, "--wait", env=helm_env(cluster), check=False)
        cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="module")
def listener() -> Iterator[tuple[int, list[str]]]:
    """An HTTP server on loopback, where the local cluster's pods run, recording every request it gets."""
    with recording() as found:
        yield found


def as_tenant(cluster: Cluster, tenant: Tenant, *args: str, input: str | None = None) -> tuple[int, str]:
    """kubectl as the `edit` user in the served namespace: its exit status and what it printed."""
    out = cluster.kubectl(*args, "-n", tenant.namespace, f"--as={tenant.user}", input=input, check=False)
    return out.returncode, out.stdout + out.stderr


def pilot_doc(name: str, **spec: Any) -> dict[str, Any]:
    doc: dict[str, Any] = copy.deepcopy(DEMO)
    doc["metadata"]["name"] = name
    doc["spec"]["analysis"]["warmup"] = "1h"  # about what is admitted, not what is judged
    for key, value in spec.items():
        doc["spec"][key] = {**doc["spec"].get(key, {}), **value}
    return doc


def webhook(host: str) -> dict[str, str]:
    return {"name": "checks", "url": f"http://{host}/verdict"}


def apply_pilot(cluster: Cluster, tenant: Tenant, doc: dict[str, Any]) -> tuple[int, str]:
    return as_tenant(cluster, tenant, "apply", "-f", "-", input=json.dumps(doc))


def external_name(cluster: Cluster, tenant: Tenant, name: str, target: str) -> None:
    code, out = as_tenant(cluster, tenant, "create", "service", "externalname", name, f"--external-name={target}")
    assert code == 0, out


def refused_by_operator(cluster: Cluster, tenant: Tenant, name: str) -> str:
    """The InvalidSpec condition's message, as the user reads it; its Event says the same."""

    def invalid() -> str | None:
        code, out = as_tenant(cluster, tenant, "get", PILOTS, name, "-o", "json")
        assert code == 0, out
        found = condition(json.loads(out), "InvalidSpec")
        return found["message"] if found is not None and found["status"] == "True" else None

    def said() -> set[str] | None:
        selector = f"involvedObject.kind=SpeculationPilot,involvedObject.name={name},reason=SpecInvalid"
        code, out = as_tenant(cluster, tenant, "get", "events", "--field-selector", selector, "-o", "json")
        assert code == 0, out
        return {e["message"] for e in json.loads(out)["items"]} or None

    message = str(wait_until(f"pilot {name} InvalidSpec", invalid, timeout=60, every=0.5))
    events = wait_until(f"pilot {name}'s SpecInvalid Event", said, timeout=30, every=0.5)
    assert events == {message}, events
    # nothing of it deployed: no arm, no router
    code, out = as_tenant(cluster, tenant, "get", "deployments", "-l", f"specpilot.io/pilot={name}", "-o", "name")
    assert code == 0 and out.strip() == "", (
        f"{out}\nthe release's operator on {name}:\n{operator_said(cluster, tenant, name)}"
    )
    return message


def operator_said(cluster: Cluster, tenant: Tenant, pilot: str) -> str:
    """The release's operator's log lines about `pilot`: whether it, or another operator serving the
    namespace, acted on it."""
    (pod,) = tenant.release.pods(cluster)
    log = tenant.release.log(cluster, pod["metadata"]["name"])
    return "\n".join(line for line in log.splitlines() if f"/{pilot}" in line)


def reconciles(cluster: Cluster, tenant: Tenant) -> float:
    """Reconciles the release's operator has finished (its metrics port, on its pod's IP)."""
    (pod,) = tenant.release.pods(cluster)
    with urllib.request.urlopen(f"http://{pod['status']['podIP']}:8082/metrics", timeout=5) as resp:
        text = resp.read().decode()
    prefix = "specpilot_operator_reconciles_total{"
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(prefix))


def test_an_external_name_to_the_api_servers_cluster_ip_is_refused(cluster: Cluster, tenant: Tenant) -> None:
    api_ip = cluster.get_json("service", "kubernetes", "-n", "default")["spec"]["clusterIP"]
    external_name(cluster, tenant, "api-alias", api_ip)
    code, out = apply_pilot(cluster, tenant, pilot_doc("to-api", quality={"webhooks": [webhook("api-alias:443")]}))
    assert code == 0, out
    message = refused_by_operator(cluster, tenant, "to-api")
    assert (
        f"spec.quality.webhooks[0].url: api-alias is a Service of type ExternalName for {api_ip}, and {NOT_OWN} "
        f"{api_ip}: "
    ) in message, message


def test_an_external_name_to_loopback_is_refused_and_never_called(
    cluster: Cluster, tenant: Tenant, listener: tuple[int, list[str]]
) -> None:
    # The local cluster's operator pod runs on the host's loopback, so a call there would reach `listener`.
    port, seen = listener
    external_name(cluster, tenant, "loop-alias", "127.0.0.1")
    metrics_source = {"metricsSource": {"prometheus": {"url": f"http://loop-alias:{port}"}}}
    doc = pilot_doc("to-loopback", quality={"webhooks": [webhook(f"loop-alias:{port}")]}, analysis=metrics_source)
    before, applied = reconciles(cluster, tenant), time.monotonic()
    code, out = apply_pilot(cluster, tenant, doc)
    assert code == 0, out
    message = refused_by_operator(cluster, tenant, "to-loopback")
    leads = f"loop-alias is a Service of type ExternalName for 127.0.0.1, and {NOT_OWN} 127.0.0.1: "
    for field in ("spec.quality.webhooks[0].url", "spec.analysis.metricsSource.prometheus.url"):
        assert f"{field}: {leads}" in message, message
    # Admitted, the pilot's collection would ask its Prometheus once an analysis interval: the operator has had
    # an interval and two reconciles to call.
    interval = float(DEMO["spec"]["analysis"]["interval"].removesuffix("s"))
    wait_until(
        "an analysis interval and the operator's next reconciles",
        lambda: time.monotonic() - applied >= interval and reconciles(cluster, tenant) >= before + 2,
        timeout=60,
        every=1,
    )
    assert seen == []


def test_an_external_name_to_another_namespaces_service_is_refused(cluster: Cluster, tenant: Tenant) -> None:
    # The local cluster has no DNS, so no call to the other namespace's Service could connect: what is
    # asserted is the refusal, which the operator makes before any call.
    cluster.kubectl("create", "service", "clusterip", "checks", "--tcp=8080:8080", "-n", tenant.other)
    target = f"checks.{tenant.other}.svc.cluster.local"
    external_name(cluster, tenant, "other-alias", target)
    sampled = {
        "kind": "sampled",
        "prompt": "Name three colours.",
        "temperature": 0.7,
        "score": {"webhook": {"url": "http://other-alias:8080/score"}},
    }
    code, out = apply_pilot(
        cluster, tenant, pilot_doc("to-other", quality={"probes": {"cases": [sampled], "interval": "30s"}})
    )
    assert code == 0, out
    message = refused_by_operator(cluster, tenant, "to-other")
    assert (
        f"spec.quality.probes.cases[0].score.webhook.url: other-alias is a Service of type ExternalName for "
        f"{target}, and {NOT_OWN} {target}: "
    ) in message, message


def test_engine_pods_never_run_as_the_operators_service_account(cluster: Cluster, tenant: Tenant) -> None:
    account = tenant.release.account
    doc = pilot_doc("as-operator", engine={"podTemplate": {"serviceAccountName": account}})
    code, out = apply_pilot(cluster, tenant, doc)
    assert code == 0, out
    message = refused_by_operator(cluster, tenant, "as-operator")
    assert f"spec.engine.podTemplate.serviceAccountName: {account} is the operator's own ServiceAccount" in message


@pytest.mark.parametrize(
    ("spec", "field", "why"),
    [
        (
            {"quality": {"webhooks": [{"name": "checks", "url": "http://team:secret@checks:8080/verdict"}]}},
            "spec.quality.webhooks[0].url",
            "a URL carries no credentials (user:password@host)",
        ),
        (
            {"engine": {"podTemplate": {"automountServiceAccountToken": True}}},
            "spec.engine.podTemplate.automountServiceAccountToken",
            "automountServiceAccountToken gives the engine image the ServiceAccount's token: set "
            "allowServiceAccountToken: true to confirm it",
        ),
        (
            {
                "engine": {
                    "podTemplate": {"container": {"livenessProbe": {"httpGet": {"host": "10.96.0.1", "port": 443}}}}
                }
            },
            "spec.engine.podTemplate.container.livenessProbe.httpGet.host",
            PROBE_HOST,
        ),
    ],
    ids=["url-userinfo", "token-without-opt-in", "probe-host"],
)
def test_the_api_server_refuses_naming_the_field(
    cluster: Cluster, tenant: Tenant, spec: dict[str, Any], field: str, why: str
) -> None:
    name = f"refused-{uuid.uuid4().hex[:6]}"
    code, out = apply_pilot(cluster, tenant, pilot_doc(name, **spec))
    assert code != 0 and f"{field}: " in out and why in out, out
    code, out = as_tenant(cluster, tenant, "get", PILOTS, name, "--ignore-not-found", "-o", "name")
    assert code == 0 and out.strip() == "", out
