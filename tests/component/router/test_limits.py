"""Requests the router refuses itself, with clear errors; secrets and bodies stay out of the logs."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import pytest
from tests.component.router.harness import HarnessFactory
from yarl import URL


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "not valid JSON"),
        (b"", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (b'"text"', "must be a JSON object"),
    ],
    ids=["broken", "empty", "not-utf8", "array", "string"],
)
async def test_malformed_json_is_400_with_an_openai_error(
    make_router: HarnessFactory, body: bytes, message: str
) -> None:
    h = await make_router()
    async with h.client.post(f"{h.url}/v1/chat/completions", data=body) as resp:
        assert resp.status == 400
        error = (await resp.json())["error"]
    assert message in error["message"] and error["type"] == "BadRequestError" and error["code"] == 400
    assert (await h.metrics())("specpilot_router_refused_total", reason="malformed_json") == 1
    assert h.speculative.received == [] and (await h.samples())["samples"] == []


async def test_odd_but_valid_fields_are_forwarded(make_router: HarnessFactory) -> None:
    h = await make_router()
    body = b'{"model": 7, "stream": "yes", "messages": null}'
    async with h.client.post(f"{h.url}/v1/chat/completions", data=body) as resp:
        assert resp.status == 200
        await resp.read()
    assert h.baseline.received[-1].body == body  # passed on unchanged, to baseline (no scope matched)
    (sample,) = (await h.samples())["samples"]
    assert (sample["scope"], sample["model"], sample["stream"]) == ("default", "", False)


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
async def test_a_body_over_the_limit_is_413(make_router: HarnessFactory, chunked: bool) -> None:
    h = await make_router("--max-body-bytes", "1000")
    payload = b'{"model": "code-1", "prompt": "' + b"x" * 2000 + b'"}'

    async def chunks() -> AsyncIterator[bytes]:
        for i in range(0, len(payload), 100):
            yield payload[i : i + 100]

    async with h.client.post(f"{h.url}/v1/completions", data=chunks() if chunked else payload) as resp:
        assert resp.status == 413
        assert (await resp.json())["error"]["type"] == "RequestEntityTooLargeError"
    assert (await h.metrics())("specpilot_router_refused_total", reason="body_too_large") == 1


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
async def test_a_streamed_body_over_the_limit_is_refused_on_other_paths(
    make_router: HarnessFactory, chunked: bool
) -> None:
    h = await make_router("--max-body-bytes", "1000")

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(30):
            yield b"x" * 100

    async with h.client.post(f"{h.url}/v1/files", data=chunks() if chunked else b"x" * 3000) as resp:
        assert resp.status == 413


async def test_headers_over_the_limit_are_refused(make_router: HarnessFactory) -> None:
    h = await make_router("--max-header-bytes", "1024")
    async with await h.chat(team="code", headers={"X-Big": "x" * 2000}) as resp:
        assert resp.status in (400, 431)
    async with await h.chat(team="code", headers={"X-Small": "x" * 500}) as resp:
        assert resp.status == 200


async def test_too_many_headers_are_refused(make_router: HarnessFactory) -> None:
    h = await make_router("--max-headers", "20")
    async with await h.chat(team="code", headers={f"X-H{i}": "v" for i in range(40)}) as resp:
        assert resp.status in (400, 431)


async def test_authorization_and_bodies_are_never_logged(
    make_router: HarnessFactory, free_port: int, caplog: pytest.LogCaptureFixture
) -> None:
    h = await make_router("--request-timeout", "0.2", spec_endpoints=f"127.0.0.1:{free_port}")
    with caplog.at_level(logging.DEBUG):
        for headers in ({}, {"x-fake-hang": "1"}, {"x-fake-drop-after": "1"}, {"x-fake-status": "500"}):
            async with await h.chat(
                team="code", headers={"Authorization": "Bearer TOPSECRET", **headers}, prompt_secret="BODYSECRET"
            ) as resp:
                await resp.read()
        async with h.client.post(f"{h.url}/v1/chat/completions", data=b"{BODYSECRET") as resp:
            await resp.read()
    assert caplog.records  # the failed connect was logged
    assert "TOPSECRET" not in caplog.text and "BODYSECRET" not in caplog.text


@pytest.mark.parametrize("path", ["/v1/../metrics", "/v1/%2e%2e/metrics", "/v1/./models"])
async def test_dot_segments_cannot_reach_other_upstream_paths(make_router: HarnessFactory, path: str) -> None:
    h = await make_router()
    async with h.client.get(URL(f"{h.url}{path}", encoded=True)) as resp:  # encoded: sent as written
        assert resp.status == 400
    assert h.baseline.received == []
