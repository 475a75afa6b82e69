"""Faults the mock can inject, from its profile or at run time through the admin endpoint.

A fault is data (`FaultSpec`); `FaultBoard` holds the active ones on the engine's model clock
and answers the engine's and the API's questions ("what is alpha for this scope now?"). Times are
model seconds: a profile fault starts `start_s` after start-up, an admin fault after it is added.
"""

from __future__ import annotations

import enum
import itertools
import random
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any


class FaultError(ValueError):
    """A fault specification that cannot be applied."""


class FaultKind(enum.StrEnum):
    """What a fault does."""

    LATENCY = "latency"  # every step takes factor times longer, plus extra_s
    ACCEPTANCE = "acceptance"  # draft acceptance probability falls to alpha
    MEMORY = "memory"  # a fraction of the KV-cache blocks is held away
    ERRORS = "errors"  # a share of requests fails with `status`
    REJECTIONS = "rejections"  # a share of requests is refused with 429
    HANG = "hang"  # the engine stops stepping; requests stall
    CRASH = "crash"  # the server process exits with exit_code
    DIVERGENCE = "divergence"  # greedy output departs from the shared text after after_tokens
    REPETITION = "repetition"  # a share of free-text answers loops on its last words after after_tokens
    STALLS = "stalls"  # a share of requests is taken and never answered, until the client gives up
    SLOW_START = "slow_start"  # a share of requests waits extra_s before the engine takes it (TTFT tail)
    GARBLED_METRICS = "garbled_metrics"  # /metrics answers a cut, NaN-ridden exposition
    STOP_OVERRUN = "stop_overrun"  # a share of requests ignores its stop strings: the text runs past them
    TOOL_JSON = "tool_json"  # a share of tool calls has arguments that are not JSON
    STRUCTURED_INVALID = "structured_invalid"  # a share of structured answers does not validate
    CANCEL_LEAK = "cancel_leak"  # a share of dropped requests keeps its slot and KV blocks for good
    SWITCH_STALL = "switch_stall"  # a step whose k differs from the last step's takes factor times longer, plus extra_s


_COMMON = {"kind", "scope", "start_s", "duration_s"}
_KEYS: dict[FaultKind, set[str]] = {
    FaultKind.LATENCY: {"factor", "extra_s"},
    FaultKind.ACCEPTANCE: {"alpha"},
    FaultKind.MEMORY: {"fraction"},
    FaultKind.ERRORS: {"rate", "status"},
    FaultKind.REJECTIONS: {"rate"},
    FaultKind.HANG: set(),
    FaultKind.CRASH: {"exit_code"},
    FaultKind.DIVERGENCE: {"rate", "after_tokens"},
    FaultKind.REPETITION: {"rate", "after_tokens"},
    FaultKind.STALLS: {"rate"},
    FaultKind.SLOW_START: {"rate", "extra_s"},
    FaultKind.GARBLED_METRICS: set(),
    FaultKind.STOP_OVERRUN: {"rate"},
    FaultKind.TOOL_JSON: {"rate"},
    FaultKind.STRUCTURED_INVALID: {"rate"},
    FaultKind.CANCEL_LEAK: {"rate"},
    FaultKind.SWITCH_STALL: {"factor", "extra_s"},
}
# vLLM issue #49548 (open): with `num_speculative_tokens_per_batch_size` [[1,4,2],[5,512,0]] (MTP), 8
# concurrent streams of 180 tokens fell from 232 tok/s aggregate (static k = 2, 6.3 s) to 24-157 tok/s
# (40-60 s), 1.5-9.7x, while a single stream ran at the expected rate: the collapse comes with the batch
# crossing the schedule's switch. The mock's batch crosses it on about 1 step in 200 where it hovers
# there, so a switch_stall fault's default stretches a step that changes k 100 times: on the demo's
# profile at 3 requests/s (mean batch 3, the switch at 4) that makes time per committed token 2.1x, a
# stream's decode throughput falling inside the 1.5-9.7x (about 232 -> 110 tok/s).
SWITCH_STALL_FACTOR = 100.0
# Faults that strike single requests at a rate: `FaultBoard.strikes` draws them.
REQUEST_FAULTS = frozenset(
    {
        FaultKind.STALLS,
        FaultKind.STOP_OVERRUN,
        FaultKind.TOOL_JSON,
        FaultKind.STRUCTURED_INVALID,
        FaultKind.CANCEL_LEAK,
    }
)
_SCOPED = {
    FaultKind.ACCEPTANCE,
    FaultKind.ERRORS,
    FaultKind.REJECTIONS,
    FaultKind.DIVERGENCE,
    FaultKind.REPETITION,
    FaultKind.SLOW_START,
    *REQUEST_FAULTS,
}


@dataclass(frozen=True)
class FaultSpec:
    """One fault; fields other than the common ones apply to the kinds listed in `_KEYS`."""

    kind: FaultKind
    scope: str | None = None
    start_s: float = 0.0
    duration_s: float | None = None
    factor: float = 1.0
    extra_s: float = 0.0
    alpha: float = 0.0
    fraction: float = 0.0
    rate: float = 1.0
    status: int = 500
    exit_code: int = 1
    after_tokens: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The fields that matter for this kind, as JSON-ready data."""
        data = asdict(self)
        return {key: data[key] for key in sorted(_COMMON | _KEYS[self.kind])}


def _number(data: Mapping[str, Any], key: str, default: float, low: float, high: float) -> float:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise FaultError(f"fault field {key!r} must be a number in [{low}, {high}], got {value!r}")
    return float(value)


def parse_fault(data: Any) -> FaultSpec:
    """Validate a fault given as a mapping (from YAML or JSON)."""
    if not isinstance(data, Mapping):
        raise FaultError(f"a fault must be a mapping, got {data!r}")
    try:
        kind = FaultKind(str(data.get("kind")))
    except ValueError:
        kinds = ", ".join(k.value for k in FaultKind)
        raise FaultError(f"fault 'kind' must be one of {kinds}; got {data.get('kind')!r}") from None
    unknown = set(data) - _COMMON - _KEYS[kind]
    if unknown:
        raise FaultError(f"unknown field(s) for a {kind} fault: {', '.join(sorted(unknown))}")
    scope = data.get("scope")
    if scope is not None and kind not in _SCOPED:
        raise FaultError(f"a {kind} fault acts on the whole engine and takes no scope")
    if scope is not None and not isinstance(scope, str):
        raise FaultError(f"fault 'scope' must be a string, got {scope!r}")
    duration = data.get("duration_s")
    inf = float("inf")
    return FaultSpec(
        kind=kind,
        scope=scope,
        start_s=_number(data, "start_s", 0.0, 0.0, inf),
        duration_s=None if duration is None else _number(data, "duration_s", 0.0, 0.0, inf),
        factor=_number(data, "factor", SWITCH_STALL_FACTOR if kind is FaultKind.SWITCH_STALL else 1.0, 0.0, inf),
        extra_s=_number(data, "extra_s", 0.0, 0.0, inf),
        alpha=_number(data, "alpha", 0.0, 0.0, 1.0),
        fraction=_number(data, "fraction", 0.0, 0.0, 1.0),
        rate=_number(data, "rate", 1.0, 0.0, 1.0),
        status=int(_number(data, "status", 500, 400, 599)),
        exit_code=int(_number(data, "exit_code", 1, 0, 255)),
        after_tokens=int(_number(data, "after_tokens", 0, 0, inf)),
    )


@dataclass(frozen=True)
class ActiveFault:
    """A fault placed on the model clock."""

    id: str
    spec: FaultSpec
    start: float
    end: float

    def live(self, now: float) -> bool:
        return self.start <= now < self.end

    def applies(self, scope: str | None, now: float) -> bool:
        return self.live(now) and (self.spec.scope is None or self.spec.scope == scope)

    def to_dict(self) -> dict[str, Any]:
        end = None if self.end == float("inf") else self.end
        return {"id": self.id, "start": self.start, "end": end, **self.spec.to_dict()}


class FaultBoard:
    """The faults in force; every question takes the model time `now`."""

    def __init__(self, seed: int) -> None:
        self._faults: dict[str, ActiveFault] = {}
        self._ids = itertools.count(1)
        self._rng = random.Random(seed)

    def add(self, spec: FaultSpec, now: float) -> ActiveFault:
        start = now + spec.start_s
        end = float("inf") if spec.duration_s is None else start + spec.duration_s
        fault = ActiveFault(id=f"fault-{next(self._ids)}", spec=spec, start=start, end=end)
        self._faults[fault.id] = fault
        return fault

    def remove(self, fault_id: str) -> bool:
        return self._faults.pop(fault_id, None) is not None

    def clear(self) -> None:
        self._faults.clear()

    def listing(self) -> list[ActiveFault]:
        return list(self._faults.values())

    def _live(self, kind: FaultKind, now: float, scope: str | None = None) -> list[ActiveFault]:
        return [f for f in self._faults.values() if f.spec.kind is kind and f.applies(scope, now)]

    def stretch(self, duration: float, now: float) -> float:
        """A step's duration under the latency faults in force."""
        for fault in self._live(FaultKind.LATENCY, now):
            duration = duration * fault.spec.factor + fault.spec.extra_s
        return duration

    def switched(self, duration: float, now: float) -> float:
        """The duration of a step whose k differs from the previous step's, under the switch stalls in force."""
        for fault in self._live(FaultKind.SWITCH_STALL, now):
            duration = duration * fault.spec.factor + fault.spec.extra_s
        return duration

    def alpha(self, scope: str, base: float, now: float) -> float:
        """Acceptance probability for `scope`: the lowest collapse in force, else `base`."""
        return min([base, *(f.spec.alpha for f in self._live(FaultKind.ACCEPTANCE, now, scope))])

    def held_fraction(self, now: float) -> float:
        """Share of KV-cache blocks held away by memory-pressure faults."""
        return min(1.0, sum(f.spec.fraction for f in self._live(FaultKind.MEMORY, now)))

    def hung(self, now: float) -> bool:
        return bool(self._live(FaultKind.HANG, now))

    def crash(self, now: float) -> FaultSpec | None:
        live = self._live(FaultKind.CRASH, now)
        return live[0].spec if live else None

    def refusal(self, scope: str, now: float) -> int | None:
        """HTTP status to refuse a new request with, drawn from the error and 429 rates."""
        for fault in self._live(FaultKind.REJECTIONS, now, scope):
            if self._rng.random() < fault.spec.rate:
                return 429
        for fault in self._live(FaultKind.ERRORS, now, scope):
            if self._rng.random() < fault.spec.rate:
                return fault.spec.status
        return None

    def strikes(self, kind: FaultKind, scope: str, now: float) -> bool:
        """Whether a request fault of `kind` (see REQUEST_FAULTS) strikes a request of `scope` now."""
        if kind not in REQUEST_FAULTS:
            raise ValueError(f"{kind} is not a per-request fault")
        return any(self._rng.random() < fault.spec.rate for fault in self._live(kind, now, scope))

    def start_delay(self, scope: str, now: float) -> float:
        """Model seconds a new request of `scope` waits before the engine takes it."""
        return sum(
            fault.spec.extra_s
            for fault in self._live(FaultKind.SLOW_START, now, scope)
            if self._rng.random() < fault.spec.rate
        )

    def garbled_metrics(self, now: float) -> bool:
        return bool(self._live(FaultKind.GARBLED_METRICS, now))

    def divergence(self, scope: str, now: float) -> int | None:
        """Output position from which a new request's text diverges, if a divergence hits it."""
        return self._position(FaultKind.DIVERGENCE, scope, now)

    def repetition(self, scope: str, now: float) -> int | None:
        """Output position from which a new request's text loops, if a repetition fault hits it."""
        return self._position(FaultKind.REPETITION, scope, now)

    def _position(self, kind: FaultKind, scope: str, now: float) -> int | None:
        for fault in self._live(kind, now, scope):
            if self._rng.random() < fault.spec.rate:
                return fault.spec.after_tokens
        return None
