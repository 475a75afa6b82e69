"""The operator's probe rounds against real mock vLLM servers on loopback: each kind passes on healthy
arms and fails, naming its kind, when the matching fault is injected on the speculative arm only; arms
with the same natural greedy variation pass; sampled answers are scored by a built-in scalar or a
webhook on loopback, and what cannot be scored is never a pass."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from aiohttp import web
from tests.component.loopback import Serve
from tests.component.mockvllm.client import FAST, TOOL_FLAGS, WEATHER_PARAMETERS, inject, post

from specpilot.analysis.answers import SCORE_REPLY_LIMIT
from specpilot.analysis.checks import Check
from specpilot.analysis.quality import ProbeResult, accumulated, case_key, kind_groups, probe_checks
from specpilot.api.reasons import MetricName
from specpilot.api.spec import ProbeCase, Probes, Quality
from specpilot.api.status import Verdict
from specpilot.controller.quality_gates import request_body, run_probes

MODEL = "test-model"
SECRET = "internal-dashboard-token=hunter2 " * 200  # what an internal page the URL reaches might say


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
            result = accumulated(result, latest, groups=kind_groups(parsed).values())
    return list(probe_checks(result, parsed, quality=Quality(probes=probes), confidence=0.95))


def only(checks: list[Check], metric: MetricName) -> Check:
    (check,) = checks
    assert check.metric is metric, check
    return check


GREEDY = [{"kind": "greedy", "prompt": f"greedy probe {i}", "chat": False, "maxTokens": 24} for i in range(4)]
SAMPLED_LENGTH = {"kind": "sampled", "prompt": "p", "temperature": 0.7, "repeats": 2, "score": {"builtin": "length"}}


async def test_a_round_asks_each_case_per_round_times_into_one_tally(mock_vllm: Any) -> None:
    baseline, speculative = await mock_vllm(*FAST), await mock_vllm(*FAST)
    parsed = [ProbeCase.from_wire(GREEDY[0]), ProbeCase.from_wire(SAMPLED_LENGTH)]
    async with aiohttp.ClientSession() as session:
        result = await run_probes(
            session,
            baseline=baseline.url,
            speculative=speculative.url,
            probes=Probes(cases=parsed, per_round=3),
            cases=parsed,
            model=MODEL,
        )
    greedy, sampled = (result.tallies[case_key(case)] for case in parsed)
    # three asks, each whole and streamed: six comparisons a side, one round, one stratum of the tests
    assert (greedy.rounds, greedy.speculative_trials, greedy.baseline_trials) == (1, 6, 6)
    assert (sampled.rounds, sampled.speculative_trials) == (1, 2)  # a sampled case asks its repeats, once


@pytest.mark.parametrize("faulty", [False, True], ids=["healthy", "diverging"])
async def test_greedy(mock_vllm: Any, faulty: bool) -> None:
    baseline, speculative = await mock_vllm(*FAST), await mock_vllm(*FAST)
    if faulty:
        await inject(speculative.admin_url, {"kind": "divergence", "rate": 1.0, "after_tokens": 3})
    # every speculative answer parting, none of the baseline's: shown by the second round of four cases
    check = only(await probe(baseline, speculative, GREEDY, rounds=2), MetricName.PROBE_GREEDY)
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
    # a kept slot every ask, two asks a round (perRound), against none on the baseline: shown by the 5th round
    check = only(await probe(baseline, speculative, [case], rounds=5), MetricName.PROBE_CANCEL)
    assert check.verdict is (Verdict.FAIL if faulty else Verdict.PASS), check.reason
    if faulty:
        assert check.reason.startswith("cancel probe keeps") and "vllm:num_requests_running differs" in check.reason


# Sampled cases: short natural answers (mean 16 tokens), so that nearly all end by themselves within
# maxTokens on a healthy arm; a repetition fault makes the speculative arm's answers loop until they are cut.
SHORT = {"model": {"mean_output_tokens": 16}}
LOOPING = {"kind": "repetition", "rate": 1.0, "after_tokens": 4}


def sampled_case(score: dict[str, Any], prompt: str = "Tell the customer how to reset a password.") -> dict[str, Any]:
    return {"kind": "sampled", "prompt": prompt, "temperature": 0.8, "repeats": 8, "maxTokens": 64, "score": score}


@pytest.mark.parametrize(
    ("score", "faulty", "verdict"),
    [
        ({"builtin": "finishReason"}, False, Verdict.PASS),
        ({"builtin": "finishReason"}, True, Verdict.FAIL),
        ({"builtin": "length", "better": "Lower"}, False, Verdict.PASS),
        ({"builtin": "length", "better": "Lower"}, True, Verdict.FAIL),
        ({"builtin": "length"}, True, Verdict.PASS),  # longer answers, and longer is what this case calls better
    ],
    ids=["finish-healthy", "finish-looping", "shorter-healthy", "shorter-looping", "longer-looping"],
)
async def test_sampled_with_a_builtin_score(
    mock_vllm: Any, score: dict[str, str], faulty: bool, verdict: Verdict
) -> None:
    baseline, speculative = await mock_vllm(*FAST, profile=SHORT), await mock_vllm(*FAST, profile=SHORT)
    if faulty:
        await inject(speculative.admin_url, LOOPING)
    check = only(await probe(baseline, speculative, [sampled_case(score)], rounds=2), MetricName.PROBE_SAMPLED)
    assert check.verdict is verdict, check.evidence
    if verdict is Verdict.FAIL:
        assert check.reason.startswith("sampled probe scores worse") and "worst score" in check.reason


async def test_the_mock_samples_a_new_answer_each_time_above_temperature_zero(mock_vllm: Any) -> None:
    mock = await mock_vllm(*FAST, profile=SHORT)
    case = ProbeCase.from_wire(sampled_case({"builtin": "length"}))
    body = request_body(case, model=MODEL, max_tokens=64, stream=False)
    assert body["temperature"] == 0.8 and "stream" not in body
    answers = [(await post(mock.url + "/v1/chat/completions", body))[1] for _ in range(8)]
    texts = {a["choices"][0]["message"]["content"] for a in answers}
    lengths = {a["usage"]["completion_tokens"] for a in answers}
    assert len(texts) == 8 and len(lengths) > 2


@pytest.fixture
async def rater(serve: Serve) -> tuple[str, list[dict[str, Any]]]:
    """A score webhook on loopback: /diversity scores an answer by its share of distinct words (a looping
    answer scores low); /broken answers 500 with a long body; /garbage answers 200 without a score; /long
    answers 200 with more than a score reply may hold."""
    received: list[dict[str, Any]] = []

    async def diversity(request: web.Request) -> web.Response:
        body = await request.json()
        received.append(body)
        words = body["answer"]["text"].split()
        return web.json_response({"score": len(set(words)) / max(len(words), 1)})

    async def broken(request: web.Request) -> web.Response:
        return web.Response(status=500, text=SECRET)

    async def garbage(request: web.Request) -> web.Response:
        return web.Response(text=SECRET[:SCORE_REPLY_LIMIT])

    async def long(request: web.Request) -> web.Response:
        return web.Response(text=SECRET)

    app = web.Application()
    app.add_routes(
        [
            web.post("/diversity", diversity),
            web.post("/broken", broken),
            web.post("/garbage", garbage),
            web.post("/long", long),
        ]
    )
    return (await serve(app)).url, received


@pytest.mark.parametrize("faulty", [False, True], ids=["healthy", "looping"])
async def test_sampled_scored_by_a_webhook_that_never_learns_the_arm(
    mock_vllm: Any, rater: tuple[str, list[dict[str, Any]]], faulty: bool
) -> None:
    url, received = rater
    baseline, speculative = await mock_vllm(*FAST, profile=SHORT), await mock_vllm(*FAST, profile=SHORT)
    if faulty:
        await inject(speculative.admin_url, LOOPING)
    case = sampled_case({"webhook": {"url": f"{url}/diversity", "metadata": {"rubric": "v3"}}})
    # a looping answer now and then still scores above its pair: shown by the third round
    check = only(await probe(baseline, speculative, [case], rounds=3), MetricName.PROBE_SAMPLED)
    assert check.verdict is (Verdict.FAIL if faulty else Verdict.PASS), check.evidence
    assert len(received) == 3 * 2 * 8  # every answer of both arms, each round
    assert {tuple(sorted(body)) for body in received} == {("answer", "case", "metadata")}
    assert received[0]["case"] == {
        "kind": "sampled",
        "prompt": case["prompt"],
        "chat": True,
        "temperature": 0.8,
        "maxTokens": 64,
    }
    assert set(received[0]["answer"]) == {"text", "finishReason", "completionTokens"}
    assert received[0]["metadata"] == {"rubric": "v3"}


@pytest.mark.parametrize(
    ("path", "saying"),
    [
        ("broken", "HTTP 500"),
        ("garbage", "without a finite score"),
        ("long", f"answer over {SCORE_REPLY_LIMIT} bytes refused"),
    ],
)
async def test_answers_a_webhook_cannot_score_leave_the_check_inconclusive(
    mock_vllm: Any, rater: tuple[str, list[dict[str, Any]]], path: str, saying: str
) -> None:
    url, _ = rater
    baseline, speculative = await mock_vllm(*FAST, profile=SHORT), await mock_vllm(*FAST, profile=SHORT)
    case = sampled_case({"webhook": {"url": f"{url}/{path}"}})
    check = only(await probe(baseline, speculative, [case]), MetricName.PROBE_SAMPLED)
    assert check.verdict is Verdict.INCONCLUSIVE and check.hard
    assert "16 of 16 answers of the latest round unscored" in check.reason and saying in check.reason
    assert "hunter2" not in check.reason + check.evidence
