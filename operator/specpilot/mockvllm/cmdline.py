"""The `vllm serve` command line as argparse reads it: the flags the mock accepts, their value types,
and the error a command line vLLM would refuse raises."""

from __future__ import annotations

import argparse
import functools
import json
import math
import re
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

DEFAULT_MODEL = "Qwen/Qwen3-0.6B"
PROG = "specpilot mock-vllm"


class ConfigError(ValueError):
    """A command line vLLM would refuse at start-up."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ConfigError(message)


def parse_model_len(text: str) -> int:
    """`--max-model-len`: an integer, `1k` (1000), `1K` (1024), `25.6k`; -1 or `auto` give -1."""
    text = text.strip()
    if text.lower() == "auto" or text == "-1":
        return -1
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgKMG]?)", text)
    if not match:
        raise argparse.ArgumentTypeError(f"invalid model length {text!r}")
    number, suffix = match.groups()
    power = "kmg".index(suffix.lower()) + 1 if suffix else 0
    value = float(number) * (1024 if suffix.isupper() else 1000) ** power
    if value < 1 or value != int(value):
        raise argparse.ArgumentTypeError(f"invalid model length {text!r}")
    return int(value)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _float(text: str, *, zero: bool) -> float:
    """A finite number above 0 (or 0 and above, with `zero`), for argparse."""
    what = "a number of 0 or more" if zero else "a positive number"
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if math.isinf(value) or not (value >= 0 if zero else value > 0):
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return value


_positive_float = functools.partial(_float, zero=False)
_non_negative_float = functools.partial(_float, zero=True)


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc.msg} at position {exc.pos}): {text}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """`vllm serve`'s parser as the mock reads it: vLLM's flags, then the mock's own."""
    p = _Parser(
        prog=PROG, description="CPU mock of `vllm serve` (vLLM 0.33 OpenAI-compatible server).", allow_abbrev=False
    )
    _add_server_flags(p.add_argument)
    _add_engine_flags(p.add_argument)
    _add_ignored_flags(p.add_argument)
    _add_mock_flags(p.add_argument_group("mock only").add_argument)
    return p


def _add_server_flags(add: Callable[..., Any]) -> None:
    """The model, where it listens and how it is parallelised."""
    add("model_tag", nargs="?", help="model to serve (overrides --model)")
    add("--model", default=DEFAULT_MODEL)
    add("--host", default=None)
    add("--port", type=int, default=8000)
    add("--served-model-name", nargs="+", default=None)
    add("--max-model-len", type=parse_model_len, default=None)
    add("--tensor-parallel-size", "-tp", type=_positive_int, default=1)
    add("--pipeline-parallel-size", "-pp", type=_positive_int, default=1)
    add("--data-parallel-size", "-dp", type=_positive_int, default=1)


def _add_engine_flags(add: Callable[..., Any]) -> None:
    """The scheduler, cache, speculation, metrics and API flags the mock models."""
    add("--gpu-memory-utilization", "--device-memory-utilization", type=float, default=0.92)
    add("--max-num-seqs", type=_positive_int, default=None)
    add("--max-num-batched-tokens", type=_positive_int, default=None)
    add("--block-size", type=_positive_int, default=None)
    add("--enable-chunked-prefill", action=argparse.BooleanOptionalAction, default=True)
    add("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True)
    add("--performance-mode", choices=["balanced", "latency", "throughput"], default="balanced")
    add("--speculative-config", "-sc", type=_json_object, default=None)
    add("--spec-method", default=None)
    add("--spec-model", default=None)
    add("--spec-tokens", type=_positive_int, default=None)
    add("--seed", type=int, default=0)
    add("--disable-log-stats", action="store_true")
    add("--custom-histogram-buckets", type=_json_object, default=None)
    add("--kv-cache-metrics", action="store_true")
    add("--kv-cache-metrics-sample", type=float, default=0.01)
    add("--enable-mfu-metrics", action="store_true")
    add("--api-server-count", "-asc", type=_positive_int, default=None)
    add("--max-num-queued-reqs", type=_positive_int, default=None)
    add("--max-num-queued-tokens", type=_positive_int, default=None)
    add("--enable-force-include-usage", action="store_true")
    add("--api-key", default=None)
    add("--tool-call-parser", default=None)
    add("--enable-auto-tool-choice", action="store_true")


def _add_ignored_flags(add: Callable[..., Any]) -> None:
    """Accepted because deployments pass them; they change nothing the mock models."""
    for flag in (
        "--revision",
        "--tokenizer",
        "--tokenizer-revision",
        "--tokenizer-mode",
        "--code-revision",
        "--dtype",
        "--quantization",
        "--kv-cache-dtype",
        "--download-dir",
        "--load-format",
        "--max-logprobs",
        "--uvicorn-log-level",
        "--generation-config",
        "--chat-template",
        "--show-hidden-metrics-for-version",
        "--distributed-executor-backend",
        "--sse-keep-alive-interval",
        "--root-path",
        "--hf-overrides",
    ):
        add(flag, default=None)
    for flag in (
        "--trust-remote-code",
        "--enforce-eager",
        "--disable-uvicorn-access-log",
        "--enable-log-requests",
        "--disable-log-requests",
        "--enable-request-id-headers",
    ):
        add(flag, action="store_true")


def _add_mock_flags(add: Callable[..., Any]) -> None:
    """The mock's own flags."""
    add(
        "--profile",
        default=None,
        help="profile YAML, or a calibrated profile's name (else env SPECPILOT_MOCK_PROFILE)",
    )
    add(
        "--time-scale",
        type=_positive_float,
        default=1.0,
        help="wall seconds per model second: 0.1 runs ten times faster (default 1)",
    )
    add("--admin-port", type=int, default=None, help="fault-injection endpoint port (off by default)")
    add(
        "--model-load-seconds",
        type=_non_negative_float,
        default=0.0,
        help="model seconds spent loading weights before the server listens, as a restart costs (default 0)",
    )


def normalise(argv: Sequence[str]) -> list[str]:
    """Accept `--max_model_len` for `--max-model-len`, as vLLM's parser does."""
    out = []
    for arg in argv:
        name, eq, value = arg.partition("=")
        out.append(name.replace("_", "-") + eq + value if arg.startswith("--") else arg)
    return out
