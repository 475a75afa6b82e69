"""The renderer: golden files for every example, the one-switch property, least-privilege RBAC."""

from __future__ import annotations

import copy
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from specpilot.api.podsecurity import HOME_VOLUME, hardened_engine_pod
from specpilot.api.spec import Control, Rehearsal, SpeculationPilotSpec
from specpilot.api.spec.engine_spec import GPU_RESOURCE
from specpilot.controller.core.arm_objects import ArmPlan, engine_pod, render_arm
from specpilot.controller.core.objects import PilotRef, content_hash
from specpilot.controller.core.rehearsal.manifests import render_restart, render_step_load
from specpilot.controller.core.render import Rendered, render
from specpilot.controller.core.router_objects import max_table_age_seconds, render_router, router_rbac
from specpilot.controller.core.routing import routing_table
from specpilot.wire.names import ARM_LABEL, PILOT_LABEL, Arm, routes_name
from specpilot.wire.routerconfig import RouterConfig
from specpilot.wire.routes import ArmWeights, parse_routes
from tests.restricted import restricted
from tests.unit.controller.specs import ROOT, load, with_spec, workload_of

EXAMPLES = sorted((ROOT / "manifests" / "examples").glob("*.yaml"))
INLINE = [path for path in EXAMPLES if load(path)[1].engine is not None]  # not a workload's copies
GOLDEN = Path(__file__).parent / "golden"
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
IMAGE = "specpilot/specpilot:test"


def rendered(ref: PilotRef, spec: SpeculationPilotSpec, weights: dict[str, int] | None = None) -> Rendered:
    table = routing_table(ref.name, spec, weights or {}, generation=1, now=NOW)
    return render(ref, spec, table=table, router_image=IMAGE, workload=workload_of(spec))


def container(plan: ArmPlan) -> dict[str, Any]:
    return plan.deployment["spec"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_render_matches_golden_file(example: Path) -> None:
    """Every object rendered for every example, as reviewed once by eye (SPECPILOT_UPDATE_GOLDEN=1 rewrites)."""
    ref, spec = load(example)
    text = yaml.safe_dump_all(rendered(ref, spec).objects, sort_keys=False, width=120)
    golden = GOLDEN / f"{example.stem}.yaml"
    if os.environ.get("SPECPILOT_UPDATE_GOLDEN"):
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(text)
    assert text == golden.read_text(), f"render of {example.name} changed; review and regenerate {golden}"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_every_object_is_owned_labelled_and_namespaced(example: Path) -> None:
    ref, spec = load(example)
    for obj in rendered(ref, spec).objects:
        meta = obj["metadata"]
        assert meta["namespace"] == "team-a"
        assert meta["name"].startswith(f"{ref.name}-")
        assert meta["labels"][PILOT_LABEL] == ref.name
        (owner,) = meta["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
            "SpeculationPilot",
            ref.name,
            ref.uid,
            True,
        )


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_baseline_and_speculative_differ_by_the_speculative_config_alone(example: Path) -> None:
    """A workload's baseline is its own Deployment: the control arm runs its pod as it is."""
    ref, spec = load(example)
    workload = workload_of(spec)
    plans = [render_arm(ref, spec, arm, workload) for arm in (Arm.BASELINE, Arm.CONTROL, Arm.SPECULATIVE)]
    baseline, control, speculative = plans
    pods = [copy.deepcopy(p.deployment["spec"]["template"]["spec"]) if p.deployment else None for p in plans]
    if workload is not None:
        assert baseline.deployment is None and pods[1] == hardened_engine_pod(workload.template["spec"])
        assert baseline.config_hash == control.config_hash
    base_pod, spec_pod = pods[1] if workload is not None else pods[0], pods[2]
    assert base_pod is not None and spec_pod is not None
    engine = workload.container if workload is not None else 0
    spec_args = spec_pod["containers"][engine].pop("args")
    base_args = base_pod["containers"][engine].pop("args")
    assert spec_pod == base_pod
    assert spec_args[: len(base_args)] == base_args
    flag, config = spec_args[len(base_args) :]
    assert flag == "--speculative-config"
    draft = spec.speculative.draft
    expected = {"method": draft.method.value, "num_speculative_tokens": draft.num_speculative_tokens}
    expected |= {"model": draft.model} if draft.model else {}
    expected |= {"draft_tensor_parallel_size": draft.tensor_parallel_size} if draft.tensor_parallel_size else {}
    expected |= {"revision": draft.revision} if draft.revision else {}
    assert json.loads(config) == expected
    assert baseline.config_hash != speculative.config_hash


def test_alternative_differs_only_where_its_spec_does() -> None:
    ref, spec = load(ROOT / "manifests/examples/three-arm.yaml")
    assert spec.alternative is not None and spec.alternative.tensor_parallel_size == 2
    baseline, alternative = (render_arm(ref, spec, arm) for arm in (Arm.BASELINE, Arm.ALTERNATIVE))
    base, alt = container(baseline), container(alternative)
    differing = {key for key in base.keys() | alt.keys() if base.get(key) != alt.get(key)}
    assert differing == {"args", "resources"}
    # resources differ in the GPU count alone: one GPU per tensor-parallel rank
    assert {k: v for k, v in alt["resources"]["limits"].items() if k != GPU_RESOURCE} == {
        k: v for k, v in base["resources"]["limits"].items() if k != GPU_RESOURCE
    }
    assert (base["resources"]["limits"][GPU_RESOURCE], alt["resources"]["limits"][GPU_RESOURCE]) == (4, 2)
    assert alt["resources"]["requests"][GPU_RESOURCE] == 2
    # args: the tensor parallel size changed and the alternative's extraArgs came last
    tp = base["args"].index("--tensor-parallel-size")
    assert alt["args"][: tp + 1] == base["args"][: tp + 1] and alt["args"][tp + 1] == "2"
    assert alt["args"][tp + 2 :] == [*base["args"][tp + 2 :], *spec.alternative.extra_args]
    assert (alternative.replicas, alternative.gpus, baseline.gpus) == (4, 8, 8)


def test_alternative_with_extra_args_only_keeps_everything_else() -> None:
    ref, spec = load(ROOT / "manifests/examples/local-demo.yaml")
    base, alt = (container(render_arm(ref, spec, arm)) for arm in (Arm.BASELINE, Arm.ALTERNATIVE))
    assert {k: v for k, v in alt.items() if k != "args"} == {k: v for k, v in base.items() if k != "args"}
    assert alt["args"] == [*base["args"], "--max-num-seqs=64"]


def test_engine_change_reaches_every_arm_and_draft_change_only_the_speculative() -> None:
    ref, spec = load(ROOT / "manifests/examples/three-arm.yaml")
    hashes = {arm: render_arm(ref, spec, arm).config_hash for arm in Arm}
    engine = with_spec(spec, "engine.image", "vllm/vllm-openai:v0.33.1")
    assert all(render_arm(ref, engine, arm).config_hash != hashes[arm] for arm in Arm)
    draft = with_spec(spec, "speculative.draft.numSpeculativeTokens", 5)
    assert {arm: render_arm(ref, draft, arm).config_hash for arm in Arm} == hashes | {
        Arm.SPECULATIVE: render_arm(ref, draft, Arm.SPECULATIVE).config_hash
    }
    assert render_arm(ref, draft, Arm.SPECULATIVE).config_hash != hashes[Arm.SPECULATIVE]
    replicas = with_spec(spec, "baseline.replicas", 3)
    assert render_arm(ref, replicas, Arm.BASELINE).config_hash == hashes[Arm.BASELINE]


@pytest.mark.parametrize(("tp", "shm"), [(1, False), (2, True)], ids=["tp1-no-shm", "tp2-memory-backed-shm"])
def test_shared_memory_for_tensor_parallel_engines(tp: int, shm: bool) -> None:
    ref, spec = load(ROOT / "manifests/examples/minimal.yaml")
    spec = with_spec(spec, "engine.tensorParallelSize", tp)
    spec = with_spec(spec, "engine.resources", {"limits": {GPU_RESOURCE: tp}})
    pod = render_arm(ref, spec, Arm.BASELINE).deployment["spec"]["template"]["spec"]
    shared = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}] if shm else []
    assert [v for v in pod["volumes"] if v["name"] != HOME_VOLUME] == shared
    mounts = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] != HOME_VOLUME]
    assert mounts == ([{"name": "dshm", "mountPath": "/dev/shm"}] if shm else [])
    assert pod["containers"][0]["resources"]["limits"][GPU_RESOURCE] == tp


def test_mock_engine_is_rendered_by_the_same_code() -> None:
    ref, spec = load(ROOT / "manifests/examples/local-demo.yaml")
    c = container(render_arm(ref, spec, Arm.SPECULATIVE))
    assert c["command"] == ["specpilot", "mock-vllm"]
    assert c["args"][:5] == ["mock/target-8b", "--host", "$(POD_IP)", "--port", "8000"]
    assert c["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}} in c["env"]


def test_secret_env_is_passed_by_reference() -> None:
    ref, spec = load(ROOT / "manifests/examples/three-arm.yaml")
    env = container(render_arm(ref, spec, Arm.BASELINE))["env"]
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "huggingface", "key": "token"}}} in env


def test_router_role_is_least_privilege() -> None:
    ref, spec = load(ROOT / "manifests/examples/local-demo.yaml")
    _, role, binding = router_rbac(ref, spec.model_copy(update={"rehearsal": None}))
    rules = role["rules"]
    resources = {res for rule in rules for res in rule["resources"]}
    verbs = {verb for rule in rules for verb in rule["verbs"]}
    assert resources == {"configmaps", "endpointslices"}
    assert verbs == {"get", "list", "watch"}
    assert not any("*" in value for rule in rules for key in ("apiGroups", "resources", "verbs") for value in rule[key])
    assert "secrets" not in resources
    (configmaps,) = [rule for rule in rules if rule["resources"] == ["configmaps"]]
    assert configmaps["resourceNames"] == [routes_name(ref.name)]
    # with a rehearsal, the rehearsal router's table too (it runs under the same account)
    _, role, _ = router_rbac(ref, spec.model_copy(update={"rehearsal": Rehearsal()}))
    (configmaps,) = [rule for rule in role["rules"] if rule["resources"] == ["configmaps"]]
    assert configmaps["resourceNames"] == [routes_name(ref.name), routes_name(f"{ref.name}-rehearsal")]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": f"{ref.name}-router", "namespace": "team-a"}]


def test_router_args_parse_back_to_its_config() -> None:
    ref, spec = load(ROOT / "manifests/examples/three-arm.yaml")
    deployment, _ = render_router(ref, spec, image=IMAGE)
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == "router"
    config = RouterConfig.parse(args[1:], {"POD_NAMESPACE": "team-a"})
    assert config.pilot == ref.name
    assert config.request_timeout == 300.0
    assert config.scope_header == "x-specpilot-scope"
    assert config.max_table_age == max_table_age_seconds(spec) == 180.0  # 3 x interval 1m


def test_routes_configmap_carries_the_table() -> None:
    ref, spec = load(ROOT / "manifests/examples/three-arm.yaml")
    out = rendered(ref, spec, {"code": 25})
    table = parse_routes(out.routes["data"], pilot=ref.name)
    assert [scope.name for scope in table.scopes] == [scope.name for scope in spec.scopes]
    assert table.default_scope == "chat"
    code = table.scopes[0]
    assert (code.weights.baseline, code.weights.speculative, code.weights.control, code.weights.alternative) == (
        50,
        25,
        0,
        25,
    )
    assert code.mirror is Arm.CONTROL
    assert code.deadline_seconds == 120.0
    assert code.match.headers[0].type == "RegularExpression"
    assert all(scope.weights.speculative == 0 for scope in table.scopes[1:])


def test_engine_pods_select_their_arm_only() -> None:
    ref, spec = load(ROOT / "manifests/examples/three-arm.yaml")
    selectors = {plan.arm: plan.deployment["spec"]["selector"]["matchLabels"] for plan in rendered(ref, spec).arms}
    assert {sel[ARM_LABEL] for sel in selectors.values()} == {"baseline", "speculative", "control", "alternative"}
    for plan in rendered(ref, spec).arms:
        assert plan.service["spec"]["selector"] == selectors[plan.arm]


def test_the_control_arm_mirrors_the_speculative_arm_and_the_alternative_takes_its_share() -> None:
    ref, spec = load(ROOT / "manifests/examples/three-arm.yaml")
    arms = {plan.arm: plan for plan in rendered(ref, spec).arms}
    control, baseline, speculative = arms[Arm.CONTROL], arms[Arm.BASELINE], arms[Arm.SPECULATIVE]
    assert control.config_hash == baseline.config_hash != speculative.config_hash
    assert (control.replicas, control.gpus) == (speculative.replicas, speculative.gpus)
    table = routing_table(ref.name, spec, {"code": 20}, generation=1, now=NOW)
    code = table.scope("code")
    assert code is not None and code.weights == ArmWeights(baseline=60, speculative=20, alternative=20)
    assert code.mirror is Arm.CONTROL
    two_arms = spec.model_copy(update={"alternative": None})
    code = routing_table(ref.name, two_arms, {"code": 20}, generation=1, now=NOW).scope("code")
    assert code is not None and code.weights == ArmWeights(baseline=80, speculative=20) and code.mirror is Arm.CONTROL
    # a scope on ordinary decoding sends nothing to mirror
    idle = routing_table(ref.name, two_arms, {}, generation=1, now=NOW).scope("code")
    assert idle is not None and idle.weights == ArmWeights(baseline=100) and idle.mirror is None
    without = two_arms.model_copy(update={"control": Control(enabled=False)})
    assert Arm.CONTROL not in {plan.arm for plan in rendered(ref, without).arms}
    code = routing_table(ref.name, without, {"code": 20}, generation=1, now=NOW).scope("code")
    assert code is not None and code.weights == ArmWeights(baseline=80, speculative=20) and code.mirror is None


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_engine_pods_are_hardened_outside_the_config_hash_and_the_router_keeps_its_token(example: Path) -> None:
    """Every engine pod, a workload's copies too: no root, no capability, no privilege escalation, the
    runtime's seccomp profile, no token; HOME on a volume of its own for the user the operator picks."""
    ref, spec = load(example)
    out = rendered(ref, spec)
    for plan in out.arms:
        if plan.deployment is None:
            continue  # production's own Deployment, never rendered
        pod = plan.deployment["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False
        assert pod["securityContext"] == {
            "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"},
            "runAsUser": 1000,
            "fsGroup": 1000,
            "fsGroupChangePolicy": "OnRootMismatch",
        }
        assert {"name": HOME_VOLUME, "emptyDir": {}} in pod["volumes"]
        for engine in pod["containers"]:
            assert engine["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
            assert {"name": "HOME", "value": "/home/engine"} in engine["env"]
            assert {"name": HOME_VOLUME, "mountPath": "/home/engine"} in engine["volumeMounts"]
        if spec.engine is not None and plan.arm in (Arm.BASELINE, Arm.CONTROL):
            unhardened = engine_pod(spec.engine, tensor_parallel_size=spec.engine.tensor_parallel_size)
            assert plan.config_hash == content_hash(unhardened), "hygiene stays outside the config hash"
    router = next(o for o in out.objects if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("-router"))
    assert router["spec"]["template"]["spec"].get("automountServiceAccountToken", True) is True
    assert router["spec"]["template"]["spec"]["serviceAccountName"] == f"{ref.name}-router"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_every_pod_rendered_meets_the_restricted_pod_security_standard(example: Path) -> None:
    ref, spec = load(example)
    workload = workload_of(spec)
    objects = [
        *rendered(ref, spec).objects,
        render_restart(ref, spec, workload),
        render_step_load(ref, spec, step=0, router_ip="10.0.0.1", mix="{}", rate=1.0, seconds=60, image=IMAGE),
    ]
    pods = {o["metadata"]["name"]: o["spec"]["template"]["spec"] for o in objects if o["kind"] in ("Deployment", "Job")}
    assert pods
    assert {name: restricted(pod) for name, pod in pods.items()} == {name: [] for name in pods}


@pytest.mark.parametrize(
    ("template", "pod", "engine"),
    [
        pytest.param(
            {"securityContext": {"runAsUser": 2000, "fsGroup": 2000}},
            {"runAsUser": 2000, "fsGroup": 2000, "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            id="the-templates-user-and-no-home",
        ),
        pytest.param(
            {"container": {"securityContext": {"runAsUser": 3000, "readOnlyRootFilesystem": True}}},
            {
                "runAsUser": 1000,
                "fsGroup": 1000,
                "fsGroupChangePolicy": "OnRootMismatch",
                "runAsNonRoot": True,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            {
                "runAsUser": 3000,
                "readOnlyRootFilesystem": True,
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
            },
            id="the-containers-user-and-no-home",
        ),
    ],
)
def test_a_template_that_names_a_user_keeps_it_and_its_own_home(
    template: dict[str, Any], pod: dict[str, Any], engine: dict[str, Any]
) -> None:
    ref, spec = load(ROOT / "manifests/examples/minimal.yaml")
    rendered_pod = render_arm(ref, with_spec(spec, "engine.podTemplate", template), Arm.SPECULATIVE).deployment
    found = rendered_pod["spec"]["template"]["spec"]  # type: ignore[index]
    assert found["securityContext"] == pod
    assert found["containers"][0]["securityContext"] == engine
    assert not any(v["name"] == HOME_VOLUME for v in found.get("volumes", []))
    assert not any(var["name"] == "HOME" for var in found["containers"][0]["env"])


@pytest.mark.parametrize(("asked", "mounted"), [(None, False), (False, False), (True, True)])
def test_the_token_is_mounted_only_when_the_template_asks(asked: bool | None, mounted: bool) -> None:
    ref, spec = load(ROOT / "manifests/examples/pod-template.yaml")  # names a ServiceAccount
    template = spec.engine.pod_template.to_wire()  # type: ignore[union-attr]
    template.pop("automountServiceAccountToken", None)
    if asked is not None:
        template["automountServiceAccountToken"] = asked
    plan = render_arm(ref, with_spec(spec, "engine.podTemplate", template), Arm.SPECULATIVE)
    pod = plan.deployment["spec"]["template"]["spec"]  # type: ignore[index]
    assert pod["serviceAccountName"] == "vllm" and pod["automountServiceAccountToken"] is mounted


def test_a_workloads_copies_are_hardened_and_keep_an_explicit_token() -> None:
    ref, spec = load(ROOT / "manifests/examples/workload-ref.yaml")
    workload = workload_of(spec)
    assert workload is not None
    asking = copy.deepcopy(workload.template)
    asking["spec"]["automountServiceAccountToken"] = True
    for template, mounted in ((workload.template, False), (asking, True)):
        changed = type(workload)(workload.name, template, workload.selector, workload.state, workload.container)
        pod = render_arm(ref, spec, Arm.CONTROL, changed).deployment["spec"]["template"]["spec"]  # type: ignore[index]
        assert pod["automountServiceAccountToken"] is mounted
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_router_pods_take_pull_secrets_placement_and_resources_from_spec_router_and_meet_restricted() -> None:
    ref, spec = load(ROOT / "manifests/examples/three-arm.yaml")
    default = render_router(ref, spec, image=IMAGE)[0]["spec"]["template"]["spec"]
    assert "imagePullSecrets" not in default and "nodeSelector" not in default and "tolerations" not in default
    assert default["containers"][0]["resources"]["requests"] == {"cpu": "100m", "memory": "128Mi"}
    router = {
        "imagePullSecrets": ["registry-a", "registry-b"],
        "nodeSelector": {"pool": "cpu"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "serving", "effect": "NoSchedule"}],
        "resources": {"requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
    }
    custom = with_spec(spec, "router", {**spec.router.to_wire(), **router})
    deployment, service = render_router(ref, custom, image=IMAGE)
    load_job = render_step_load(ref, custom, step=0, router_ip="10.0.0.1", mix="{}", rate=1.0, seconds=60, image=IMAGE)
    for pod in (deployment["spec"]["template"]["spec"], load_job["spec"]["template"]["spec"]):
        assert pod["imagePullSecrets"] == [{"name": "registry-a"}, {"name": "registry-b"}]
        assert pod["nodeSelector"] == {"pool": "cpu"}
        assert pod["tolerations"] == [
            {"key": "dedicated", "operator": "Equal", "value": "serving", "effect": "NoSchedule"}
        ]
        # the restricted Pod Security Standard
        assert pod["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
        (box,) = pod["containers"]
        context = box["securityContext"]
        assert context["allowPrivilegeEscalation"] is False and context["runAsNonRoot"] is True
        assert context["capabilities"] == {"drop": ["ALL"]} and context["readOnlyRootFilesystem"] is True
    assert deployment["spec"]["template"]["spec"]["containers"][0]["resources"] == router["resources"]
    # clients' Service: the traffic port only; the admin port is reached on the pods
    assert [port["name"] for port in service["spec"]["ports"]] == ["http"]
    assert "admin" in [port["name"] for port in deployment["spec"]["template"]["spec"]["containers"][0]["ports"]]


def test_the_pod_template_reaches_every_arm_under_the_operators_own_fields() -> None:
    ref, spec = load(ROOT / "manifests/examples/pod-template.yaml")
    out = rendered(ref, spec)
    for plan in out.arms:
        template = plan.deployment["spec"]["template"]
        pod, (engine,) = template["spec"], template["spec"]["containers"]
        assert pod["serviceAccountName"] == "vllm" and pod["imagePullSecrets"] == [{"name": "registry-example"}]
        assert pod["priorityClassName"] == "serving-critical"
        assert pod["topologySpreadConstraints"][0]["topologyKey"] == "topology.kubernetes.io/zone"
        # tensor parallel size 4: the operator's shared memory, then the template's model cache, then HOME
        assert [v["name"] for v in pod["volumes"]] == ["dshm", "models", HOME_VOLUME]
        assert [m["mountPath"] for m in engine["volumeMounts"]] == ["/dev/shm", "/models", "/home/engine"]
        assert engine["startupProbe"]["failureThreshold"] == 90
        assert engine["readinessProbe"]["httpGet"]["path"] == "/health"  # the operator's, not replaced
        assert template["metadata"]["labels"]["sidecar.istio.io/inject"] == "false"
        assert template["metadata"]["annotations"]["fluentbit.io/parser"] == "json"
        assert template["metadata"]["labels"][ARM_LABEL] == plan.arm.value


def test_where_the_template_and_the_operator_both_set_a_field_the_operators_wins_but_probes_replace() -> None:
    ref, spec = load(ROOT / "manifests/examples/pod-template.yaml")
    template = spec.engine.pod_template.to_wire()  # type: ignore[union-attr]
    template["labels"] = {ARM_LABEL: "baseline", "team": "serving"}
    template["volumes"] = [*template["volumes"], {"name": "dshm", "hostPath": {"path": "/tmp"}}]
    template["securityContext"] = {"runAsUser": 1000, "seccompProfile": {"type": "Unconfined"}}
    template["container"] = {
        **template["container"],
        "volumeMounts": [{"name": "scratch", "mountPath": "/dev/shm"}],
        "securityContext": {"allowPrivilegeEscalation": True, "runAsGroup": 1000},
        "readinessProbe": {"httpGet": {"path": "/v1/models", "port": "http"}, "periodSeconds": 5},
    }
    custom = with_spec(spec, "engine.podTemplate", template)
    speculative = render_arm(ref, custom, Arm.SPECULATIVE).deployment["spec"]["template"]
    pod, (engine,) = speculative["spec"], speculative["spec"]["containers"]
    assert speculative["metadata"]["labels"][ARM_LABEL] == "speculative"  # the arm's selector label
    assert speculative["metadata"]["labels"]["team"] == "serving"
    assert [v for v in pod["volumes"] if v["name"] == "dshm"] == [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    assert engine["volumeMounts"] == [{"name": "dshm", "mountPath": "/dev/shm"}]
    assert pod["securityContext"] == {
        "runAsUser": 1000,
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert (
        engine["securityContext"]["allowPrivilegeEscalation"] is False
        and engine["securityContext"]["runAsGroup"] == 1000
    )
    assert engine["readinessProbe"] == {"httpGet": {"path": "/v1/models", "port": "http"}, "periodSeconds": 5}
    # the template is part of the frozen engine: the arms still differ by the speculative config alone,
    # and a change to it changes every arm's configuration hash
    baseline = render_arm(ref, custom, Arm.BASELINE).deployment["spec"]["template"]["spec"]
    assert {k: v for k, v in pod.items() if k != "containers"} == {
        k: v for k, v in baseline.items() if k != "containers"
    }
    before = {arm: render_arm(ref, spec, arm).config_hash for arm in (Arm.BASELINE, Arm.SPECULATIVE)}
    after = {arm: render_arm(ref, custom, arm).config_hash for arm in (Arm.BASELINE, Arm.SPECULATIVE)}
    assert all(before[arm] != after[arm] for arm in before)
