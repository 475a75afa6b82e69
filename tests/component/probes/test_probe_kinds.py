"""The operator's probe rounds against real mock vLLM servers on loopback: each kind passes on healthy
arms and fails, naming its kind, when the matching fault is injected on the speculative arm only; arms
with the same natural greedy variation pass."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from tests.component.mockvllm.client import FAST, TOOL_FLAGS, WEATHER_PARAMETERS, inject, post

from specpilot.analysis.checks import Check
from specpilot.analysis.quality import ProbeResult, accumulated, probe_checks
from specpilot.api.reasons import MetricName
from specpilot.api.spec import ProbeCase, Probes, Quality
from specpilot.api.status import Verdict
from specpilot.controller.quality import run_probes

MODEL = "test-model"


async def probe(baseline: Any, speculative: Any, cases: list[dict[str, Any]], *, rounds: int = 1) -> list[Check]:
    """`rounds` probe rounds of `cases` (as written in a manifest), accumulated, then judged."""
    parsed = [ProbeCase.from_wire(case) for case in cases]
    probes = Probes(cases=parsed)
    result: ProbeResult | None = None
    async with aiohttp.ClientSession() as session:
        for _ in range(rounds):
            latest = await run_probes(
                session, baseline=baseline.url, speculative=speculative.url, probes=probes, cases=parsed, model=MODEL
            )
            assert latest.error is None, latest.error
            result = accumulated(result, latest)
    return list(probe_checks(result, parsed, quality=Quality(probes=probes), confidence=0.95))


def only(checks: list[Check], metric: MetricName) -> Check:
    (check,) = checks
    assert check.metric is metric, check
    return check


GREEDY = [{"kind": "greedy", "prompt": f"greedy probe {i}", "chat": False, "maxTokens": 24} for i in range(4)]


@pytest.mark.parametrize("faulty", [False, True], ids=["healthy", "diverging"])
async def test_greedy(mock_vllm: Any, faulty: bool) -> None:
    baseline, speculative = await mock_vllm(*FAST), await mock_vllm(*FAST)
    if faulty:
        await inject(speculative.admin_url, {"kind": "divergence", "rate": 1.0, "after_tokens": 3})
    check = only(await probe(baseline, speculative, GREEDY), MetricName.PROBE_GREEDY)
    assert check.verdict is (Verdict.FAIL if faulty else Verdict.PASS), check.reason
    if faulty:
        assert "greedy probe" in check.reason and "text at" in check.reason


async def test_greedy_arms_with_the_same_natural_variation_pass(mock_vllm: Any) -> None:
    varied = {"model": {"greedy_divergence": 0.03}}
    baseline, speculative = await mock_vllm(*FAST, profile=varied), await mock_vllm(*FAST, profile=varied)
    check = only(await probe(baseline, speculative, GREEDY, rounds=5), MetricName.PROBE_GREEDY)
    assert check.verdict is Verdict.PASS, check.evidence


@pytest.mark.parametrize("faulty", [False, True], ids=["healthy", "overrun"])
async def test_stop(mock_vllm: Any, faulty: bool) -> None:
    baseline, speculative = await mock_vllm(*FAST), await mock_vllm(*FAST)
    prompt = "stop probe"
    _, answer = await post(baseline.url + "/v1/completions", {"prompt": prompt, "max_tokens": 30, "temperature": 0})
    stop = answer["choices"][0]["text"].split(" ")[6]
    if faulty:
        await inject(speculative.admin_url, {"kind": "stop_overrun", "rate": 1.0})
    case = {"kind": "stop", "prompt": prompt, "chat": False, "maxTokens": 30, "stop": [stop]}
    check = only(await probe(baseline, speculative, [case]), MetricName.PROBE_STOP)
    assert check.verdict is (Verdict.FAIL if faulty else Verdict.PASS), check.reason
    if faulty:
        assert check.reason.startswith("stop probe") and "text differs" in check.reason


WEATHER = {"name": "get_weather", "parameters": WEATHER_PARAMETERS}
CLOCK = {"name": "current_time", "parameters": {"type": "object", "properties": {}}}


@pytest.mark.parametrize("choice", ["auto", "required", "get_weather"])
@pytest.mark.parametrize("faulty", [False, True], ids=["healthy", "broken-json"])
async def test_tool_call(mock_vllm: Any, choice: str, faulty: bool) -> None:
    baseline, speculative = await mock_vllm(*FAST, *TOOL_FLAGS), await mock_vllm(*FAST, *TOOL_FLAGS)
    if faulty:
        await inject(speculative.admin_url, {"kind": "tool_json", "rate": 1.0})
    case = {"kind": "toolCall", "prompt": "Use get_weather for Oslo, please.", "tools": [WEATHER, CLOCK]}
    check = only(await probe(baseline, speculative, [{**case, "toolChoice": choice}]), MetricName.PROBE_TOOL_CALL)
    assert check.verdict is (Verdict.FAIL if faulty else Verdict.PASS), check.reason
    if faulty:
        assert check.reason.startswith("toolCall probe") and "arguments differs" in check.reason


@pytest.mark.parametrize("faulty", [False, True], ids=["healthy", "invalid"])
async def test_structured(mock_vllm: Any, faulty: bool) -> None:
    baseline, speculative = await mock_vllm(*FAST), await mock_vllm(*FAST)
    if faulty:
        await inject(speculative.admin_url, {"kind": "structured_invalid", "rate": 1.0})
    case = {"kind": "structured", "prompt": "forecast as JSON", "maxTokens": 256, "jsonSchema": WEATHER_PARAMETERS}
    check = only(await probe(baseline, speculative, [case]), MetricName.PROBE_STRUCTURED)
    assert check.verdict is (Verdict.FAIL if faulty else Verdict.PASS), check.reason
    if faulty:
        assert check.reason.startswith("structured probe") and "text (" in check.reason


@pytest.mark.parametrize("faulty", [False, True], ids=["healthy", "leaking"])
async def test_cancel(mock_vllm: Any, faulty: bool) -> None:
    baseline, speculative = await mock_vllm(*FAST), await mock_vllm(*FAST)
    if faulty:
        await inject(speculative.admin_url, {"kind": "cancel_leak", "rate": 1.0})
    case = {"kind": "cancel", "prompt": "long", "chat": False, "maxTokens": 3000, "afterChunks": 3, "settle": "1s"}
    check = only(await probe(baseline, speculative, [case]), MetricName.PROBE_CANCEL)
    assert check.verdict is (Verdict.FAIL if faulty else Verdict.PASS), check.reason
    if faulty:
        assert check.reason.startswith("cancel probe") and "vllm:num_requests_running differs" in check.reason
