"""Per-request samples and the /samples page: outcomes, deadlines, and the JSON both sides read."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from specpilot.wire.buckets import FineCounts, fine_bucket
from specpilot.wire.names import Arm
from specpilot.wire.samples import (
    CHUNK_GAP_KEYS,
    OpenRequest,
    RequestOutcome,
    RequestSample,
    SamplesPage,
    deadline_met,
    outcome_for_status,
)


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        (200, RequestOutcome.OK),
        (204, RequestOutcome.OK),
        (400, RequestOutcome.CLIENT_ERROR),
        (404, RequestOutcome.CLIENT_ERROR),
        (429, RequestOutcome.REJECTED),
        (503, RequestOutcome.REJECTED),
        (500, RequestOutcome.UPSTREAM_ERROR),
        (502, RequestOutcome.UPSTREAM_ERROR),
    ],
)
def test_outcome_for_status(status: int, outcome: RequestOutcome) -> None:
    assert outcome_for_status(status) is outcome


@pytest.mark.parametrize(
    ("outcome", "e2e", "deadline", "met"),
    [
        (RequestOutcome.OK, 1.0, None, None),
        (RequestOutcome.OK, 1.0, 2.0, True),
        (RequestOutcome.OK, 2.0, 2.0, True),
        (RequestOutcome.OK, 2.5, 2.0, False),
        (RequestOutcome.TIMEOUT, 0.5, 2.0, False),
        (RequestOutcome.REJECTED, 0.1, 2.0, False),
        (RequestOutcome.UPSTREAM_ERROR, 0.1, 2.0, False),
        (RequestOutcome.NO_ENDPOINT, 0.1, 2.0, False),
        (RequestOutcome.CLIENT_CANCEL, 0.1, 2.0, None),
        (RequestOutcome.CLIENT_ERROR, 0.1, 2.0, None),
    ],
)
def test_deadline_met_only_by_ok_responses_in_time(
    outcome: RequestOutcome, e2e: float, deadline: float | None, met: bool | None
) -> None:
    assert deadline_met(outcome, e2e, deadline) is met


def sample(**fields: Any) -> RequestSample:
    base: dict[str, Any] = {
        "seq": 1, "at": 1796040000.25, "scope": "s", "arm": Arm.BASELINE, "endpoint": "10.0.0.7:8000",
        "model": "m", "stream": True, "status": 200, "outcome": RequestOutcome.OK, "e2e": 1.0, "ttft": 0.1,
        "output_tokens": 11, "tokens_from_usage": True, "decode": 0.5, "deadline_met": None, "fallback": None,
    }  # fmt: skip
    return RequestSample(**{**base, **fields})


@pytest.mark.parametrize(
    ("fields", "tpot"),
    [({}, 0.05), ({"output_tokens": 1}, None), ({"decode": None}, None), ({"output_tokens": None}, None)],
)
def test_time_per_output_token_excludes_the_first_token(fields: dict[str, Any], tpot: float | None) -> None:
    assert sample(**fields).tpot == tpot


def test_sample_json_has_the_field_names_the_operator_reads() -> None:
    doc = sample(outcome=RequestOutcome.TIMEOUT, arm=Arm.SPECULATIVE).to_json()
    assert list(doc) == [
        "seq", "at", "scope", "arm", "endpoint", "model", "stream", "status", "outcome", "e2eSeconds",
        "ttftSeconds", "outputTokens", "promptTokens", "tokensFromUsage", "decodeSeconds", "tpotSeconds",
        "deadlineMet", "fallback", "chunkGaps",
    ]  # fmt: skip
    assert (doc["outcome"], doc["arm"], doc["tpotSeconds"]) == ("timeout", "speculative", 0.05)


PAGE = SamplesPage(
    epoch="3f2a9c0d1e4b",
    samples=(
        sample(seq=7, chunk_gaps=FineCounts({103: 9, 104: 31, 105: 22})),
        sample(
            seq=8,
            arm=Arm.ALTERNATIVE,
            stream=False,
            status=0,
            outcome=RequestOutcome.CLIENT_CANCEL,
            ttft=None,
            output_tokens=None,
            tokens_from_usage=False,
            decode=None,
            fallback="alternative_unavailable",
        ),
        sample(seq=9, e2e=3, deadline_met=False, outcome=RequestOutcome.TIMEOUT, status=504),
    ),
    next_cursor=9,
    dropped=6,
    open=(
        OpenRequest(at=1796040001.5, scope="code", arm=Arm.CONTROL),
        OpenRequest(at=1796040002.25, scope="chat", arm=Arm.SPECULATIVE),
    ),
)


def test_a_page_survives_json_as_the_router_serves_it() -> None:
    doc = json.loads(json.dumps(PAGE.to_json()))
    assert set(doc) == {"epoch", "next", "dropped", "samples", "open"}
    assert doc["open"][0] == {"at": 1796040001.5, "scope": "code", "arm": "control"}
    assert SamplesPage.from_json(doc) == PAGE


def test_a_page_from_a_router_without_its_requests_in_flight_reads_none() -> None:
    doc = PAGE.to_json()
    del doc["open"]
    assert SamplesPage.from_json(doc).open == ()


def test_an_empty_page_parses() -> None:
    page = SamplesPage.from_json({"epoch": "e", "next": 0, "dropped": 0, "samples": []})
    assert page == SamplesPage(epoch="e", samples=(), next_cursor=0, dropped=0)


def test_derived_tpot_is_not_read_back() -> None:
    doc = sample().to_json()
    del doc["tpotSeconds"]
    assert RequestSample.from_json(doc) == sample()


def test_a_page_from_a_router_without_prompt_tokens_still_reads() -> None:
    doc = PAGE.to_json()
    for item in doc["samples"]:
        del item["promptTokens"]
    assert all(s.prompt_tokens is None for s in SamplesPage.from_json(doc).samples)


def test_chunk_gaps_survive_json_and_stay_small_for_a_long_stream() -> None:
    gaps = FineCounts(Counter(fine_bucket(0.005 * 100 ** (i / 1999)) for i in range(2000))).bounded(CHUNK_GAP_KEYS)
    long = sample(output_tokens=2001, chunk_gaps=gaps)
    doc = json.loads(json.dumps(long.to_json()))
    assert doc["chunkGaps"]["width"] == gaps.width and RequestSample.from_json(doc) == long
    assert len(json.dumps(doc["chunkGaps"], separators=(",", ":"))) < 400


def test_a_page_from_a_router_without_chunk_gaps_still_reads() -> None:
    doc = PAGE.to_json()
    for item in doc["samples"]:
        del item["chunkGaps"]
    assert all(s.chunk_gaps == FineCounts() for s in SamplesPage.from_json(doc).samples)


def page_with(**changes: Any) -> dict[str, Any]:
    """The JSON of `PAGE` with fields of its first sample changed (a value of `...` removes the field)."""
    doc = PAGE.to_json()
    first = doc["samples"][0]
    for key, value in changes.items():
        if value is ...:
            del first[key]
        else:
            first[key] = value
    return doc


@pytest.mark.parametrize(
    ("doc", "problem"),
    [
        pytest.param([], "document: expected a JSON object", id="not-an-object"),
        pytest.param({"epoch": "e", "next": 0, "dropped": 0}, "samples: missing", id="no-samples"),
        pytest.param({"epoch": "e", "next": 0, "dropped": 0, "samples": {}}, "samples: expected a list", id="dict"),
        pytest.param({"epoch": 1, "next": 0, "dropped": 0, "samples": []}, "epoch: expected a string", id="epoch"),
        pytest.param({"epoch": "e", "next": "9", "dropped": 0, "samples": []}, "next: expected an integer", id="next"),
        pytest.param({"epoch": "e", "next": 9, "samples": []}, "dropped: missing", id="no-dropped"),
        pytest.param({**PAGE.to_json(), "samples": [3]}, r"samples\[0\]: expected a JSON object", id="sample-type"),
        pytest.param(page_with(seq=...), r"samples\[0\]\.seq: missing", id="missing-seq"),
        pytest.param(page_with(seq=True), r"samples\[0\]\.seq: expected an integer", id="bool-is-no-integer"),
        pytest.param(page_with(seq=1.5), r"samples\[0\]\.seq: expected an integer", id="float-seq"),
        pytest.param(page_with(outcome="oops"), r"samples\[0\]\.outcome: unknown value 'oops'", id="outcome"),
        pytest.param(page_with(outcome=None), r"samples\[0\]\.outcome: expected a string", id="null-outcome"),
        pytest.param(page_with(arm="canary"), r"samples\[0\]\.arm: unknown value 'canary'", id="arm"),
        pytest.param(page_with(e2eSeconds="1"), r"samples\[0\]\.e2eSeconds: expected a finite number", id="e2e"),
        pytest.param(page_with(e2eSeconds=None), r"samples\[0\]\.e2eSeconds: expected a finite number", id="null"),
        pytest.param(page_with(ttftSeconds=float("nan")), r"ttftSeconds: expected a finite number", id="nan"),
        pytest.param(page_with(ttftSeconds=...), r"samples\[0\]\.ttftSeconds: missing", id="nullable-not-optional"),
        pytest.param(page_with(stream=1), r"samples\[0\]\.stream: expected true or false", id="stream"),
        pytest.param(page_with(deadlineMet="yes"), r"samples\[0\]\.deadlineMet: expected true or false", id="met"),
        pytest.param(page_with(outputTokens=2.0), r"samples\[0\]\.outputTokens: expected an integer", id="tokens"),
        pytest.param(page_with(fallback=7), r"samples\[0\]\.fallback: expected a string", id="fallback"),
        pytest.param(page_with(promptTokens="9"), r"samples\[0\]\.promptTokens: expected an integer", id="prompt"),
        pytest.param(page_with(chunkGaps=[]), r"samples\[0\]\.chunkGaps: expected a JSON object", id="gaps"),
        pytest.param(
            page_with(chunkGaps={"width": 3, "counts": {}}), r"chunkGaps\.width: expected a power", id="width"
        ),
        pytest.param(page_with(chunkGaps={"width": 1}), r"chunkGaps\.counts: missing", id="no-counts"),
        pytest.param(page_with(chunkGaps={"width": 2, "counts": {"103": 1}}), r"counts\.103: not a fine", id="odd"),
        pytest.param(page_with(chunkGaps={"width": 1, "counts": {"-1": 1}}), r"counts\.-1: not a fine", id="key"),
        pytest.param(page_with(chunkGaps={"width": 1, "counts": {"9": 0}}), r"counts\.9: expected a positive", id="0"),
        pytest.param(page_with(chunkGaps={"width": 1, "counts": {"9": 1.5}}), r"counts\.9: expected an integ", id="n"),
        pytest.param({**PAGE.to_json(), "open": {}}, "open: expected a list", id="open-dict"),
        pytest.param(
            {**PAGE.to_json(), "open": [{"at": 1.0, "scope": "s"}]}, r"open\[0\]\.arm: missing", id="open-arm"
        ),
        pytest.param(
            {**PAGE.to_json(), "open": [{"at": "1", "scope": "s", "arm": "control"}]},
            r"open\[0\]\.at: expected a finite number",
            id="open-at",
        ),
    ],
)
def test_garbage_is_refused_naming_the_field(doc: object, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        SamplesPage.from_json(doc)


def test_an_unknown_outcome_says_which_are_known() -> None:
    with pytest.raises(ValueError, match="want one of ok, timeout, rejected"):
        RequestSample.from_json({**sample().to_json(), "outcome": "late"})
