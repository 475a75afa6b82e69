"""One arm's engines over a window as PromQL, for a Prometheus that already scrapes them: `ArmEngine`.

The same figures as `engine_window.engine_window` computes from direct scrapes, written the way an SRE
writes them in Grafana, each an instant query evaluated at the window's end:

- counters as ``sum(increase(c{arm}[window]))``, differenced per series across resets before the
  arm's series are summed, then divided (time per committed token, acceptance);
- the inter-token-latency buckets as ``sum by (le) (increase(b{arm}[window]))``, the quantile taken
  here from them as ``histogram_quantile(q, ...)`` takes it (`quantile.bucket_quantile`), with the
  bucket it lies in: a comparison needs the bounds, which ``histogram_quantile`` drops;
- KV-cache usage as the highest usage of the arm's pods at each step (``max(g{arm})[window:step]``,
  a series, since the judge asks how long it stayed high), and running/waiting as the sum of the
  pods' means over every sample Prometheus holds (``sum(avg_over_time(g{arm}[window]))``).

Where PromQL differs from direct scraping: ``increase`` extrapolates from the first and last sample
to the window's edges (by at most about one scrape interval at each end), a pod counts from its
first sample rather than from zero, and every series of a pod shares the extrapolation, so ratios
of increases match direct scraping within the noise of the scrape times.

What cannot be trusted is inconclusive, with a reason, exactly as with direct scraping: a query
that fails, a family with no series, NaN, a counter reset or a changed process start time within
the window (a restart: PromQL's increase is a lower bound then), and a pod whose scrape at either
edge of the window failed (``up``), or that was first scraped inside it though it started before;
a failed scrape between the edges costs nothing, as with direct scraping (the increase spans it,
and Prometheus keeps no part of a scrape it could not parse). Pure: queries are built here and
their answers read here; `specpilot.fetch.prometheus` does the HTTP.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from specpilot.analysis.window import ArmEngine
from specpilot.api.spec import PrometheusSource
from specpilot.metrics import engine_window
from specpilot.metrics.quantile import bucket_quantile
from specpilot.wire.names import Arm, arm_name


@dataclass(frozen=True, slots=True)
class Matcher:
    """One label matcher of a series selector: ``name="value"`` or ``name=~"regex"``."""

    name: str
    value: str
    regex: bool = False

    def __str__(self) -> str:
        return f'{self.name}{"=~" if self.regex else "="}"{_quoted(self.value)}"'


def arm_matchers(source: PrometheusSource, *, namespace: str, pilot: str, arm: Arm) -> tuple[Matcher, ...] | None:
    """The matchers that pick out one arm's engine series: the source's common labels, then the arm's;
    None for an arm the source's labels do not name."""
    common = tuple(Matcher(name, value) for name, value in sorted(source.labels.items()))
    if source.arms is not None:
        labels = source.arms.of(arm.value)
        if labels is None:
            return None
        return common + tuple(Matcher(name, value) for name, value in sorted(labels.items()))
    # A Deployment's pods are `<deployment>-<pod-template-hash>-<suffix>`; anchored, as PromQL anchors
    # every regex, so one pilot's arm never matches another pilot whose name extends it.
    pods = f"{arm_name(pilot, arm)}-[a-z0-9]+-[a-z0-9]+"
    return (*common, Matcher(source.namespace_label, namespace), Matcher(source.pod_label, pods, regex=True))


def selector(matchers: Iterable[Matcher], name: str | None = None) -> str:
    """``name{matchers}``, or ``{matchers}`` alone."""
    return f"{name or ''}{{{','.join(str(m) for m in matchers)}}}"


class Figure(StrEnum):
    """What one query answers."""

    GENERATED = "generated"
    DECODE = "decode"
    FINISHED = "finished"
    PREEMPTIONS = "preemptions"
    INTER_TOKEN_LATENCY = "interTokenLatency"
    DRAFTS = "drafts"
    DRAFT_TOKENS = "draftTokens"
    ACCEPTED = "accepted"
    ACCEPTED_PER_POSITION = "acceptedPerPosition"
    KV_USAGE = "kvUsage"
    RUNNING = "running"
    WAITING = "waiting"
    SCRAPED = "scraped"  # the pods Prometheus tried to scrape within the window
    UP = "up"  # `up` of each pod at the window's end
    UP_AT_START = "upAtStart"  # `up` of each pod at the window's start
    STARTED = "started"  # each pod's process start time, Unix seconds
    RESETS = "resets"  # pods with a counter reset within the window
    RESTARTS = "restarts"  # changes of each pod's process start time within the window


_INCREASES = {
    Figure.GENERATED: engine_window.GENERATION_TOKENS,
    Figure.DECODE: engine_window.DECODE_SUM,
    Figure.FINISHED: engine_window.DECODE_COUNT,
    Figure.PREEMPTIONS: engine_window.PREEMPTIONS,
    Figure.DRAFTS: engine_window.DRAFTS,
    Figure.DRAFT_TOKENS: engine_window.DRAFT_TOKENS,
    Figure.ACCEPTED: engine_window.ACCEPTED,
}
_SPECULATIVE = (Figure.DRAFTS, Figure.DRAFT_TOKENS, Figure.ACCEPTED, Figure.ACCEPTED_PER_POSITION)
_RESET_COUNTERS = (
    engine_window.GENERATION_TOKENS,
    engine_window.DECODE_SUM,
    engine_window.DECODE_COUNT,
    engine_window.PREEMPTIONS,
    engine_window.ITL_BUCKETS,
    engine_window.DRAFTS,
    engine_window.DRAFT_TOKENS,
    engine_window.ACCEPTED,
    engine_window.ACCEPTED_PER_POS,
)
# The series each figure reads, for a reason that names what is missing.
_SOURCE = {
    **_INCREASES,
    Figure.INTER_TOKEN_LATENCY: engine_window.ITL_BUCKETS,
    Figure.ACCEPTED_PER_POSITION: engine_window.ACCEPTED_PER_POS,
    Figure.KV_USAGE: engine_window.KV_USAGE,
    Figure.RUNNING: engine_window.RUNNING,
    Figure.WAITING: engine_window.WAITING,
}


def engine_queries(
    matchers: Sequence[Matcher], *, window: timedelta, step: timedelta, pod_label: str
) -> dict[Figure, str]:
    """Every query of one arm's window, by figure; evaluate each at the window's end."""
    w, st = _duration(window), _duration(step)
    pods = f"by ({pod_label})"

    def of(name: str) -> str:
        return selector(matchers, name)

    queries = {figure: f"sum(increase({of(name)}[{w}]))" for figure, name in _INCREASES.items()}
    return {
        **queries,
        Figure.INTER_TOKEN_LATENCY: f"sum by (le) (increase({of(engine_window.ITL_BUCKETS)}[{w}]))",
        Figure.ACCEPTED_PER_POSITION: f"sum by (position) (increase({of(engine_window.ACCEPTED_PER_POS)}[{w}]))",
        Figure.KV_USAGE: f"max({of(engine_window.KV_USAGE)})[{w}:{st}]",
        Figure.RUNNING: f"sum(avg_over_time({of(engine_window.RUNNING)}[{w}]))",
        Figure.WAITING: f"sum(avg_over_time({of(engine_window.WAITING)}[{w}]))",
        Figure.SCRAPED: f"max {pods} (max_over_time({of('up')}[{w}]))",
        Figure.UP: f"min {pods} ({of('up')})",
        Figure.UP_AT_START: f"min {pods} ({of('up')} offset {w})",
        Figure.STARTED: f"max {pods} ({of(engine_window.PROCESS_START)})",
        # resets() drops the metric name, so families are counted apart and joined: only pods with a reset remain.
        Figure.RESETS: " or ".join(f"(sum {pods} (resets({of(name)}[{w}])) > 0)" for name in _RESET_COUNTERS),
        Figure.RESTARTS: f"max {pods} (changes({of(engine_window.PROCESS_START)}[{w}]))",
    }


@dataclass(frozen=True, slots=True)
class Series:
    """One series of a query's answer: its labels and its (Unix seconds, value) points (one for a vector)."""

    labels: Mapping[str, str]
    points: tuple[tuple[float, float], ...]

    @property
    def value(self) -> float:
        return self.points[-1][1]


@dataclass(frozen=True, slots=True)
class QueryFailure:
    """A query that produced no answer: unreachable, refused, timed out, not JSON, an error status."""

    reason: str


Answer = tuple[Series, ...] | QueryFailure


def parse_answer(body: Any) -> Answer:
    """An ``/api/v1/query`` response body (decoded JSON): its vector or matrix, or why there is none."""
    if not isinstance(body, dict):
        return QueryFailure("not a Prometheus API response")
    if body.get("status") != "success":
        return QueryFailure(f"{body.get('errorType', 'error')}: {body.get('error', 'no error message')}")
    data = body.get("data")
    if not isinstance(data, dict) or not isinstance(data.get("result"), list):
        return QueryFailure("a response without data.result")
    kind = data.get("resultType")
    if kind not in ("vector", "matrix"):
        return QueryFailure(f"a {kind} result where a vector or matrix was expected")
    try:
        return tuple(_series(item, matrix=kind == "matrix") for item in data["result"])
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        return QueryFailure(f"a malformed {kind} ({exc.__class__.__name__}: {exc})")


def _series(item: Mapping[str, Any], *, matrix: bool) -> Series:
    labels = item["metric"]
    if not isinstance(labels, dict):
        raise TypeError("metric is not an object")
    raw = item["values"] if matrix else [item["value"]]
    return Series(
        labels={str(k): str(v) for k, v in labels.items()},
        points=tuple((float(at), float(value)) for at, value in raw),  # values are strings: "NaN", "+Inf"
    )


def arm_engine(
    answers: Mapping[Figure, Answer], *, start: datetime, quantile: float, speculative: bool, pod_label: str, arm: str
) -> ArmEngine:
    """The arm's figures over the window from `start` from the answers to `engine_queries`; `quantile` is
    the inter-token-latency quantile; `speculative` requires the spec-decode ones."""
    reasons: list[str] = []
    failed = {figure: a.reason for figure, a in answers.items() if isinstance(a, QueryFailure)}
    if failed:
        figure, reason = next(iter(failed.items()))
        more = f" (and {len(failed) - 1} more queries)" if len(failed) > 1 else ""
        return ArmEngine(inconclusive=f"Prometheus query for {arm} {figure} failed: {reason}{more}")
    series = {figure: a for figure, a in answers.items() if not isinstance(a, QueryFailure)}

    def pod(item: Series) -> str:
        return item.labels.get(pod_label, f"(series without a {pod_label} label)")

    scraped = series.get(Figure.SCRAPED, ())
    if not scraped:
        return ArmEngine(
            inconclusive=f"Prometheus holds no up series of the {arm} arm within the window "
            "(are its pods scraped, and are the arm's labels target labels?)"
        )
    reasons.extend(_coverage(series, pods=sorted(pod(item) for item in scraped), pod=pod, start=start))
    restarted = {pod(item) for item in series.get(Figure.RESTARTS, ()) if item.value > 0}
    reasons.extend(f"{name}: restarted within the window (process start time changed)" for name in sorted(restarted))
    for item in sorted(series.get(Figure.RESETS, ()), key=pod):
        if item.value > 0 and pod(item) not in restarted:
            reasons.append(f"{pod(item)}: counters went down within the window (reset by a restart)")
    required = [f for f in Figure if f in _SOURCE and (speculative or f not in _SPECULATIVE)]
    missing = [_SOURCE[f] for f in required if not series.get(f)]
    if missing:
        reasons.append(f"Prometheus holds no {', '.join(missing)} of the {arm} arm")
    values = {f: _single(series.get(f, ())) for f in _INCREASES}
    nan = [_SOURCE[f] for f, v in values.items() if v is not None and math.isnan(v)]
    grouped = (Figure.INTER_TOKEN_LATENCY, Figure.RUNNING, Figure.WAITING)  # every series of the answer
    nan += [_SOURCE[f] for f in grouped if any(math.isnan(i.value) for i in series.get(f, ()))]
    if nan:
        reasons.append(f"NaN in {', '.join(nan)} of the {arm} arm")

    def amount(figure: Figure) -> float:
        value = values[figure]
        return value if value is not None and not math.isnan(value) else 0.0

    generated, decode, finished = amount(Figure.GENERATED), amount(Figure.DECODE), amount(Figure.FINISHED)
    drafts, draft_tokens, accepted = amount(Figure.DRAFTS), amount(Figure.DRAFT_TOKENS), amount(Figure.ACCEPTED)
    itl = bucket_quantile(quantile, _buckets(series.get(Figure.INTER_TOKEN_LATENCY, ())))
    running, waiting = (_single(series.get(f, ())) for f in (Figure.RUNNING, Figure.WAITING))
    return ArmEngine(
        time_per_committed_token=decode / (generated - finished) if generated - finished > 0 else None,
        acceptance_rate=accepted / draft_tokens if draft_tokens > 0 else None,
        acceptance_length=1 + accepted / drafts if drafts > 0 else None,
        per_position_acceptance=_per_position(series.get(Figure.ACCEPTED_PER_POSITION, ()), drafts),
        kv_usage=_kv(series.get(Figure.KV_USAGE, ())),
        inter_token_latency=itl,
        preemptions=round(amount(Figure.PREEMPTIONS)),
        running=running if running is not None and not math.isnan(running) else None,
        waiting=waiting if waiting is not None and not math.isnan(waiting) else None,
        inconclusive=engine_window.summarize_reasons(reasons),
    )


def _coverage(
    series: Mapping[Figure, tuple[Series, ...]], *, pods: Sequence[str], pod: Callable[[Series], str], start: datetime
) -> list[str]:
    """Why a pod's increases do not span the window, as with direct scraping: its scrape at the end failed
    (or it is gone), or its scrape at the start failed, or it was not scraped by then though its process
    had started. A failed scrape between the edges costs nothing: the increase spans it."""
    at_end, at_start, started = (
        {pod(item): item.value for item in series.get(figure, ())}
        for figure in (Figure.UP, Figure.UP_AT_START, Figure.STARTED)
    )
    reasons = []
    for name in pods:
        if not at_end.get(name, 0.0) >= 1:
            reasons.append(f"{name}: no successful scrape at the window's end (its last scrape failed, or it is gone)")
        elif name in at_start and not at_start[name] >= 1:
            reasons.append(f"{name}: its scrape at the window's start failed")
        elif name not in at_start and not started.get(name, -math.inf) >= start.timestamp():
            how = "its start time is unknown" if name not in started else "it started before the window"
            reasons.append(f"{name}: not scraped at the window's start, and {how}")
    return reasons


def _single(items: Sequence[Series]) -> float | None:
    """The value of an aggregation without grouping (one series, or none when nothing matched)."""
    return items[0].value if items else None


def _buckets(items: Sequence[Series]) -> list[tuple[float, float]]:
    """(upper bound, cumulative count) of each bucket series; one without a numeric ``le`` is left out,
    as ``histogram_quantile`` leaves it out."""
    buckets = []
    for item in items:
        try:
            bound = float(item.labels.get("le", "NaN"))
        except ValueError:
            continue
        if not math.isnan(bound):
            buckets.append((bound, item.value))
    return buckets


def _per_position(items: Sequence[Series], drafts: float) -> tuple[float, ...]:
    if drafts <= 0:
        return ()
    by_position = {
        int(item.labels["position"]): item.value for item in items if item.labels.get("position", "").isdigit()
    }
    return tuple(by_position[i] / drafts for i in sorted(by_position))


def _kv(items: Sequence[Series]) -> tuple[tuple[datetime, float], ...]:
    """The highest usage at each step; a step with NaN has no point (as a scrape cycle with NaN has none)."""
    if not items:
        return ()
    return tuple((datetime.fromtimestamp(at, UTC), v) for at, v in items[0].points if not math.isnan(v))


def _duration(span: timedelta) -> str:
    """A PromQL duration: whole seconds where they are, else milliseconds."""
    ms = round(span.total_seconds() * 1000)
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def _quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
