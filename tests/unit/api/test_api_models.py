"""The SpeculationPilot models: wire format, defaults, strictness, durations and quantities."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from specpilot.api import FALLBACK_LIMIT, SpeculationPilot, SpeculationPilotSpec, SpeculationPilotStatus
from specpilot.api.common import Duration, parse_duration
from specpilot.api.spec import Analysis, Engine, Resources, Stage
from specpilot.api.status import ConditionStatus, ConditionType, DecisionOutcome, Phase, ScopeState, Verdict

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((ROOT / "manifests" / "examples").glob("*.yaml"))
MINIMAL: dict[str, Any] = {
    "engine": {"image": "vllm/vllm-openai:v0.33.0", "model": "Qwen/Qwen3-8B"},
    "speculative": {"draft": {"model": "Qwen/Qwen3-0.6B"}},
    "scopes": [{"name": "chat"}],
}
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_the_examples() -> None:
    assert {path.stem for path in EXAMPLES} == {
        "minimal",
        "three-arm",
        "local-demo",
        "prometheus-source",
        "pod-template",
        "workload-ref",
        "probe-cases",
    }


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda path: path.stem)
def test_example_parses_and_round_trips(path: Path) -> None:
    pilot = SpeculationPilot.from_wire(yaml.safe_load(path.read_text()))
    assert SpeculationPilot.from_wire(pilot.to_wire()) == pilot


def test_defaults_fill_an_omitted_policy() -> None:
    spec = SpeculationPilotSpec.from_wire(MINIMAL)
    assert spec.baseline.replicas == spec.speculative.replicas == 1
    assert spec.engine.command == ["vllm", "serve"]
    assert spec.engine.tensor_parallel_size == 1
    assert spec.speculative.draft.method == "draft_model"
    assert spec.speculative.draft.num_speculative_tokens == 3
    assert [stage.weight for stage in spec.scopes[0].stages] == [10, 25, 33]
    assert (spec.analysis.interval, spec.analysis.window, spec.analysis.failure_limit) == (
        timedelta(minutes=1),
        timedelta(minutes=5),
        3,
    )
    assert spec.analysis.thresholds.max_time_per_committed_token_ratio == 1.0
    assert spec.router.scope_header == "x-specpilot-scope"
    assert (spec.rollback.cooldown, spec.rollback.reentry) == (timedelta(minutes=30), "Manual")
    assert spec.alternative is None and spec.quality.probes is None and not spec.suspend


def test_wire_form_is_camel_case_without_unset_fields() -> None:
    wire = SpeculationPilotSpec.from_wire(MINIMAL).to_wire()
    assert wire["engine"]["tensorParallelSize"] == 1
    assert wire["analysis"]["thresholds"]["kvCacheUsage"] == {"max": 0.95, "sustainedFor": "2m"}
    assert "alternative" not in wire and "revision" not in wire["engine"]


def test_python_names_are_refused_on_the_wire_but_usable_in_code() -> None:
    snake = {**MINIMAL, "speculative": {"draft": {"model": "d", "num_speculative_tokens": 4}}}
    with pytest.raises(ValidationError, match="num_speculative_tokens"):
        SpeculationPilotSpec.from_wire(snake)
    assert Stage(weight=10, min_requests=5).to_wire() == {"weight": 10, "minRequests": 5, "minDuration": "10m"}


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"suspend": "true"}, "valid boolean"),
        ({"baseline": {"replicas": "2"}}, "valid integer"),
        ({"baseline": {"replicas": 2.0}}, "valid integer"),
        ({"analysis": {"confidence": "0.9"}}, "valid number"),
        ({"unknown": 1}, "Extra inputs"),
    ],
    ids=["bool-from-string", "int-from-string", "int-from-float", "float-from-string", "unknown-field"],
)
def test_scalars_are_strict_like_the_api_server(patch: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        SpeculationPilotSpec.from_wire({**MINIMAL, **patch})


def test_integers_are_accepted_where_numbers_are_expected() -> None:
    spec = SpeculationPilotSpec.from_wire({**MINIMAL, "analysis": {"thresholds": {"maxErrorRate": 0}}})
    assert spec.analysis.thresholds.max_error_rate == 0


def test_models_are_immutable() -> None:
    spec = SpeculationPilotSpec.from_wire(MINIMAL)
    with pytest.raises(ValidationError, match="frozen"):
        spec.suspend = True


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", timedelta(seconds=90)),
        ("5m", timedelta(minutes=5)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("100ms", timedelta(milliseconds=100)),
        ("1m500ms", timedelta(minutes=1, milliseconds=500)),
        ("0s", timedelta()),
    ],
)
def test_parse_duration(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "5", "1d", "-1s", "1.5h", "1 m", "5M"])
def test_parse_duration_refuses_malformed(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


def test_durations_are_timedeltas_that_go_back_on_the_wire_as_written() -> None:
    spec = SpeculationPilotSpec.from_wire({**MINIMAL, "analysis": {"interval": "60s", "window": "1h30m"}})
    assert spec.analysis.window / spec.analysis.interval == 90
    assert (str(spec.analysis.interval), spec.analysis.warmup) == ("60s", timedelta(minutes=1))
    wire = spec.to_wire()["analysis"]
    assert (wire["interval"], wire["window"], wire["warmup"]) == ("60s", "1h30m", "1m")
    assert SpeculationPilotSpec.from_wire(spec.to_wire()).to_wire() == spec.to_wire()


@pytest.mark.parametrize(
    ("value", "text"),
    [(timedelta(seconds=90), "1m30s"), (timedelta(hours=2, milliseconds=5), "2h5ms"), (Duration("90s"), "90s")],
)
def test_durations_built_in_python(value: timedelta, text: str) -> None:
    assert Analysis(window=value).to_wire()["window"] == text
    assert Analysis(window=text).window == value


def test_a_duration_below_a_millisecond_is_refused() -> None:
    with pytest.raises(ValidationError, match="milliseconds"):
        Analysis(window=timedelta(minutes=5, microseconds=1))


@pytest.mark.parametrize(
    ("analysis", "message"),
    [
        ({"interval": "1s"}, "must be between 5s and 1h"),
        ({"window": "25h"}, "must be between 5s and 24h"),
        ({"interval": "1 minute"}, "should match pattern"),
    ],
)
def test_duration_bounds(analysis: dict[str, str], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        SpeculationPilotSpec.from_wire({**MINIMAL, "analysis": analysis})


@pytest.mark.parametrize("value", [1, 0, "1", "500m", "64Gi", "1.5", "2e3"])
def test_quantity_accepts(value: int | str) -> None:
    assert Resources.from_wire({"limits": {"cpu": value}}).limits["cpu"] == value


@pytest.mark.parametrize("value", [-1, True, 1.5, "lots", "-1", "1 Gi"])
def test_quantity_refuses(value: object) -> None:
    with pytest.raises(ValidationError, match="resource quantity"):
        Resources.from_wire({"limits": {"cpu": value}})


def test_extra_args_refuse_owned_flags_in_python_too() -> None:
    with pytest.raises(ValidationError, match="flags the operator renders"):
        Engine.from_wire({"image": "i", "model": "m", "extraArgs": ["--max-num-seqs=8", "--port=9000"]})


def _status(fallbacks: int) -> dict[str, Any]:
    at = NOW.isoformat()
    window = {"start": at, "end": at}
    return {
        "observedGeneration": 3,
        "phase": Phase.PROGRESSING,
        "conditions": [
            {
                "type": ConditionType.READY,
                "status": ConditionStatus.TRUE,
                "reason": "ArmsReady",
                "lastTransitionTime": at,
            },
        ],
        "arms": {"baseline": {"replicas": 1, "readyReplicas": 1, "gpus": 1, "configHash": "abc"}},
        "scopes": [
            {
                "name": "chat",
                "state": ScopeState.PILOTING,
                "stage": 1,
                "weight": 25,
                "lastTransitionTime": at,
                "lastWindow": {"end": at, "verdict": Verdict.PASS, "samples": 120, "ratio": 0.8, "e2eP95": 3.2},
            },
        ],
        "speculativeScopes": "0/1",
        "fallbacks": [
            {
                "scope": "chat",
                "at": at,
                "reason": "ThresholdExceeded",
                "metric": "ttftRatio",
                "observed": 1.4,
                "threshold": 1.2,
                "window": window,
            }
        ]
        * fallbacks,
        "decision": {"outcome": DecisionOutcome.DEFER, "decidedAt": at, "reasons": ["too few samples"]},
    }


def test_status_round_trips() -> None:
    status = SpeculationPilotStatus.from_wire(_status(fallbacks=2))
    assert status.scopes[0].last_window is not None and status.scopes[0].last_window.e2e_p95 == 3.2
    assert SpeculationPilotStatus.from_wire(status.to_wire()) == status


def test_fallback_records_are_bounded() -> None:
    SpeculationPilotStatus.from_wire(_status(fallbacks=FALLBACK_LIMIT))
    with pytest.raises(ValidationError, match="fallbacks"):
        SpeculationPilotStatus.from_wire(_status(fallbacks=FALLBACK_LIMIT + 1))
