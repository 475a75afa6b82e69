"""The prefix-filtered exposition parser: labels and values as Prometheus writes them, only the
wanted families kept, and a truncated or garbage exposition reported rather than read as zeros."""

from __future__ import annotations

import gzip
import math

import pytest
from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from specpilot.metrics.exposition import Exposition, Labels, parse_exposition
from specpilot.mockvllm.config import parse_args
from specpilot.mockvllm.profile import Profile
from specpilot.mockvllm.server import MockServer

# The families the operator reads from vLLM (and the process start time, for restarts).
FAMILIES = (
    "vllm:generation_tokens",
    "vllm:request_decode_time_seconds",
    "vllm:spec_decode_num_drafts",
    "vllm:spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens",
    "vllm:spec_decode_num_accepted_tokens_per_pos",
    "vllm:kv_cache_usage_perc",
    "vllm:num_preemptions",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:inter_token_latency_seconds",
    "vllm:request_success",
    "vllm:cache_config_info",
    "process_start_time_seconds",
)
SPEC = '{"method": "draft_model", "model": "org/draft", "num_speculative_tokens": 3}'


def only(text: str, family: str = "m") -> dict[Labels, float]:
    exposition = parse_exposition(text, [family])
    assert exposition.problems == ()
    return {labels: value for series in exposition.samples.values() for labels, value in series.items()}


def prometheus(text: str, names: set[str]) -> dict[tuple[str, Labels], float]:
    """prometheus-client's full parse of the same text, restricted to the given sample names."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name in names
    }


def ours(exposition: Exposition) -> dict[tuple[str, Labels], float]:
    return {(name, labels): value for name, series in exposition.samples.items() for labels, value in series.items()}


@pytest.mark.parametrize(
    ("line", "labels"),
    [
        ("m 1", ()),
        ("m{} 1", ()),
        ('m{a="x",b="y"} 1', (("a", "x"), ("b", "y"))),
        ('m{b="2",a="1"} 1', (("a", "1"), ("b", "2"))),
        ('m{a="x,y",b="z"} 1', (("a", "x,y"), ("b", "z"))),
        ('m{a="say \\"hi\\", then go"} 1', (("a", 'say "hi", then go'),)),
        ('m{a="C:\\\\dir\\\\"} 1', (("a", "C:\\dir\\"),)),
        ('m{a="two\\nlines"} 1', (("a", "two\nlines"),)),
        ('m{a="\\q"} 1', (("a", "\\q"),)),
        ('m{a="{b=\\"1\\"}"} 1', (("a", '{b="1"}'),)),
        ('m{a="x y"} 1', (("a", "x y"),)),
        ('m{a=""} 1', (("a", ""),)),
        ('m{a="x",} 1', (("a", "x"),)),
        ('m{ a = "x" , b="y" } 1', (("a", "x"), ("b", "y"))),
        ('m{a="x"}1', (("a", "x"),)),
        ('m{a="ünï"} 1', (("a", "ünï"),)),
    ],
    ids=[
        "none",
        "empty-braces",
        "two",
        "sorted",
        "comma-in-value",
        "escaped-quotes",
        "backslashes",
        "escaped-newline",
        "unknown-escape-kept",
        "braces-in-value",
        "space-in-value",
        "empty-value",
        "trailing-comma",
        "blanks-around",
        "no-blank-before-value",
        "unicode",
    ],
)
def test_labels_parse_as_prometheus_client_parses_them(line: str, labels: Labels) -> None:
    text = line + "\n"
    assert only(text) == {labels: 1.0}
    assert ours(parse_exposition(text, ["m"])) == prometheus(text, {"m"})


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1", 1.0),
        ("-2.5", -2.5),
        ("1.5e-3", 0.0015),
        ("1.7961182312641342e+09", 1.7961182312641342e09),
        ("+Inf", math.inf),
        ("-Inf", -math.inf),
        ("NaN", math.nan),
        ("7 1700000000000", 7.0),  # with a timestamp, which is ignored
    ],
    ids=["int", "negative", "exponent", "big", "inf", "minus-inf", "nan", "timestamp"],
)
def test_values_parse_including_nan_and_infinities(value: str, expected: float) -> None:
    (got,) = only(f'm{{a="x"}} {value}\n').values()
    assert got == expected or (math.isnan(got) and math.isnan(expected))


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ("m 1", "truncated: the last line has no newline (m 1)"),
        ('m{a="1"} 1\nm{a="2"} 2', "truncated: the last line has no newline"),
        ("", "empty exposition"),
        (b"m 1\n\xff\xfe\n", "not UTF-8 text (invalid start byte at byte 4)"),
        ('m{a="x} 1\n', "line 1: unparsable sample"),
        ('m{a="x"\n', "line 1: unparsable sample"),
        ("m\n", "line 1: unparsable sample (m)"),
        ("m 1 2 3\n", "line 1: unparsable sample"),
        ("# HELP m x\nm abc\n", "line 2: unparsable value 'abc' of m"),
        ('m{a="1"} 1\nm{a="1"} 2\n', 'line 2: duplicate series m{a="1"}'),
        ('h_bucket{le="1"} 1\nh_count 1\nh_sum 0.5\n', "histogram h has no +Inf bucket (truncated?)"),
        ('h_bucket{le="1"} 1\nh_bucket{le="+Inf"} 1\nh_sum 0.5\n', "histogram h has no _count (truncated?)"),
        ('h_bucket{le="+Inf"} 1\nh_count 1\n', "histogram h has no _sum (truncated?)"),
        (
            'h_bucket{e="0",le="+Inf"} 1\nh_count{e="0"} 1\nh_sum{e="0"} 1\nh_bucket{e="1",le="1"} 1\n',
            'histogram h{e="1"} has no +Inf bucket or _sum or _count (truncated?)',
        ),
        ('h_bucket{le="big"} 1\nh_bucket{le="+Inf"} 1\nh_count 1\nh_sum 1\n', "line 1: bucket without a numeric le"),
    ],
    ids=[
        "no-final-newline",
        "cut-mid-line",
        "empty",
        "not-utf8",
        "open-quote",
        "open-brace",
        "no-value",
        "extra-fields",
        "bad-value",
        "duplicate",
        "no-inf-bucket",
        "no-count",
        "no-sum",
        "cut-inside-second-series",
        "bad-le",
    ],
)
def test_truncated_or_garbage_text_is_reported(body: str | bytes, problem: str) -> None:
    problems = parse_exposition(body, ["m", "h"]).problems
    assert any(p.startswith(problem) for p in problems), problems


def test_a_truncated_last_line_is_not_read_as_a_value() -> None:
    exposition = parse_exposition("m 12\nn 345", ["m", "n"])
    assert ours(exposition) == {("m", ()): 12.0}


def test_other_families_are_skipped_even_when_they_are_garbage() -> None:
    text = (
        "# HELP other x\nother{{{ nonsense\n"
        'm_created 1.7e9\nm_by_reason{reason="x"} 3\nmore_m 4\n'  # share the prefix, not the family
        "# TYPE m counter\nm_total 5\n"
    )
    exposition = parse_exposition(text, ["m"])
    assert exposition.problems == ()
    assert ours(exposition) == {("m_total", ()): 5.0}


@pytest.mark.parametrize(
    ("asked", "kept"),
    [
        ("vllm:spec_decode_num_accepted_tokens", {"vllm:spec_decode_num_accepted_tokens_total"}),
        ("vllm:spec_decode_num_accepted_tokens_per_pos", {"vllm:spec_decode_num_accepted_tokens_per_pos_total"}),
        ("vllm:num_requests_waiting", {"vllm:num_requests_waiting"}),
        ("vllm:spec_decode_num_draft", set()),  # a prefix alone is no family
    ],
    ids=["accepted", "accepted-per-pos", "waiting-not-by-reason", "prefix-only"],
)
def test_a_family_is_its_exact_name_not_every_name_it_prefixes(asked: str, kept: set[str]) -> None:
    text = (
        'vllm:spec_decode_num_accepted_tokens_total{engine="0"} 5\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="0"} 4\n'
        'vllm:spec_decode_num_draft_tokens_total{engine="0"} 9\n'
        'vllm:num_requests_waiting{engine="0"} 2\n'
        'vllm:num_requests_waiting_by_reason{engine="0",reason="capacity"} 2\n'
    )
    assert set(parse_exposition(text, [asked]).samples) == kept


def test_a_line_seen_before_with_a_garbage_value_is_still_reported() -> None:
    assert parse_exposition('m{a="1"} 1\n', ["m"]).problems == ()
    assert parse_exposition('m{a="1"} x\n', ["m"]).problems == ("line 1: unparsable value 'x' of m",)
    assert only('m{a="1"} 2\n') == {(("a", "1"),): 2.0}


def mock_exposition() -> str:
    """What the mock vLLM renders for a speculative arm after some activity."""
    server = MockServer(parse_args(["org/target", "-sc", SPEC]), Profile(), env={})
    metrics = server.engine.metrics
    metrics.tokens.generation_tokens.inc(1234)
    metrics.outcomes.success["stop"].inc(7)
    metrics.outcomes.success["length"].inc(2)
    metrics.scheduler.running.set(3)
    metrics.scheduler.waiting.set(1)
    metrics.scheduler.kv_usage.set(0.42)
    metrics.cache.preemptions.inc(2)
    for seconds in (0.2, 1.1, 3.3, 42.0):
        metrics.latencies.decode_time.observe(seconds)
    for seconds in (0.004, 0.03, 0.03, 0.2, 100.0):
        metrics.latencies.itl.observe(seconds)
    assert metrics.spec is not None
    metrics.spec.drafts.inc(100)
    metrics.spec.draft_tokens.inc(300)
    metrics.spec.accepted.inc(180)
    for position, accepted in zip(metrics.spec.accepted_per_pos, (80, 60, 40), strict=True):
        position.inc(accepted)
    return generate_latest(server.registry).decode()


def test_what_the_mock_vllm_renders_parses_as_prometheus_client_parses_it() -> None:
    text = mock_exposition()
    exposition = parse_exposition(text, FAMILIES)
    assert exposition.problems == ()
    names = {f + suffix for f in FAMILIES for suffix in ("", "_total", "_bucket", "_sum", "_count")}
    theirs = prometheus(text, names)
    assert ours(exposition) == theirs
    assert {name for name, _ in theirs} == set(exposition.samples)
    assert len(exposition.series("vllm:inter_token_latency_seconds_bucket")) == 20  # 19 bounds and +Inf
    (info,) = exposition.series("vllm:cache_config_info")
    assert len(info) == 38  # 37 CacheConfig attributes and `engine`
    assert exposition.series("vllm:generation_tokens_total") == {(("engine", "0"), ("model_name", "org/target")): 1234}


def test_gzip_decoded_bytes_parse_like_the_text() -> None:
    text = mock_exposition()
    decoded = gzip.decompress(gzip.compress(text.encode()))
    assert parse_exposition(decoded, FAMILIES) == parse_exposition(text, FAMILIES)


def test_label_values_prometheus_client_escapes_come_back_unescaped() -> None:
    registry = CollectorRegistry()
    gauge = Gauge("m", "odd label values", ["v"], registry=registry)
    values = ['quote " inside', "back\\slash", "new\nline", "comma, and = and } and {", ""]
    for i, value in enumerate(values):
        gauge.labels(v=value).set(i)
    text = generate_latest(registry).decode()
    assert only(text) == {(("v", value),): float(i) for i, value in enumerate(values)}
    assert ours(parse_exposition(text, ["m"])) == prometheus(text, {"m"})
