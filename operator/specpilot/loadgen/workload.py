"""What to send and when: length distributions, per-scope mixes, arrival processes and traces.

Everything here is pure and seeded: a plan is an iterator of `PlannedRequest`s with send times
in seconds from the start of the run, so a run can be reproduced and tested without a network.

A mix (YAML or JSON) lists scopes with a weight, input/output length distributions and an
optional deadline::

    scopes:
      - {name: code, weight: 3, input_tokens: {dist: lognormal, mean: 400, sigma: 0.6},
         output_tokens: {dist: uniform, min: 50, max: 300}, deadline_s: 20}
      - {name: chat, weight: 1, input_tokens: 120, output_tokens: {dist: exponential, mean: 150}}

A length is an integer (constant) or `{dist: constant|uniform|normal|lognormal|exponential|choice,
...}`, optionally bounded by `min`/`max`; samples are rounded and at least 1.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

DEFAULT_SCOPE = "default"


class WorkloadError(ValueError):
    """A mix, distribution or trace that cannot be used; the message says where."""


@dataclass(frozen=True)
class Length:
    """A distribution of token counts."""

    dist: str
    params: tuple[float, ...]
    low: int = 1
    high: int | None = None
    weights: tuple[float, ...] = ()

    def sample(self, rng: random.Random) -> int:
        p = self.params
        if self.dist == "constant":
            value = p[0]
        elif self.dist == "uniform":
            value = rng.uniform(p[0], p[1])
        elif self.dist == "normal":
            value = rng.gauss(p[0], p[1])
        elif self.dist == "lognormal":  # params: mean of the distribution, sigma of the log
            value = rng.lognormvariate(math.log(p[0]) - p[1] ** 2 / 2, p[1])
        elif self.dist == "exponential":
            value = rng.expovariate(1 / p[0])
        else:  # choice
            value = rng.choices(p, weights=self.weights or None)[0]
        bounded = max(self.low, round(value))
        return bounded if self.high is None else min(self.high, bounded)

    @property
    def mean(self) -> float:
        """The unbounded mean, for planning and reports."""
        p = self.params
        if self.dist == "uniform":
            return (p[0] + p[1]) / 2
        if self.dist == "choice":
            weights = self.weights or (1.0,) * len(p)
            return sum(v * w for v, w in zip(p, weights, strict=True)) / sum(weights)
        return p[0]


_DIST_PARAMS = {
    "constant": ("value",),
    "uniform": ("min", "max"),
    "normal": ("mean", "std"),
    "lognormal": ("mean", "sigma"),
    "exponential": ("mean",),
}


def parse_length(spec: Any, where: str) -> Length:
    """Parse an integer or a `{dist: ...}` mapping."""
    if isinstance(spec, int) and not isinstance(spec, bool):
        if spec < 1:
            raise WorkloadError(f"{where}: a length must be at least 1, got {spec}")
        return Length("constant", (float(spec),))
    if not isinstance(spec, Mapping):
        raise WorkloadError(f"{where}: expected an integer or a mapping with 'dist', got {spec!r}")
    dist = spec.get("dist")
    bounds: dict[str, int | None] = {"low": 1, "high": None}
    for key, field in (("min", "low"), ("max", "high")):
        if key in spec and dist != "uniform":
            bounds[field] = _positive(spec[key], f"{where}.{key}", integer=True)
    if dist == "choice":
        values = spec.get("values")
        weights = spec.get("weights", ())
        if not isinstance(values, list) or not values or not isinstance(weights, list | tuple):
            raise WorkloadError(f"{where}: 'choice' needs a non-empty 'values' list (and optional 'weights')")
        if weights and len(weights) != len(values):
            raise WorkloadError(f"{where}: 'weights' must match 'values' in length")
        extra = set(spec) - {"dist", "values", "weights", "min", "max"}
        if extra:
            raise WorkloadError(f"{where}: unknown field(s) {', '.join(sorted(extra))}")
        return Length(
            "choice",
            tuple(_positive(v, f"{where}.values", integer=True) for v in values),
            weights=tuple(_positive(w, f"{where}.weights") for w in weights),
            low=bounds["low"] or 1,
            high=bounds["high"],
        )
    names = _DIST_PARAMS.get(str(dist))
    if names is None:
        kinds = ", ".join([*_DIST_PARAMS, "choice"])
        raise WorkloadError(f"{where}: 'dist' must be one of {kinds}, got {dist!r}")
    allowed = {"dist", *names} | ({"min", "max"} if dist != "uniform" else set())
    extra = set(spec) - allowed
    if extra:
        raise WorkloadError(f"{where}: unknown field(s) {', '.join(sorted(extra))}")
    missing = [n for n in names if n not in spec]
    if missing:
        raise WorkloadError(f"{where}: {dist} needs {', '.join(missing)}")
    params = tuple(_positive(spec[n], f"{where}.{n}", allow_zero=n in ("std", "sigma")) for n in names)
    if dist == "uniform":
        if params[0] > params[1]:
            raise WorkloadError(f"{where}: uniform needs min <= max")
        return Length("uniform", params, low=math.ceil(params[0]), high=math.floor(params[1]))
    return Length(str(dist), params, low=bounds["low"] or 1, high=bounds["high"])


def _positive(value: Any, where: str, *, integer: bool = False, allow_zero: bool = False) -> Any:
    ok_type = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, ok_type) or value < 0 or (value == 0 and not allow_zero):
        kind = "an integer" if integer else "a number"
        raise WorkloadError(f"{where}: expected {kind} {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    return value if integer else float(value)


@dataclass(frozen=True)
class ScopeMix:
    """One task group of the workload."""

    name: str
    weight: float
    input_tokens: Length
    output_tokens: Length
    deadline_s: float | None = None


DEFAULT_MIX = (ScopeMix(DEFAULT_SCOPE, 1.0, Length("constant", (128.0,)), Length("constant", (128.0,))),)


def parse_mix(data: Any) -> tuple[ScopeMix, ...]:
    """Validate a mix: `{scopes: [...]}` or the list itself."""
    scopes = data.get("scopes") if isinstance(data, Mapping) else data
    if not isinstance(scopes, list) or not scopes:
        raise WorkloadError("a mix needs a non-empty 'scopes' list")
    out = []
    for index, item in enumerate(scopes):
        where = f"scopes[{index}]"
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str) or not item["name"]:
            raise WorkloadError(f"{where}: needs a 'name'")
        extra = set(item) - {"name", "weight", "input_tokens", "output_tokens", "deadline_s"}
        if extra:
            raise WorkloadError(f"{where}: unknown field(s) {', '.join(sorted(extra))}")
        deadline = item.get("deadline_s")
        out.append(
            ScopeMix(
                name=item["name"],
                weight=_positive(item.get("weight", 1.0), f"{where}.weight"),
                input_tokens=parse_length(item.get("input_tokens", 128), f"{where}.input_tokens"),
                output_tokens=parse_length(item.get("output_tokens", 128), f"{where}.output_tokens"),
                deadline_s=None if deadline is None else _positive(deadline, f"{where}.deadline_s"),
            )
        )
    if len({s.name for s in out}) != len(out):
        raise WorkloadError("scope names in a mix must be unique")
    return tuple(out)


def load_mix(source: str) -> tuple[ScopeMix, ...]:
    """A mix from inline JSON/YAML (several lines, or one starting with `{` or `[`, as from a
    ConfigMap key in a Job's environment), else from the file `source` names."""
    inline = "\n" in source.strip() or source.lstrip().startswith(("{", "["))
    try:
        text = source if inline else Path(source).read_text()
        return parse_mix(yaml.safe_load(text))
    except OSError as exc:
        raise WorkloadError(f"mix file {source!r}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise WorkloadError(f"mix is not valid YAML/JSON: {exc}") from None


# -- arrivals ------------------------------------------------------------------------------------


def poisson_arrivals(rate: float, rng: random.Random) -> Iterator[float]:
    """Send times of a Poisson process with `rate` requests per second."""
    t = 0.0
    while True:
        t += rng.expovariate(rate)
        yield t


def constant_arrivals(rate: float) -> Iterator[float]:
    """One request every 1/rate seconds, starting at 0."""
    index = 0
    while True:
        yield index / rate
        index += 1


def burst_arrivals(size: int, interval: float, spread: float = 0.0) -> Iterator[float]:
    """`size` requests every `interval` seconds, spread evenly over `spread` seconds."""
    burst = 0
    while True:
        for i in range(size):
            yield burst * interval + (spread * i / size if size else 0.0)
        burst += 1


@dataclass(frozen=True)
class PlannedRequest:
    """One request of the plan: when to send it (seconds from start) and what it asks for."""

    at: float
    scope: str
    input_tokens: int
    output_tokens: int
    deadline_s: float | None = None
    prompt: str | None = None


def plan(arrivals: Iterable[float], mix: Sequence[ScopeMix], rng: random.Random) -> Iterator[PlannedRequest]:
    """Attach a scope (by weight) and drawn lengths to each send time."""
    weights = [s.weight for s in mix]
    for at in arrivals:
        scope = rng.choices(mix, weights=weights)[0]
        yield PlannedRequest(
            at=at,
            scope=scope.name,
            input_tokens=scope.input_tokens.sample(rng),
            output_tokens=scope.output_tokens.sample(rng),
            deadline_s=scope.deadline_s,
        )


def read_trace(path: str, mix: Sequence[ScopeMix], rng: random.Random) -> list[PlannedRequest]:
    """A JSONL trace: one object per line with `timestamp` (seconds; made relative to the first
    line) and optional `scope`, `input_tokens`, `output_tokens`, `deadline_s`, `prompt`. Missing
    lengths and deadlines come from the scope's entry in the mix (or the first scope)."""
    by_name = {s.name: s for s in mix}
    rows: list[PlannedRequest] = []
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise WorkloadError(f"cannot read trace {path}: {exc.strerror}") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise WorkloadError(f"{path}:{number}: not JSON ({exc.msg})") from None
        stamp = row.get("timestamp") if isinstance(row, Mapping) else None
        if isinstance(stamp, bool) or not isinstance(stamp, int | float):
            raise WorkloadError(f"{path}:{number}: needs a numeric 'timestamp'")
        scope_name = row.get("scope", mix[0].name)
        scope = by_name.get(scope_name, mix[0])
        deadline = row.get("deadline_s", scope.deadline_s)
        prompt = row.get("prompt")
        rows.append(
            PlannedRequest(
                at=float(stamp),
                scope=str(scope_name),
                input_tokens=_trace_length(row, "input_tokens", scope.input_tokens, rng, f"{path}:{number}"),
                output_tokens=_trace_length(row, "output_tokens", scope.output_tokens, rng, f"{path}:{number}"),
                deadline_s=None if deadline is None else _positive(deadline, f"{path}:{number}: deadline_s"),
                prompt=prompt if isinstance(prompt, str) else None,
            )
        )
    if not rows:
        raise WorkloadError(f"trace {path} has no requests")
    rows.sort(key=lambda r: r.at)
    origin = rows[0].at
    return [replace(r, at=r.at - origin) for r in rows]


def _trace_length(row: Mapping[str, Any], key: str, fallback: Length, rng: random.Random, where: str) -> int:
    if key not in row:
        return fallback.sample(rng)
    return int(_positive(row[key], f"{where}: {key}", integer=True))
