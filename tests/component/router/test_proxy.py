"""Proxying on loopback: streams and bodies pass through, scopes are split, every request is measured."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

from tests.component.router.harness import Harness, HarnessFactory

from specpilot.wire.samples import RequestSample


async def test_a_stream_passes_through_whole_and_is_measured(make_router: HarnessFactory) -> None:
    h = await make_router()
    async with await h.chat(team="code", headers={"x-fake-chunks": "5", "x-fake-per-chunk": "3"}) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"] == "text/event-stream"
        assert resp.headers["X-Specpilot-Arm"] == "speculative"
        assert resp.headers["X-Specpilot-Scope"] == "code"
        events = await h.read_sse(resp)
    assert events[-1] == b"[DONE]"
    assert all(b'"usage"' not in e for e in events)  # the usage chunk the router asked for is not passed on
    assert sum(b'"content": "tok' in e for e in events) == 5
    upstream = json.loads(h.speculative.received[-1].body)
    assert upstream["stream_options"] == {"include_usage": True}
    (sample,) = (await h.samples())["samples"]
    assert sample["scope"] == "code" and sample["arm"] == "speculative" and sample["outcome"] == "ok"
    assert sample["outputTokens"] == 15 and sample["tokensFromUsage"] and sample["promptTokens"] == 3
    assert 0 < sample["ttftSeconds"] <= sample["e2eSeconds"]
    assert sample["decodeSeconds"] >= 0 and sample["tpotSeconds"] is not None


async def test_the_gaps_between_chunks_of_a_stream_are_recorded_as_the_upstream_spaced_them(
    make_router: HarnessFactory,
) -> None:
    h = await make_router()
    spacing, chunks = 0.03, 8
    headers = {"x-fake-chunks": str(chunks), "x-fake-gap": str(spacing)}
    async with await h.chat(team="code", headers=headers) as resp:
        await h.read_sse(resp)
    async with await h.chat(team="code", stream=False) as resp:
        await resp.read()
    streamed, whole = (await h.samples())["samples"]
    gaps = RequestSample.from_json(streamed).chunk_gaps
    assert gaps.width == 1 and gaps.total == chunks - 1  # every chunk of output after the first
    # The decode time is the gaps' sum, each gap within its bucket (the lowest holds gaps down to zero).
    low = sum(n * (gaps.bounds(key)[0] if key else 0.0) for key, n in gaps.counts.items())
    high = sum(n * gaps.bounds(key)[1] for key, n in gaps.counts.items())
    assert low <= streamed["decodeSeconds"] < high
    median = gaps.quantile(0.5)
    assert median is not None and spacing * 0.9 <= median[1] and median[0] <= spacing * 1.5, median
    assert whole["chunkGaps"] == {"width": 1, "counts": {}}


async def test_a_usage_chunk_the_client_asked_for_is_kept(make_router: HarnessFactory) -> None:
    h = await make_router()
    async with await h.chat(team="code", stream_options={"include_usage": True}) as resp:
        events = await h.read_sse(resp)
    assert json.loads(events[-2])["usage"]["completion_tokens"] == 4
    assert h.speculative.received[-1].body == json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True,
         "stream_options": {"include_usage": True}}
    ).encode()  # fmt: skip


async def test_other_stream_options_are_kept_when_usage_is_added(make_router: HarnessFactory) -> None:
    h = await make_router()
    async with await h.chat(team="code", stream_options={"continuous_usage_stats": False}) as resp:
        await resp.read()
    assert json.loads(h.speculative.received[-1].body)["stream_options"] == {
        "continuous_usage_stats": False,
        "include_usage": True,
    }


async def test_a_body_written_again_keeps_its_numbers_exact(make_router: HarnessFactory) -> None:
    h = await make_router()
    seed = 2**70 + 1  # past 64 bits: a float would round it
    async with await h.chat(team="code", stream_options={}, seed=seed, temperature=0.1) as resp:
        await resp.read()
    upstream = json.loads(h.speculative.received[-1].body)
    assert upstream["seed"] == seed and upstream["temperature"] == 0.1
    assert upstream["stream_options"] == {"include_usage": True}


async def test_without_usage_tokens_are_counted_from_content_chunks(make_router: HarnessFactory) -> None:
    h = await make_router()
    async with await h.chat(team="code", headers={"x-fake-usage": "never", "x-fake-chunks": "6"}) as resp:
        await resp.read()
    (sample,) = (await h.samples())["samples"]
    assert sample["outputTokens"] == 6 and not sample["tokensFromUsage"]


async def test_a_whole_response_passes_through_with_its_length(make_router: HarnessFactory) -> None:
    h = await make_router()
    async with await h.chat(team="code", stream=False, headers={"x-fake-chunks": "7"}) as resp:
        body = await resp.read()
        assert resp.headers["Content-Length"] == str(len(body))
    assert json.loads(body)["usage"]["completion_tokens"] == 7
    (sample,) = (await h.samples())["samples"]
    assert sample["outputTokens"] == 7 and sample["ttftSeconds"] is None and not sample["stream"]


async def test_text_completions_stream_too(make_router: HarnessFactory) -> None:
    h = await make_router()
    body = {"model": "code-1", "prompt": "def f(", "stream": True}
    async with h.client.post(f"{h.url}/v1/completions", json=body) as resp:
        events = await h.read_sse(resp)
    assert events[-1] == b"[DONE]" and len(events) == 6
    (sample,) = (await h.samples())["samples"]
    assert sample["outputTokens"] == 4 and sample["ttftSeconds"] is not None


async def test_headers_forwarded_both_ways(make_router: HarnessFactory) -> None:
    h = await make_router()
    async with await h.chat(
        team="code",
        headers={"Authorization": "Bearer s3cret", "X-Specpilot-Scope": "forged", "X-Request-Id": "r1",
                 "Connection": "keep-alive", "Proxy-Authorization": "x"},
    ) as resp:  # fmt: skip
        await resp.read()
        assert resp.headers["x-fake-name"] == "speculative"
    seen = h.speculative.received[-1].headers
    assert seen["Authorization"] == "Bearer s3cret"
    assert seen["X-Request-Id"] == "r1"
    assert seen["X-Specpilot-Scope"] == "code"  # the scope the router decided, not the client's value
    assert "Proxy-Authorization" not in seen


async def test_scope_by_header_then_match_then_default(make_router: HarnessFactory) -> None:
    routes = Harness.table(Harness.scope("code", spec=100), Harness.scope("chat"), default="chat")
    h = await make_router(routes=routes)
    for team, header in [("code", None), ("code", "chat"), ("other", None), (None, "nope")]:
        async with await h.chat(team=team, headers={"X-Specpilot-Scope": header} if header else {}) as resp:
            await resp.read()
    scopes = [(s["scope"], s["arm"]) for s in (await h.samples())["samples"]]
    assert scopes == [("code", "speculative"), ("chat", "baseline"), ("chat", "baseline"), ("chat", "baseline")]


async def test_a_table_change_moves_new_requests_and_in_flight_streams_finish(make_router: HarnessFactory) -> None:
    h = await make_router()
    slow = await h.chat(team="code", headers={"x-fake-gap": "0.05", "x-fake-chunks": "6"})
    assert slow.headers["X-Specpilot-Arm"] == "speculative"
    h.use(h.table(h.scope("code", spec=0), generation=2))
    async with await h.chat(team="code") as resp:
        assert resp.headers["X-Specpilot-Arm"] == "baseline"
        await resp.read()
    events = await h.read_sse(slow)
    slow.release()
    assert events[-1] == b"[DONE]"
    outcomes = {(s["arm"], s["outcome"]) for s in (await h.samples())["samples"]}
    assert outcomes == {("speculative", "ok"), ("baseline", "ok")}


async def test_weights_split_a_scope(make_router: HarnessFactory) -> None:
    h = await make_router(routes=Harness.table(Harness.scope("code", spec=30)))
    arms: Counter[str] = Counter()
    for _ in range(200):
        async with await h.chat(team="code", stream=False) as resp:
            arms[resp.headers["X-Specpilot-Arm"]] += 1
            await resp.read()
    assert 30 <= arms["speculative"] <= 90 and arms["speculative"] + arms["baseline"] == 200


async def test_affinity_keeps_a_conversation_on_one_arm(make_router: HarnessFactory) -> None:
    h = await make_router("--affinity-header", "X-Session", routes=Harness.table(Harness.scope("code", spec=50)))
    for conversation in range(6):
        arms = set()
        for _ in range(5):
            async with await h.chat(team="code", stream=False, headers={"X-Session": f"c{conversation}"}) as resp:
                arms.add(resp.headers["X-Specpilot-Arm"])
                await resp.read()
        assert len(arms) == 1


async def test_no_speculative_endpoint_sends_the_scope_to_baseline_and_says_why(make_router: HarnessFactory) -> None:
    h = await make_router(spec_endpoints="")
    async with await h.chat(team="code") as resp:
        assert resp.headers["X-Specpilot-Arm"] == "baseline"
        await resp.read()
    (sample,) = (await h.samples())["samples"]
    assert sample["arm"] == "baseline" and sample["fallback"] == "speculative_unavailable"
    metric = await h.metrics()
    assert metric("specpilot_router_fallback_requests_total", scope="code", reason="speculative_unavailable") == 1
    assert metric("specpilot_router_fallback", scope="code", reason="speculative_unavailable") == 1
    assert metric("specpilot_router_route_weight", scope="code", arm="baseline") == 100


async def test_a_refused_connect_is_retried_on_baseline(make_router: HarnessFactory, free_port: int) -> None:
    h = await make_router(spec_endpoints=f"127.0.0.1:{free_port}")
    async with await h.chat(team="code") as resp:
        assert resp.status == 200 and resp.headers["X-Specpilot-Arm"] == "baseline"
        await resp.read()
    (sample,) = (await h.samples())["samples"]
    assert sample["outcome"] == "ok" and sample["fallback"] == "speculative_unavailable"
    assert (await h.metrics())("specpilot_router_retries_total", arm="speculative") == 1


async def test_other_v1_requests_go_to_baseline_unmeasured(make_router: HarnessFactory) -> None:
    h = await make_router()
    async with h.client.get(f"{h.url}/v1/models?x=1") as resp:
        assert resp.status == 200
        assert (await resp.json())["object"] == "list"
    assert h.baseline.received[-1].path == "/v1/models"
    assert (await h.samples())["samples"] == []
    async with h.client.get(f"{h.url}/metrics") as resp:
        assert resp.status == 404  # the admin port's pages are not on the traffic port
        assert "/v1/ and /detokenize, /health, /ping, /tokenize, /version" in (await resp.json())["error"]["message"]


async def test_the_engines_other_endpoints_go_to_baseline_and_health_is_the_routers_own(
    make_router: HarnessFactory,
) -> None:
    h = await make_router()
    for method, path in (
        ("GET", "/ping"),
        ("POST", "/ping"),
        ("GET", "/version"),
        ("POST", "/tokenize"),
        ("POST", "/detokenize"),
    ):
        async with h.client.request(method, f"{h.url}{path}", json={"model": "m", "prompt": "hi"}) as resp:
            assert resp.status == 200, path
            assert await resp.json() == {"arm": "baseline", "path": path, "method": method}
    assert [r.path for r in h.baseline.received] == ["/ping", "/ping", "/version", "/tokenize", "/detokenize"]
    assert h.baseline.received[-1].body == b'{"model": "m", "prompt": "hi"}'
    assert h.speculative.received == [] and (await h.samples())["samples"] == []
    # /health is answered by the router: as vLLM's, 200 and no body while it can serve
    async with h.client.get(f"{h.url}/health") as resp:
        assert resp.status == 200 and await resp.read() == b""
    assert "/health" not in [r.path for r in h.baseline.received]


async def test_health_is_503_while_no_baseline_endpoint_is_ready(make_router: HarnessFactory) -> None:
    h = await make_router()
    h.router.state.set_endpoints({})  # the baseline's endpoints went
    async with h.client.get(f"{h.url}/health") as resp:
        assert resp.status == 503
        assert "not ready" in (await resp.json())["error"]["message"]


async def test_concurrent_streams_all_finish(make_router: HarnessFactory) -> None:
    h = await make_router(routes=Harness.table(Harness.scope("code", spec=50)))

    async def one() -> list[bytes]:
        async with await h.chat(team="code", headers={"x-fake-gap": "0.002", "x-fake-chunks": "10"}) as resp:
            return await h.read_sse(resp)

    results = await asyncio.gather(*(one() for _ in range(40)))
    assert all(r[-1] == b"[DONE]" and len(r) == 13 for r in results)
    page = await h.samples()
    assert len(page["samples"]) == 40 and all(s["outcome"] == "ok" for s in page["samples"])
    assert h.router.state.outstanding == {}
