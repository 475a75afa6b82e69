"""The operator's judge: the same rules as the CRD, the ones only the operator can judge, field paths."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from specpilot.api import Problem, validate
from specpilot.api.pilot import NAME_LEAVES_REHEARSAL, NAME_RULE
from specpilot.api.spec.analysis_spec import ONE_FORECAST_PROFILE, WINDOW_COVERS_INTERVAL, WINDOW_COVERS_KV_CACHE
from specpilot.api.spec.arms_spec import DRAFT_MODEL_FORBIDDEN, DRAFT_MODEL_REQUIRED, DRAFT_REVISION_NEEDS_MODEL
from specpilot.api.spec.engine_spec import (
    ENV_VALUE_OR_SOURCE,
    GPU_PER_RANK,
    TOKEN_NEEDS_OPT_IN,
    TOLERATION_EXISTS_WITHOUT_VALUE,
)
from specpilot.api.spec.pilot_spec import (
    ACCEPTANCE_LENGTH_REACHABLE,
    ALTERNATIVE_DIFFERS,
    ALTERNATIVE_GPU_BUDGET,
    ALTERNATIVE_NEEDS_CONTROL,
    ALTERNATIVE_SHARE_FITS,
    CONTROL_LABELS_GIVEN,
    DEADLINE_WITHIN_TIMEOUT,
    DEFAULT_SCOPE_EXISTS,
    DRAFT_TENSOR_PARALLEL,
    STAGE_SPANS_INTERVAL,
    STAGE_SPANS_SAMPLES,
)
from specpilot.api.spec.prometheus_spec import ARM_LABELS_DIFFER
from specpilot.api.spec.secretref import HEADER_NOT_RESERVED
from specpilot.api.spec.spec_fields import URL_WITHOUT_USERINFO

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((ROOT / "manifests" / "examples").glob("*.yaml"))
INVALID = sorted((ROOT / "tests" / "cluster" / "api" / "invalid").glob("*.yaml"))
BASE: dict[str, Any] = {
    "apiVersion": "specpilot.io/v1alpha1",
    "kind": "SpeculationPilot",
    "metadata": {"name": "pilot"},
    "spec": {
        "engine": {"image": "vllm/vllm-openai:v0.33.0", "model": "Qwen/Qwen3-8B"},
        "speculative": {"draft": {"model": "Qwen/Qwen3-0.6B"}},
        "scopes": [{"name": "chat"}],
    },
}


def _pilot(**spec: Any) -> dict[str, Any]:
    body = copy.deepcopy(BASE)
    body["spec"].update(spec)
    return body


def _engine(**fields: Any) -> dict[str, Any]:
    return {**BASE["spec"]["engine"], **fields}


def _prometheus(**fields: Any) -> dict[str, Any]:
    return _pilot(analysis={"metricsSource": {"prometheus": {"url": "http://prometheus.monitoring:9090", **fields}}})


def _header(name: str, value: str, kind: str = "Exact") -> dict[str, Any]:
    return {"match": {"headers": [{"name": name, "value": value, "type": kind}]}}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda path: path.stem)
def test_examples_are_deployable(path: Path) -> None:
    assert validate(yaml.safe_load(path.read_text())) == []


@pytest.mark.parametrize("path", INVALID, ids=lambda path: path.stem)
def test_invalid_corpus_is_refused_naming_the_field(path: Path) -> None:
    """The corpus the API server refuses (cluster tier) is refused by the operator too."""
    field = re.search(r"^# field: (.+)$", path.read_text(), re.MULTILINE)
    assert field is not None, "the manifest lacks a `# field:` line"
    assert field[1] in [problem.field for problem in validate(yaml.safe_load(path.read_text()))]


RULES = [
    (
        "gpu-limit",
        _pilot(engine=_engine(resources={"limits": {"nvidia.com/gpu": 2}})),
        "spec.engine.resources",
        GPU_PER_RANK.message,
    ),
    (
        "gpu-request",
        _pilot(engine=_engine(tensorParallelSize=2, resources={"requests": {"nvidia.com/gpu": "1"}})),
        "spec.engine.resources",
        GPU_PER_RANK.message,
    ),
    (
        "env",
        _pilot(
            engine=_engine(env=[{"name": "A", "value": "1", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}])
        ),
        "spec.engine.env[0].valueFrom",
        ENV_VALUE_OR_SOURCE.message,
    ),
    (
        "toleration",
        _pilot(engine=_engine(tolerations=[{"operator": "Exists", "value": "x"}])),
        "spec.engine.tolerations[0].value",
        TOLERATION_EXISTS_WITHOUT_VALUE.message,
    ),
    (
        "score-webhook-userinfo",
        _pilot(
            quality={
                "probes": {
                    "cases": [
                        {
                            "kind": "sampled",
                            "prompt": "p",
                            "temperature": 0.7,
                            "score": {"webhook": {"url": "http://bob:s3cret@rater:8080/score"}},
                        }
                    ]
                }
            }
        ),
        "spec.quality.probes.cases[0].score.webhook.url",
        URL_WITHOUT_USERINFO.message,
    ),
    (
        "secret-header-reserved",
        _pilot(
            quality={
                "webhooks": [
                    {
                        "name": "q",
                        "url": "http://checks:8080",
                        "secretHeader": {"name": "Host", "secretKeyRef": {"name": "hooks", "key": "token"}},
                    }
                ]
            }
        ),
        "spec.quality.webhooks[0].secretHeader.name",
        HEADER_NOT_RESERVED.message,
    ),
    (
        "token-without-opt-in",
        _pilot(engine=_engine(podTemplate={"serviceAccountName": "engine", "automountServiceAccountToken": True})),
        "spec.engine.podTemplate.automountServiceAccountToken",
        TOKEN_NEEDS_OPT_IN.message,
    ),
    (
        "draft-model-required",
        _pilot(speculative={"draft": {"method": "eagle3"}}),
        "spec.speculative.draft.model",
        DRAFT_MODEL_REQUIRED.message,
    ),
    (
        "draft-model-forbidden",
        _pilot(speculative={"draft": {"method": "suffix", "model": "m"}}),
        "spec.speculative.draft.model",
        DRAFT_MODEL_FORBIDDEN.message,
    ),
    (
        "draft-revision",
        _pilot(speculative={"draft": {"method": "mtp", "revision": "main"}}),
        "spec.speculative.draft.revision",
        DRAFT_REVISION_NEEDS_MODEL.message,
    ),
    (
        "draft-tensor-parallel",
        _pilot(engine=_engine(tensorParallelSize=8), speculative={"draft": {"model": "d", "tensorParallelSize": 4}}),
        "spec.speculative.draft.tensorParallelSize",
        DRAFT_TENSOR_PARALLEL.message,
    ),
    (
        "alternative-budget",
        _pilot(speculative={"replicas": 2, "draft": {"model": "d"}}, alternative={"replicas": 3}),
        "spec.alternative",
        ALTERNATIVE_GPU_BUDGET.message,
    ),
    (
        "alternative-same-as-baseline",
        _pilot(alternative={"replicas": 1, "tensorParallelSize": 1}),
        "spec.alternative",
        ALTERNATIVE_DIFFERS.message,
    ),
    (
        "default-scope",
        _pilot(router={"defaultScope": "code"}),
        "spec.router.defaultScope",
        DEFAULT_SCOPE_EXISTS.message,
    ),
    (
        "deadline",
        _pilot(router={"requestTimeout": "30s"}, scopes=[{"name": "chat", "deadline": "1m"}]),
        "spec.scopes",
        DEADLINE_WITHIN_TIMEOUT.message,
    ),
    (
        "stage-duration",
        _pilot(analysis={"interval": "15m", "window": "30m"}),
        "spec.scopes",
        STAGE_SPANS_INTERVAL.message,
    ),
    ("stage-requests", _pilot(analysis={"minSamples": 201}), "spec.scopes", STAGE_SPANS_SAMPLES.message),
    (
        "window",
        _pilot(analysis={"interval": "10m", "window": "5m"}),
        "spec.analysis.window",
        WINDOW_COVERS_INTERVAL.message,
    ),
    (
        "kv-sustained",
        _pilot(analysis={"window": "1m", "thresholds": {"kvCacheUsage": {"sustainedFor": "90s"}}}),
        "spec.analysis.thresholds.kvCacheUsage.sustainedFor",
        WINDOW_COVERS_KV_CACHE.message,
    ),
    (
        "acceptance",
        _pilot(analysis={"thresholds": {"minAcceptanceLength": 4.5}}),
        "spec.analysis.thresholds.minAcceptanceLength",
        ACCEPTANCE_LENGTH_REACHABLE.message,
    ),
    (
        "duplicate-scope",
        _pilot(scopes=[{"name": "a"}, {"name": "b"}, {"name": "a"}]),
        "spec.scopes[2]",
        "duplicate name 'a'",
    ),
    (
        "duplicate-webhook",
        _pilot(quality={"webhooks": [{"name": "w", "url": "http://a"}, {"name": "w", "url": "http://b"}]}),
        "spec.quality.webhooks[1]",
        "duplicate name 'w'",
    ),
    (
        "stages",
        _pilot(scopes=[{"name": "chat", "stages": [{"weight": 50}, {"weight": 20}]}]),
        "spec.scopes[0].stages",
        "stage weights must be strictly increasing",
    ),
    ("name", {**_pilot(), "metadata": {"name": "Pilot"}}, "metadata.name", NAME_RULE.message),
    (
        "name-ends-in-rehearsal",
        {**_pilot(), "metadata": {"name": "chat-rehearsal"}},
        "metadata.name",
        NAME_LEAVES_REHEARSAL.message,
    ),
    (
        "prometheus-arms-identical",
        _prometheus(arms={"baseline": {"arm": "a"}, "speculative": {"arm": "a"}, "control": {"arm": "c"}}),
        "spec.analysis.metricsSource.prometheus.arms.speculative",
        ARM_LABELS_DIFFER.message,
    ),
    (
        "prometheus-arms-without-control",
        _prometheus(arms={"baseline": {"arm": "b"}, "speculative": {"arm": "s"}}),
        "spec.analysis.metricsSource.prometheus.arms",
        CONTROL_LABELS_GIVEN.message,
    ),
    (
        "alternative-without-control",
        _pilot(control={"enabled": False}, alternative={"extraArgs": ["--max-num-seqs=64"]}),
        "spec.alternative",
        ALTERNATIVE_NEEDS_CONTROL.message,
    ),
    (
        "alternative-share-over-a-third",
        _pilot(
            alternative={"extraArgs": ["--max-num-seqs=64"]},
            scopes=[{"name": "a", "stages": [{"weight": 10}, {"weight": 51}]}],
        ),
        "spec.scopes",
        ALTERNATIVE_SHARE_FITS.message,
    ),
    (
        "prometheus-reserved-label",
        _prometheus(labels={"__name__": "up"}),
        "spec.analysis.metricsSource.prometheus.labels",
        "not start with __",
    ),
    (
        "prometheus-label-name",
        _prometheus(arms={"baseline": {"arm-name": "a"}, "speculative": {"arm": "b"}}),
        "spec.analysis.metricsSource.prometheus.arms.baseline",
        "label names must match",
    ),
    (
        "prometheus-empty-arm",
        _prometheus(arms={"baseline": {}, "speculative": {"arm": "b"}}),
        "spec.analysis.metricsSource.prometheus.arms.baseline",
        "at least 1 item",
    ),
    (
        "prometheus-url",
        _prometheus(url="prometheus:9090"),
        "spec.analysis.metricsSource.prometheus.url",
        "should match pattern",
    ),
    (
        "prometheus-url-query",
        _prometheus(url="http://prometheus:9090/api/v1/query?query=up"),
        "spec.analysis.metricsSource.prometheus.url",
        "should match pattern",
    ),
    (
        "prometheus-timeout",
        _prometheus(timeout="10m"),
        "spec.analysis.metricsSource.prometheus.timeout",
        "must be between 1s and 5m",
    ),
    (
        "prometheus-pod-label",
        _prometheus(podLabel="pod-name"),
        "spec.analysis.metricsSource.prometheus.podLabel",
        "should match pattern",
    ),
    (
        "prometheus-missing",
        _pilot(analysis={"metricsSource": {}}),
        "spec.analysis.metricsSource.prometheus",
        "Field required",
    ),
    (
        "forecast-both",
        _pilot(analysis={"forecast": {"profile": "h200-llama-3.1-8b-eagle", "configMap": "calibration"}}),
        "spec.analysis.forecast.profile",
        ONE_FORECAST_PROFILE.message,
    ),
    ("forecast-neither", _pilot(analysis={"forecast": {}}), "spec.analysis.forecast.profile", "set exactly one"),
    (
        "forecast-unknown-profile",
        _pilot(analysis={"forecast": {"profile": "a100-llama"}}),
        "spec.analysis.forecast.profile",
        "'h200-llama-3.1-8b-draft-1b', 'h200-llama-3.1-8b-eagle' or 'h200-qwen2.5-32b'",
    ),
]
OPERATOR_ONLY = [
    (
        "router-account",
        _pilot(engine=_engine(podTemplate={"serviceAccountName": "pilot-router"})),
        "spec.engine.podTemplate.serviceAccountName",
        "the ServiceAccount the operator makes for this pilot's router",
    ),
    (
        "regex",
        _pilot(scopes=[{"name": "chat", **_header("x-task", "code(", "RegularExpression")}]),
        "spec.scopes[0].match.headers[0].value",
        "not a valid regular expression",
    ),
    (
        "unreachable-scope",
        _pilot(scopes=[{"name": "a", **_header("x-task", "t")}, {"name": "b", **_header("x-task", "t")}]),
        "spec.scopes[1].match",
        "an earlier scope has the same match rules",
    ),
]


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [case[1:] for case in RULES + OPERATOR_ONLY],
    ids=[case[0] for case in RULES + OPERATOR_ONLY],
)
def test_rule(body: dict[str, Any], field: str, message: str) -> None:
    [problem] = validate(body)
    assert problem.field == field
    assert message in problem.message


def test_budget_counts_tensor_parallel_ranks() -> None:
    """4 replicas of TP 2 spend the 8 GPUs of 2 speculative replicas of TP 4."""
    body = _pilot(
        engine=_engine(tensorParallelSize=4),
        speculative={"replicas": 2, "draft": {"model": "d", "tensorParallelSize": 1}},
        alternative={"replicas": 4, "tensorParallelSize": 2},
    )
    assert validate(body) == []
    body["spec"]["alternative"]["replicas"] = 5
    assert [problem.field for problem in validate(body)] == ["spec.alternative"]


@pytest.mark.parametrize(
    "url", ["http://prometheus.monitoring:9090", "https://thanos.example.com/prometheus/", "http://10.0.0.1:9090"]
)
def test_prometheus_source_is_deployable(url: str) -> None:
    assert validate(_prometheus(url=url, labels={"cluster": "prod"}, timeout="30s")) == []
    arms = {"baseline": {"specpilot_io_arm": "baseline"}, "speculative": {"specpilot_io_arm": "speculative"}}
    assert validate(_prometheus(url=url, arms={**arms, "control": {"specpilot_io_arm": "control"}})) == []
    without = _prometheus(url=url, arms=arms)
    without["spec"]["control"] = {"enabled": False}
    assert validate(without) == []


@pytest.mark.parametrize("control", [True, False])
def test_a_stage_may_take_every_request_the_control_arm_serving_copies(control: bool) -> None:
    body = _pilot(scopes=[{"name": "a", "stages": [{"weight": 10}, {"weight": 100}]}], control={"enabled": control})
    assert validate(body) == []


def test_regular_expressions_in_exact_matches_are_not_compiled() -> None:
    assert validate(_pilot(scopes=[{"name": "chat", **_header("x-task", "code(")}])) == []


def test_empty_match_rules_are_not_duplicates() -> None:
    assert validate(_pilot(scopes=[{"name": "a"}, {"name": "b"}])) == []


def test_missing_spec_is_named() -> None:
    assert [str(problem) for problem in validate({"metadata": {"name": "p"}})] == [
        "spec: Input should be a valid dictionary or instance of SpeculationPilotSpec"
    ]


def test_problem_reads_as_field_then_message() -> None:
    assert str(Problem("spec.scopes[1].name", "duplicate")) == "spec.scopes[1].name: duplicate"


def test_a_token_mounted_with_the_opt_in_is_deployable() -> None:
    template = {"serviceAccountName": "engine", "automountServiceAccountToken": True, "allowServiceAccountToken": True}
    assert validate(_pilot(engine=_engine(podTemplate=template))) == []
