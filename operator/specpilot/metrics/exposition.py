"""Prometheus text exposition, parsed only for the families the operator reads.

prometheus-client's full parser spends ~26 ms of CPU on one vLLM exposition (600 lines, mostly
histograms nobody here reads), and the operator scrapes every engine pod every few seconds. So
each line's prefix is checked against the wanted families before anything is split, and only
matching lines are parsed. A wanted line is parsed strictly: label values may hold escaped
quotes, backslashes, newlines and commas; values may be NaN or ±Inf.

A truncated or garbage exposition must not read as zeros. A last line without its newline, a
wanted histogram series without its ``+Inf`` bucket, ``_sum`` or ``_count``, a wanted sample line
that does not parse, a duplicated series, or a body that is not UTF-8 each land in
`Exposition.problems`; nothing here raises on bad input.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

# A series' labels, sorted by name (prometheus-client and the Go client render them sorted).
Labels = tuple[tuple[str, str], ...]

# Sample names a family's samples carry besides the family name itself. `_created` is left out:
# the process start time tells restarts apart, and multiprocess vLLM exposes neither.
_SUFFIXES = ("", "_total", "_bucket", "_sum", "_count")

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_QUOTED = r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"'
_PAIR = rf"[ \t]*[a-zA-Z_][a-zA-Z0-9_]*[ \t]*=[ \t]*{_QUOTED}[ \t]*"
_SAMPLE = re.compile(
    rf"({_NAME})(?:\{{((?:{_PAIR}(?:,{_PAIR})*,?)?[ \t]*)\}}[ \t]*|[ \t]+)(\S+)([ \t]+-?[0-9]+)?[ \t]*"
)
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"([^"\\\n]*(?:\\.[^"\\\n]*)*)"')
_LEADING_NAME = re.compile(_NAME)
_ESCAPE = re.compile(r"\\(.)")
_UNESCAPED = {"\\": "\\", '"': '"', "n": "\n"}

# What a sample line's text before its value parses to: the same series come back every scrape,
# so a line seen before costs one dict lookup instead of a regular expression. Bounded, and only
# ever filled from lines the full expression accepted.
_SERIES_CACHE_MAX = 65536


@dataclass(frozen=True, slots=True)
class _Series:
    name: str
    labels: Labels
    base: Labels | None = None  # a bucket's labels without `le`
    le: float = math.nan  # a bucket's upper bound (NaN: not a number)


_series_cache: dict[str, _Series] = {}


@dataclass(frozen=True, slots=True)
class Exposition:
    """The wanted families' samples by sample name, then by labels; and what was wrong with the text."""

    samples: Mapping[str, Mapping[Labels, float]] = field(default_factory=dict)
    problems: tuple[str, ...] = ()

    def series(self, name: str) -> Mapping[Labels, float]:
        """Every series of one sample name (``vllm:generation_tokens_total``); empty when absent."""
        return self.samples.get(name, {})


def parse_exposition(body: str | bytes, families: Iterable[str]) -> Exposition:
    """The samples of `families` in a text exposition (``body`` as served, or its gzip-decoded bytes).

    Families are named as prometheus-client names them: a counter without its ``_total``
    (``vllm:generation_tokens``), a histogram without ``_bucket``/``_sum``/``_count``, a gauge as is.
    """
    if isinstance(body, bytes):
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            return Exposition(problems=(f"not UTF-8 text ({exc.reason} at byte {exc.start})",))
    else:
        text = body
    if not text:
        return Exposition(problems=("empty exposition",))
    names, prefixes = _plan(tuple(families))
    problems: list[str] = []
    samples: dict[str, dict[Labels, float]] = {}
    bases: dict[str, dict[Labels, bool]] = {}  # bucket name -> histogram series -> has a +Inf bucket
    lines = text.split("\n")
    if lines[-1]:
        problems.append(f"truncated: the last line has no newline ({_clip(lines[-1])})")
    for number, line in enumerate(lines[:-1], 1):
        if not line.startswith(prefixes):  # most lines: one C-level check, nothing split
            continue
        head, _, value_text = line.rpartition(" ")
        series = _series_cache.get(head)
        value = _number(value_text) if series is not None else None
        if series is None or value is None:
            parsed = _parse_line(line)
            if parsed is None:
                leading = _LEADING_NAME.match(line)
                if leading is not None and leading.group() in names:
                    problems.append(f"line {number}: unparsable sample ({_clip(line)})")
                continue
            series, value_text = parsed
            value = _number(value_text)
            if value is None:
                if series.name in names:
                    problems.append(f"line {number}: unparsable value {value_text[:40]!r} of {series.name}")
                continue
        if series.name not in names:  # a longer name that shares the prefix (`..._created`, `..._by_reason`)
            continue
        by_labels = samples.setdefault(series.name, {})
        if series.labels in by_labels:
            problems.append(f"line {number}: duplicate series {series.name}{format_labels(series.labels)}")
        by_labels[series.labels] = value
        if series.base is not None:
            if math.isnan(series.le):
                problems.append(f"line {number}: bucket without a numeric le ({_clip(line)})")
            seen = bases.setdefault(series.name, {})
            seen[series.base] = seen.get(series.base, False) or series.le == math.inf
    for bucket_name, with_inf in bases.items():
        problems.extend(_histogram_problems(names[bucket_name], with_inf, samples))
    return Exposition(samples=samples, problems=tuple(problems))


@functools.lru_cache(maxsize=64)
def _plan(families: tuple[str, ...]) -> tuple[dict[str, str], tuple[str, ...]]:
    """Sample name -> family, and the line prefixes worth a closer look."""
    wanted = tuple(dict.fromkeys(families))
    names = {family + suffix: family for family in wanted for suffix in _SUFFIXES}
    # A prefix that extends another adds nothing to the pre-check (the exact name is checked after).
    prefixes = tuple(f for f in wanted if not any(f != g and f.startswith(g) for g in wanted))
    return names, prefixes


def _parse_line(line: str) -> tuple[_Series, str] | None:
    """The series and value text of a sample line, or None if it is no sample line."""
    match = _SAMPLE.fullmatch(line)
    if match is None:
        return None
    name, label_text, value_text, timestamp = match.groups()
    labels = _labels(label_text) if label_text else ()
    series = _Series(name, labels)
    if name.endswith("_bucket"):
        le = label(labels, "le")
        bound = _number(le) if le is not None else None
        series = _Series(name, labels, without(labels, "le"), math.nan if bound is None else bound)
    head = line[: -len(value_text) - 1]
    if timestamp is None and line.endswith(" " + value_text) and head not in _series_cache:
        if len(_series_cache) >= _SERIES_CACHE_MAX:
            _series_cache.clear()
        _series_cache[head] = series
    return series, value_text


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def format_labels(labels: Labels) -> str:
    """``{a="1",b="2"}`` as in the exposition (for messages); empty for no labels."""
    if not labels:
        return ""
    pairs = ",".join(f'{name}="{_escape(value)}"' for name, value in labels)
    return f"{{{pairs}}}"


def without(labels: Labels, name: str) -> Labels:
    """The labels less one (``le`` of a bucket: the labels of its histogram series)."""
    return tuple(pair for pair in labels if pair[0] != name)


def label(labels: Labels, name: str) -> str | None:
    """One label's value."""
    for key, value in labels:
        if key == name:
            return value
    return None


def _labels(text: str) -> Labels:
    pairs = _LABEL.findall(text)
    if "\\" in text:
        pairs = [(name, _ESCAPE.sub(_unescape, value)) for name, value in pairs]
    return tuple(sorted(pairs))


def _unescape(match: re.Match[str]) -> str:
    char = match.group(1)
    return _UNESCAPED.get(char, "\\" + char)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _histogram_problems(
    family: str, with_inf: Mapping[Labels, bool], samples: Mapping[str, Mapping[Labels, float]]
) -> list[str]:
    """Each series of a histogram needs a +Inf bucket, a _sum and a _count (a cut exposition lacks them)."""
    sums = samples.get(family + "_sum", {})
    counts = samples.get(family + "_count", {})
    problems = []
    for base in {**with_inf, **dict.fromkeys(sums, False), **dict.fromkeys(counts, False)}:
        missing = [
            part
            for part, present in (
                ("+Inf bucket", with_inf.get(base, False)),
                ("_sum", base in sums),
                ("_count", base in counts),
            )
            if not present
        ]
        if missing:
            problems.append(f"histogram {family}{format_labels(base)} has no {' or '.join(missing)} (truncated?)")
    return problems


def _clip(line: str) -> str:
    return line if len(line) <= 80 else line[:77] + "..."
