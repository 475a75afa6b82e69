"""Per-request samples: what the router measures on every request, and the ``/samples`` page shape.

Engine metrics cannot tell which scope a token belonged to, and speed from successes alone hides
timeouts and rejections, so every request the router measures ends as one `RequestSample` with
its `RequestOutcome`. The router keeps the newest samples and serves them on its admin port as
``GET /samples?since=<seq>&limit=<n>``, one `SamplesPage` as JSON::

    {"epoch": "3f2a9c0d1e4b", "next": 42, "dropped": 0,
     "samples": [{"seq": 42, "at": 1796040000.123456, "scope": "code", "arm": "speculative",
                  "endpoint": "10.0.0.7:8000", "model": "m", "stream": true, "status": 200,
                  "outcome": "ok", "e2eSeconds": 1.9, "ttftSeconds": 0.21, "outputTokens": 64,
                  "promptTokens": 120, "tokensFromUsage": true, "decodeSeconds": 1.68, "tpotSeconds": 0.0267,
                  "deadlineMet": true, "fallback": null,
                  "chunkGaps": {"width": 1, "counts": {"103": 9, "104": 31, "105": 22}}}],
     "open": [{"at": 1796040001.5, "scope": "code", "arm": "control"}]}

``chunkGaps`` counts the gaps between a stream's chunks of output after the first in fine buckets
(`specpilot.wire.buckets.FineCounts`: each key the lowest of the `width` fine buckets it spans; keys
103 to 105 are 19.6 to 21.4 ms), widened until at most `CHUNK_GAP_KEYS` keys are left, so a stream
of thousands of chunks still makes a small sample. It is empty for requests that were not streamed,
and for samples of routers that did not record it.

``open`` lists the measured requests still in flight when the page was made (`OpenRequest`: when each
started, its scope and the arm it is on), so that a reader counts every request that arrived in a window,
finished or not, and reads an arm's offered load from its arrivals: a slow arm finishes fewer requests
in a window than it was sent. Routers that predate it send none (read as empty).

A reader passes the last ``seq`` it saw as ``since`` and the page's ``next`` the next time.
``epoch`` changes when the router restarts, which restarts ``seq`` at 1; ``dropped`` counts the
samples after the cursor that the bound pushed out before anyone read them. The operator parses
pages with `SamplesPage.from_json`, which refuses anything else with a `ValueError` naming the field.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

from specpilot.wire.buckets import FINE_BUCKETS, FineCounts
from specpilot.wire.names import Arm

CHUNK_GAP_KEYS = 32  # the most keys a sample's chunk gaps hold (a few hundred bytes)

_T = TypeVar("_T")
_E = TypeVar("_E", bound=StrEnum)


class Fallback(StrEnum):
    """Why a scope runs ordinary decoding although the table says otherwise."""

    TABLE_MISSING = "table_missing"
    TABLE_INVALID = "table_invalid"
    TABLE_STALE = "table_stale"
    SPECULATIVE_UNAVAILABLE = "speculative_unavailable"
    CONTROL_UNAVAILABLE = "control_unavailable"
    ALTERNATIVE_UNAVAILABLE = "alternative_unavailable"
    BASELINE_UNAVAILABLE = "baseline_unavailable"  # only where the baseline is not the ordinary arm


class RequestOutcome(StrEnum):
    """How a request ended, as the arm it went to is judged."""

    OK = "ok"
    TIMEOUT = "timeout"  # the router's request timeout ran out (the client got 504 or a cut stream)
    REJECTED = "rejected"  # upstream answered 429 or 503 (queue limits, overload)
    UPSTREAM_ERROR = "upstream_error"  # other 5xx, an error event mid-stream, a dropped connection
    CLIENT_ERROR = "client_error"  # upstream answered another 4xx: the request was at fault
    CLIENT_CANCEL = "client_cancel"  # the client went away first
    NO_ENDPOINT = "no_endpoint"  # no ready endpoint could take it (the client got 503)


# Outcomes that say nothing about whether the arm could have met the scope's deadline.
_NOT_ATTRIBUTABLE = frozenset({RequestOutcome.CLIENT_ERROR, RequestOutcome.CLIENT_CANCEL})


def outcome_for_status(status: int) -> RequestOutcome:
    """Outcome of an upstream response by its HTTP status alone."""
    if status in (429, 503):
        return RequestOutcome.REJECTED
    if status >= 500:
        return RequestOutcome.UPSTREAM_ERROR
    if status >= 400:
        return RequestOutcome.CLIENT_ERROR
    return RequestOutcome.OK


def deadline_met(outcome: RequestOutcome, e2e: float, deadline: float | None) -> bool | None:
    """Whether the scope's deadline was met: only an ok response in time meets it."""
    if deadline is None or outcome in _NOT_ATTRIBUTABLE:
        return None
    return outcome is RequestOutcome.OK and e2e <= deadline


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestSample:
    """One finished request. Times in seconds; `ttft`/`decode` only for streams that produced output."""

    seq: int
    at: float  # wall-clock start, Unix seconds
    scope: str
    arm: Arm
    endpoint: str  # HOST:PORT of the pod that answered; empty when none did
    model: str
    stream: bool
    status: int  # HTTP status the client got (0 when the client went away before one)
    outcome: RequestOutcome
    e2e: float
    ttft: float | None
    output_tokens: int | None
    prompt_tokens: int | None = None  # the engine's usage count of the prompt, when it gave one
    tokens_from_usage: bool  # output_tokens is the engine's usage count, not a count of content chunks
    decode: float | None  # first to last content chunk
    deadline_met: bool | None
    fallback: str | None  # why the request went to baseline although the table said otherwise
    # Gaps between a stream's chunks of output, after the first; empty when not streamed.
    chunk_gaps: FineCounts = field(default_factory=FineCounts)

    @property
    def tpot(self) -> float | None:
        """Time per output token after the first: decode / (output tokens - 1)."""
        if self.decode is None or self.output_tokens is None or self.output_tokens < 2:
            return None
        return self.decode / (self.output_tokens - 1)

    def to_json(self) -> dict[str, Any]:
        """The sample as ``/samples`` serves it (``at`` to the microsecond; ``tpotSeconds`` derived)."""
        return {
            "seq": self.seq,
            "at": round(self.at, 6),
            "scope": self.scope,
            "arm": self.arm.value,
            "endpoint": self.endpoint,
            "model": self.model,
            "stream": self.stream,
            "status": self.status,
            "outcome": self.outcome.value,
            "e2eSeconds": self.e2e,
            "ttftSeconds": self.ttft,
            "outputTokens": self.output_tokens,
            "promptTokens": self.prompt_tokens,
            "tokensFromUsage": self.tokens_from_usage,
            "decodeSeconds": self.decode,
            "tpotSeconds": self.tpot,
            "deadlineMet": self.deadline_met,
            "fallback": self.fallback,
            "chunkGaps": {
                "width": self.chunk_gaps.width,
                "counts": {str(k): n for k, n in self.chunk_gaps.counts.items()},
            },
        }

    @classmethod
    def from_json(cls, doc: object, *, where: str = "") -> RequestSample:
        """A sample from its JSON; ``tpotSeconds`` is derived, so it is not read back.

        Raises `ValueError` naming the field (prefixed with `where`) that is missing or wrong.
        """
        f = _Fields(doc, where)
        return cls(
            seq=f.integer("seq"),
            at=f.number("at"),
            scope=f.string("scope"),
            arm=f.choice("arm", Arm),
            endpoint=f.string("endpoint"),
            model=f.string("model"),
            stream=f.boolean("stream"),
            status=f.integer("status"),
            outcome=f.choice("outcome", RequestOutcome),
            e2e=f.number("e2eSeconds"),
            ttft=f.optional("ttftSeconds", f.number),
            output_tokens=f.optional("outputTokens", f.integer),
            prompt_tokens=f.optional("promptTokens", f.integer, absent_ok=True),
            tokens_from_usage=f.boolean("tokensFromUsage"),
            decode=f.optional("decodeSeconds", f.number),
            deadline_met=f.optional("deadlineMet", f.boolean),
            fallback=f.optional("fallback", f.string),
            chunk_gaps=f.optional("chunkGaps", f.fine_counts, absent_ok=True) or FineCounts(),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenRequest:
    """A measured request still in flight: when it started (Unix seconds), its scope, the arm it is on."""

    at: float
    scope: str
    arm: Arm

    def to_json(self) -> dict[str, Any]:
        return {"at": round(self.at, 6), "scope": self.scope, "arm": self.arm.value}

    @classmethod
    def from_json(cls, doc: object, *, where: str = "") -> OpenRequest:
        f = _Fields(doc, where)
        return cls(at=f.number("at"), scope=f.string("scope"), arm=f.choice("arm", Arm))


@dataclass(frozen=True, slots=True)
class SamplesPage:
    """Samples after a cursor, the cursor to read on from, how many were lost to the bound unread, and the
    requests in flight when the page was made."""

    epoch: str
    samples: tuple[RequestSample, ...]
    next_cursor: int
    dropped: int
    open: tuple[OpenRequest, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "next": self.next_cursor,
            "dropped": self.dropped,
            "samples": [sample.to_json() for sample in self.samples],
            "open": [request.to_json() for request in self.open],
        }

    @classmethod
    def from_json(cls, doc: object) -> SamplesPage:
        """A page from the JSON of ``/samples``; raises `ValueError` naming the field that is wrong."""
        f = _Fields(doc, "")
        raw = f.value("samples")
        if not isinstance(raw, list):
            raise ValueError(f"samples: expected a list, got {_kind(raw)}")
        in_flight = f.optional("open", f.value, absent_ok=True)
        in_flight = [] if in_flight is None else in_flight
        if not isinstance(in_flight, list):
            raise ValueError(f"open: expected a list, got {_kind(in_flight)}")
        return cls(
            epoch=f.string("epoch"),
            samples=tuple(RequestSample.from_json(item, where=f"samples[{i}].") for i, item in enumerate(raw)),
            next_cursor=f.integer("next"),
            dropped=f.integer("dropped"),
            open=tuple(OpenRequest.from_json(item, where=f"open[{i}].") for i, item in enumerate(in_flight)),
        )


class _Fields:
    """Typed reads of a JSON object's fields; every error names the field."""

    def __init__(self, doc: object, where: str) -> None:
        if not isinstance(doc, Mapping):
            raise ValueError(f"{where.rstrip('.') or 'document'}: expected a JSON object, got {_kind(doc)}")
        self._doc: Mapping[str, object] = doc
        self._where = where

    def value(self, key: str) -> object:
        if key not in self._doc:
            raise ValueError(f"{self._where}{key}: missing")
        return self._doc[key]

    def _wrong(self, key: str, want: str, got: object) -> ValueError:
        return ValueError(f"{self._where}{key}: expected {want}, got {_kind(got)}")

    def string(self, key: str) -> str:
        value = self.value(key)
        if not isinstance(value, str):
            raise self._wrong(key, "a string", value)
        return value

    def integer(self, key: str) -> int:
        value = self.value(key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._wrong(key, "an integer", value)
        return value

    def number(self, key: str) -> float:
        value = self.value(key)
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise self._wrong(key, "a finite number", value)
        return float(value)

    def boolean(self, key: str) -> bool:
        value = self.value(key)
        if not isinstance(value, bool):
            raise self._wrong(key, "true or false", value)
        return value

    def fine_counts(self, key: str) -> FineCounts:
        """Counts per fine bucket: ``{"width": w, "counts": {"<key>": n}}``, keys aligned to the width."""
        f = _Fields(self.value(key), f"{self._where}{key}.")
        width = f.integer("width")
        if width < 1 or width & (width - 1):
            raise ValueError(f"{f._where}width: expected a power of two, got {width}")
        raw = f.value("counts")
        if not isinstance(raw, Mapping):
            raise f._wrong("counts", "a JSON object", raw)
        counts = _Fields(raw, f"{f._where}counts.")
        out = {}
        for name in raw:
            index = int(name) if name.isascii() and name.isdigit() else -1
            if not 0 <= index < FINE_BUCKETS or index % width:
                raise ValueError(f"{counts._where}{name}: not a fine bucket at width {width}")
            out[index] = counts.integer(name)
            if out[index] < 1:
                raise counts._wrong(name, "a positive count", out[index])
        return FineCounts(out, width)

    def choice(self, key: str, kind: type[_E]) -> _E:
        value = self.string(key)
        try:
            return kind(value)
        except ValueError:
            known = ", ".join(member.value for member in kind)
            raise ValueError(f"{self._where}{key}: unknown value {value!r} (want one of {known})") from None

    def optional(self, key: str, read: Callable[[str], _T], *, absent_ok: bool = False) -> _T | None:
        """`read(key)`, or None where the field is null; the key must be there unless `absent_ok`
        (a field newer routers add, which an operator must still read from older ones)."""
        if absent_ok and key not in self._doc:
            return None
        return None if self.value(key) is None else read(key)


def _kind(value: object) -> str:
    return "null" if value is None else f"{type(value).__name__} {value!r}"[:80]
