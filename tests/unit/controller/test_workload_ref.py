"""A team's own vLLM Deployment piloted as it is: finding its engine container, what it serves, the
copies the other arms run, and how a change to it is named."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from specpilot.api.podsecurity import hardened_engine_pod
from specpilot.api.reasons import Reason
from specpilot.api.spec import WorkloadRef
from specpilot.api.status import ScopeState, SpeculationPilotStatus
from specpilot.api.validate import Problem, validate
from specpilot.controller.core.arm_objects import render_arm, speculative_config
from specpilot.controller.core.next_status import carry_scopes
from specpilot.controller.core.objects import content_hash
from specpilot.controller.core.workload_ref import (
    Workload,
    copied_metadata,
    copied_pod,
    read_workload,
    served_model,
    tensor_parallel_size,
    workload_status,
)
from specpilot.wire.names import ARM_LABEL, Arm, owned_names
from tests.unit.controller.specs import ROOT, load

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
EXAMPLE = ROOT / "manifests/examples/workload-ref.yaml"
DEPLOYMENT = yaml.safe_load((ROOT / "manifests/examples/workload/vllm-llama3.yaml").read_text())
REF = WorkloadRef(name=DEPLOYMENT["metadata"]["name"])


def deployment(*containers: dict[str, Any], selector: dict[str, Any] | None = None) -> dict[str, Any]:
    doc = copy.deepcopy(DEPLOYMENT)
    doc["spec"]["template"]["spec"]["containers"] = list(containers)
    if selector is not None:
        doc["spec"]["selector"] = selector
    return doc


def found(obj: dict[str, Any] | None, ref: WorkloadRef = REF) -> Workload:
    out = read_workload(obj, ref)
    assert isinstance(out, Workload), out
    return out


def refused(obj: dict[str, Any] | None, ref: WorkloadRef = REF) -> list[Problem]:
    out = read_workload(obj, ref)
    assert isinstance(out, list), out
    return out


SIDECAR = {"name": "log-shipper", "image": "fluent-bit:3", "args": ["--config", "/etc/fluent.conf"]}


@pytest.mark.parametrize(
    ("engine", "model", "tp"),
    [
        (
            {"name": "engine", "command": ["vllm", "serve", "meta/llama", "--tensor-parallel-size", "2"]},
            "meta/llama",
            2,
        ),
        (
            {
                "name": "engine",
                "command": ["python3", "-m", "vllm.entrypoints.openai.api_server"],
                "args": ["--model=meta/llama", "-tp", "4", "--served-model-name", "chat"],
            },
            "chat",
            4,
        ),
        (
            {"name": "engine", "command": ["/bin/sh", "-c", "exec /usr/local/bin/vllm serve org/m --port 8000"]},
            "org/m",
            1,
        ),
        ({"name": "engine", "command": ["specpilot", "mock-vllm"], "args": ["mock/target-8b"]}, "mock/target-8b", 1),
    ],
)
def test_the_engine_container_is_the_one_that_starts_vllm(engine: dict[str, Any], model: str, tp: int) -> None:
    workload = found(deployment(SIDECAR, engine))
    assert workload.container == 1 and workload.engine["name"] == "engine"
    assert served_model(workload) == model and tensor_parallel_size(workload) == tp
    assert workload.selector == {"model": "llama3", "helm-release-name": "vllm"}
    assert workload.state.replicas == 2


def test_what_cannot_be_piloted_is_refused_naming_the_field() -> None:
    (missing,) = refused(None)
    assert missing.field == "spec.workloadRef.name" and REF.name in missing.message
    (none,) = refused(deployment(SIDECAR))
    assert none.field == "spec.workloadRef.container" and "log-shipper" in none.message
    engine = {"name": "a", "command": ["vllm", "serve", "m"]}
    (two,) = refused(deployment(engine, {**engine, "name": "b"}))
    assert two.field == "spec.workloadRef.container" and "more than one" in two.message
    # naming the container picks it among several, and a wrong name is refused
    assert found(deployment(engine, {**engine, "name": "b"}), REF.model_copy(update={"container": "b"})).container == 1
    (wrong,) = refused(deployment(engine), REF.model_copy(update={"container": "c"}))
    assert wrong.field == "spec.workloadRef.container"
    expressions = {"matchExpressions": [{"key": "model", "operator": "In", "values": ["llama3"]}]}
    (selector,) = refused(deployment(engine, selector=expressions))
    assert selector.field == "spec.workloadRef.name" and "matchLabels" in selector.message
    (port,) = refused(deployment({**engine, "args": ["--port", "9000"]}))
    assert port.field == "spec.workloadRef.name" and "9000" in port.message


def test_a_copy_adds_only_the_extra_args_even_inside_a_shell_script() -> None:
    script = {"name": "engine", "command": ["/bin/sh", "-c"], "args": ["vllm serve org/m --port 8000"]}
    workload = found(deployment(SIDECAR, script))
    pod = copied_pod(workload, ["--speculative-config", '{"method":"ngram"}'])
    assert pod["containers"][1]["args"] == ['vllm serve org/m --port 8000 --speculative-config \'{"method":"ngram"}\'']
    assert pod["containers"][0] == SIDECAR
    assert copied_pod(workload) == workload.template["spec"]


def test_copies_never_carry_the_labels_the_production_deployment_selects_by() -> None:
    workload = found(DEPLOYMENT)
    meta = copied_metadata(workload, {ARM_LABEL: "control"}, {"a": "b"})
    assert meta["labels"] == {"environment": "production", ARM_LABEL: "control"}
    assert meta["annotations"] == {"prometheus.io/scrape": "true", "a": "b"}


def test_the_arms_are_copies_differing_by_the_speculative_config_and_the_baseline_is_not_rendered() -> None:
    ref, spec = load(EXAMPLE)
    workload = found(DEPLOYMENT, spec.workload_ref or REF)
    baseline, control, speculative = (
        render_arm(ref, spec, arm, workload) for arm in (Arm.BASELINE, Arm.CONTROL, Arm.SPECULATIVE)
    )
    assert baseline.deployment is None and baseline.name == workload.name
    assert baseline.service["spec"]["selector"] == dict(workload.selector)
    assert baseline.service["spec"]["ports"][0]["targetPort"] == 8000
    assert control.deployment is not None and speculative.deployment is not None
    pods = [plan.deployment["spec"]["template"]["spec"] for plan in (control, speculative)]  # type: ignore[index]
    team_pod = DEPLOYMENT["spec"]["template"]["spec"]
    assert pods[0] == hardened_engine_pod(team_pod), "the control arm runs the team's pod as it is, hardened"
    flag = ["--speculative-config", speculative_config(spec.speculative.draft, release=spec.vllm_release)]
    assert pods[1] == hardened_engine_pod(copied_pod(workload, flag))
    assert baseline.config_hash == control.config_hash == content_hash(team_pod)
    # every field the team's pod needs travels with the copies
    for pod in pods:
        assert pod["serviceAccountName"] == "vllm" and pod["imagePullSecrets"] == [{"name": "registry-credentials"}]
        assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "vllm-llama3-storage-claim"
        assert pod["containers"][0]["startupProbe"]["failureThreshold"] == 90
    changed = copy.deepcopy(DEPLOYMENT)
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = "registry.example.com/vllm/vllm-openai:v0.34.0"
    assert render_arm(ref, spec, Arm.CONTROL, found(changed)).config_hash != control.config_hash


def test_a_change_to_the_deployment_restarts_every_scope_naming_what_changed() -> None:
    ref, spec = load(EXAMPLE)
    before = found(DEPLOYMENT)
    arms = [render_arm(ref, spec, arm, before) for arm in (Arm.BASELINE, Arm.SPECULATIVE, Arm.CONTROL)]
    scopes, _ = carry_scopes(None, spec, arms, now=NOW, workload=workload_status(before))
    status = SpeculationPilotStatus.model_validate(
        {
            "arms": {plan.arm.value: {"configHash": plan.config_hash} for plan in arms},
            "scopes": [s.model_copy(update={"state": ScopeState.PILOTING, "weight": 10}).to_wire() for s in scopes],
            "workload": workload_status(before).to_wire(),
        }
    )
    changed = copy.deepcopy(DEPLOYMENT)
    engine = changed["spec"]["template"]["spec"]["containers"][0]
    engine["image"] = "registry.example.com/vllm/vllm-openai:v0.34.0"
    engine["args"] = [arg for arg in engine["args"] if not arg.startswith("--max-num-seqs")] + ["--max-num-seqs=256"]
    after = found(changed)
    arms = [render_arm(ref, spec, arm, after) for arm in (Arm.BASELINE, Arm.SPECULATIVE, Arm.CONTROL)]
    restarted, events = carry_scopes(status, spec, arms, now=NOW, workload=workload_status(after))
    assert all(scope.weight == 0 for scope in restarted)
    (event,) = events
    assert event.reason is Reason.ENGINE_CHANGED
    assert event.message == (
        f"Deployment {REF.name} changed its engine (image registry.example.com/vllm/vllm-openai:v0.33.0 -> "
        "registry.example.com/vllm/vllm-openai:v0.34.0; added --max-num-seqs=256; removed --max-num-seqs=128): "
        "every scope restarts from ordinary decoding"
    )


def _pilot(spec: dict[str, Any], name: str = "llama3") -> dict[str, Any]:
    return {"apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculationPilot", "metadata": {"name": name}, "spec": spec}


def test_a_spec_names_one_engine_source_and_leaves_the_workload_as_it_runs() -> None:
    doc = yaml.safe_load(EXAMPLE.read_text())
    spec = doc["spec"]
    assert validate(doc) == []
    inline = yaml.safe_load((ROOT / "manifests/examples/minimal.yaml").read_text())["spec"]["engine"]
    fields = {str(p.field) for p in validate(_pilot({**spec, "engine": inline}))}
    assert fields == {"spec.engine"}
    neither = {k: v for k, v in spec.items() if k != "workloadRef"}
    assert {p.field for p in validate(_pilot(neither))} == {"spec.engine"}
    assert {p.field for p in validate(_pilot({**spec, "baseline": {"replicas": 2}}))} == {"spec.baseline.replicas"}
    alternative = {**spec, "alternative": {"extraArgs": ["--max-num-seqs=64"]}}
    assert "spec.alternative" in {p.field for p in validate(_pilot(alternative))}
    # the operator deletes its own Deployments by name: a workload may not carry one of them
    taken = sorted(owned_names("llama3"))[0]
    collide = {**spec, "workloadRef": {**spec["workloadRef"], "name": taken}}
    (problem,) = validate(_pilot(collide))
    assert problem.field == "spec.workloadRef.name" and "rename the pilot" in problem.message


@pytest.mark.parametrize(
    ("change", "field", "says"),
    [
        (
            {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]},
            "spec.template.spec.volumes[0].hostPath",
            "hostPath volumes are refused",
        ),
        ({"hostNetwork": True}, "spec.template.spec.hostNetwork", "the node's namespaces are refused"),
        ({"hostPID": True}, "spec.template.spec.hostPID", "the node's namespaces are refused"),
        ({"securityContext": {"runAsUser": 0}}, "spec.template.spec.securityContext.runAsUser", "running as root"),
        (
            {"containers": [{"securityContext": {"privileged": True}}]},
            "spec.template.spec.containers[0].securityContext.privileged",
            "privileged containers are refused",
        ),
        (
            {"initContainers": [{"name": "fetch", "image": "busybox", "securityContext": {"runAsNonRoot": False}}]},
            "spec.template.spec.initContainers[0].securityContext.runAsNonRoot",
            "runAsNonRoot false is refused",
        ),
        (
            {"containers": [{"ports": [{"containerPort": 8000, "hostPort": 8000}]}]},
            "spec.template.spec.containers[0].ports[0].hostPort",
            "host ports are refused",
        ),
        (
            {"containers": [{"lifecycle": {"postStart": {"httpGet": {"host": "10.96.0.1", "port": 443}}}}]},
            "spec.template.spec.containers[0].lifecycle.postStart.httpGet.host",
            "a lifecycle hook's host is refused",
        ),
        (
            {
                "containers": [
                    {"lifecycle": {"preStop": {"tcpSocket": {"host": "metadata.google.internal", "port": 80}}}}
                ]
            },
            "spec.template.spec.containers[0].lifecycle.preStop.tcpSocket.host",
            "a lifecycle hook's host is refused",
        ),
        (
            {
                "initContainers": [
                    {"name": "warm", "image": "busybox", "startupProbe": {"httpGet": {"host": "a.b", "port": 1}}}
                ]
            },
            "spec.template.spec.initContainers[0].startupProbe.httpGet.host",
            "a probe's host is refused",
        ),
    ],
)
def test_a_deployment_whose_pod_no_engine_pod_may_be_is_refused_naming_its_field(
    change: dict[str, Any], field: str, says: str
) -> None:
    doc = copy.deepcopy(DEPLOYMENT)
    pod = doc["spec"]["template"]["spec"]
    for key, value in change.items():
        if key == "containers":  # merged into the engine container
            pod["containers"][0] |= value[0]
        else:
            pod[key] = value
    (problem,) = refused(doc)
    assert problem.field == "spec.workloadRef.name"
    assert problem.message.startswith(f"Deployment {REF.name}'s {field}: {says}"), problem.message
