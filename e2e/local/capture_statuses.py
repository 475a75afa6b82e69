"""Capture SpeculationPilots as the chart-installed operator leaves them, for the Argo CD health tests.

Run against the local cluster (KUBECONFIG set, its kubectl on PATH):
    .venv/bin/python e2e/local/capture_statuses.py tests/data/argocd
It installs the chart, runs manifests/demo's pilot and load, and writes each object (metadata
trimmed to name, namespace and generation; status as is) at these points: progressing-arms-starting,
progressing-piloting, suspended, healthy (the demo's outcome), progressing-generation-behind (then
the operator stopped while the spec changes), degraded-image (an engine image the nodes cannot run)
and degraded-invalid-spec.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from specpilot.testing.helm import CHART, ROOT, helm, set_args

DEMO = ROOT / "manifests" / "demo"


def kubectl(*args: str, input: str | None = None) -> str:
    out = subprocess.run(["kubectl", *args], input=input, capture_output=True, text=True, check=False, timeout=120)
    if out.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {out.stderr}")
    return out.stdout


def get(namespace: str, name: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(kubectl("get", "speculationpilot", name, "-n", namespace, "-o", "json"))
    return result


def until(what: str, check: Callable[[], Any], timeout: float = 240) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    raise RuntimeError(f"timed out waiting for {what}")


def trimmed(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    keep = {k: meta[k] for k in ("name", "namespace", "generation") if k in meta}
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "metadata": keep, "status": obj.get("status", {})}


def phase_is(namespace: str, name: str, phase: str) -> Callable[[], dict[str, Any] | None]:
    def check() -> dict[str, Any] | None:
        obj = get(namespace, name)
        return obj if obj.get("status", {}).get("phase") == phase else None

    return check


def scopes_are(namespace: str, states: dict[str, str]) -> Callable[[], dict[str, Any] | None]:
    def check() -> dict[str, Any] | None:
        obj = get(namespace, "demo")
        now = {s["name"]: s["state"] for s in obj.get("status", {}).get("scopes", [])}
        return obj if all(now.get(k) == v for k, v in states.items()) else None

    return check


def main(out_dir: str) -> int:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    def save(name: str, obj: dict[str, Any]) -> None:
        (out / f"{name}.json").write_text(json.dumps(trimmed(obj), indent=2, sort_keys=True) + "\n")
        print(f"captured {name}: phase={obj.get('status', {}).get('phase')}")

    release = f"cap-{uuid.uuid4().hex[:6]}"
    ns = f"{release}-pilots"
    # the CRD as the cluster tier applies it, which the release then leaves alone (one owner per CRD)
    kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
    helm(
        *("install", release, str(CHART), "--namespace", release, "--create-namespace", "--wait"),
        *set_args({"image.tag": "dev", "peering.name": release, "clusterWide": "true", "crds.install": "false"}),
    )
    kubectl("create", "namespace", ns)
    until("the default ServiceAccount", lambda: "default" in kubectl("get", "serviceaccounts", "-n", ns))
    operator = f"deployment/{release}-specpilot"
    try:
        kubectl("apply", "-n", ns, "-f", str(DEMO / "pilot.yaml"))
        save("progressing-arms-starting", until("a first status", phase_is(ns, "demo", "Progressing")))
        kubectl("wait", "-n", ns, "--for=condition=Ready", "speculationpilot/demo", "--timeout=150s")
        save("progressing-piloting", until("piloting", scopes_are(ns, {"chat": "Piloting"})))

        kubectl("patch", "-n", ns, "speculationpilot/demo", "--type=merge", "-p", '{"spec":{"suspend":true}}')
        save("suspended", until("Suspended", phase_is(ns, "demo", "Suspended")))
        kubectl("patch", "-n", ns, "speculationpilot/demo", "--type=merge", "-p", '{"spec":{"suspend":false}}')
        until("piloting again", phase_is(ns, "demo", "Progressing"))

        docs = [d for d in yaml.safe_load_all(kubectl("kustomize", str(DEMO))) if d]
        (job,) = [d for d in docs if d["kind"] == "Job"]
        router = json.loads(kubectl("get", "pods", "-n", ns, "-l", "app.kubernetes.io/component=router", "-o", "json"))
        url = f"http://{router['items'][0]['status']['podIP']}:8080"
        job["spec"]["template"]["spec"]["containers"][0]["env"][0] = {"name": "ROUTER_URL", "value": url}
        kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all(docs))
        save("healthy", until("the demo's outcome", phase_is(ns, "demo", "Healthy"), 300))
        # A spec change the operator has not seen yet: status still says Healthy, of the older generation.
        kubectl("scale", "-n", release, operator, "--replicas=0")
        until("the operator gone", lambda: not json.loads(kubectl("get", "pods", "-n", release, "-o", "json"))["items"])
        kubectl(
            "patch", "-n", ns, "speculationpilot/demo", "--type=merge", "-p", '{"spec":{"analysis":{"failureLimit":3}}}'
        )
        save("progressing-generation-behind", get(ns, "demo"))
        kubectl("scale", "-n", release, operator, "--replicas=1")

        bad = yaml.safe_load((DEMO / "pilot.yaml").read_text())
        bad["metadata"]["name"] = "bad-image"
        bad["spec"]["engine"]["image"] = "vllm/vllm-openai:v0.33.0"
        kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(bad))
        save("degraded-image", until("Degraded", phase_is(ns, "bad-image", "Degraded")))

        invalid = yaml.safe_load((DEMO / "pilot.yaml").read_text())
        invalid["metadata"]["name"] = "invalid"
        header = {"name": "x-task", "type": "RegularExpression", "value": "chat(?P<broken"}
        invalid["spec"]["scopes"][0]["match"] = {"headers": [header]}
        kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(invalid))
        save("degraded-invalid-spec", until("Degraded", phase_is(ns, "invalid", "Degraded")))
    finally:
        kubectl("scale", "-n", release, operator, "--replicas=1")
        subprocess.run(["kubectl", "delete", "speculationpilots", "--all", "-n", ns, "--timeout=120s"], check=False)
        helm("uninstall", release, "--namespace", release, "--wait", check=False)
        subprocess.run(["kubectl", "delete", "namespace", ns, release, "--wait=false"], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "tests" / "data" / "argocd")))
