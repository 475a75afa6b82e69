"""`specpilot loadgen`: replay arrivals against an OpenAI-compatible URL and print a JSON result.

    specpilot loadgen --url http://arm:8000 --arrivals poisson --rate 5 --duration 60 \\
        --mix mix.yaml --output result.json
    specpilot loadgen --url http://router:8080 --trace peak.jsonl --max-requests 2000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import aiohttp

from specpilot.loadgen.runner import RunLimits, run
from specpilot.loadgen.sender import Target
from specpilot.loadgen.workload import (
    DEFAULT_MIX,
    PlannedRequest,
    ScopeMix,
    WorkloadError,
    burst_arrivals,
    constant_arrivals,
    load_mix,
    plan,
    poisson_arrivals,
    read_trace,
)
from specpilot.wire.names import SCOPE_HEADER

PROG = "specpilot loadgen"


class UsageError(ValueError):
    """A command line that cannot run."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Open-loop load against an OpenAI-compatible server.")
    p.add_argument("--url", required=True, help="base URL of the server (with or without /v1)")
    p.add_argument("--model", help="model name (default: the first one /v1/models lists)")
    p.add_argument("--endpoint", choices=["chat", "completions"], default="chat")
    p.add_argument("--no-stream", dest="stream", action="store_false", help="non-streaming requests (no TTFT)")
    p.add_argument("--arrivals", choices=["poisson", "constant", "bursts", "trace"], default="poisson")
    p.add_argument("--rate", type=float, default=1.0, help="requests per second (poisson, constant)")
    p.add_argument("--burst-size", type=int, default=10)
    p.add_argument("--burst-interval", type=float, default=10.0, help="seconds between bursts")
    p.add_argument("--burst-spread", type=float, default=0.0, help="seconds over which a burst is spread")
    p.add_argument("--trace", help="JSONL trace with timestamps (implies --arrivals trace)")
    p.add_argument("--mix", help="scope mix: a YAML/JSON file or inline JSON")
    p.add_argument("--duration", type=float, default=60.0, help="seconds of arrivals")
    p.add_argument("--max-requests", type=int, default=None)
    p.add_argument("--max-in-flight", type=int, default=4096)
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per request")
    p.add_argument("--scope-header", default=SCOPE_HEADER)
    p.add_argument("--no-scope-tag", dest="scope_tag", action="store_false", help="do not tag prompts [scope:x]")
    p.add_argument(
        "--no-ignore-eos", dest="ignore_eos", action="store_false", help="for servers without vLLM's ignore_eos"
    )
    p.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY"), help="bearer token (env OPENAI_API_KEY)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="wall seconds per second of the server under test (a mock's --time-scale); "
        "durations in and out are then in its model seconds",
    )
    p.add_argument("--output", help="write the JSON result here instead of stdout")
    p.add_argument("--no-progress", dest="progress", action="store_false")
    return p


def _arrivals(args: argparse.Namespace, mix: Sequence[ScopeMix], rng: random.Random) -> Iterable[PlannedRequest]:
    if args.trace or args.arrivals == "trace":
        if not args.trace:
            raise UsageError("--arrivals trace needs --trace FILE")
        return read_trace(args.trace, mix, rng)
    if args.arrivals in ("poisson", "constant") and not args.rate > 0:
        raise UsageError("--rate must be > 0")
    if args.arrivals == "poisson":
        times: Iterable[float] = poisson_arrivals(args.rate, random.Random(args.seed + 1))
    elif args.arrivals == "constant":
        times = constant_arrivals(args.rate)
    else:
        if args.burst_size < 1 or not args.burst_interval > 0 or args.burst_spread < 0:
            raise UsageError("bursts need --burst-size >= 1, --burst-interval > 0, --burst-spread >= 0")
        times = burst_arrivals(args.burst_size, args.burst_interval, args.burst_spread)
    return plan(times, mix, rng)


async def _discover_model(base_url: str, api_key: str | None) -> str:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    async with aiohttp.ClientSession() as session, session.get(base_url + "/v1/models", headers=headers) as response:
        response.raise_for_status()
        data = await response.json()
    return str(data["data"][0]["id"])


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    mix = load_mix(args.mix) if args.mix else DEFAULT_MIX
    planned = _arrivals(args, mix, random.Random(args.seed))
    base_url = args.url.rstrip("/").removesuffix("/v1")
    model = args.model or await _discover_model(base_url, args.api_key)
    target = Target(
        base_url=base_url,
        model=model,
        endpoint=args.endpoint,
        stream=args.stream,
        timeout_s=args.timeout,
        scope_header=args.scope_header,
        scope_tag=args.scope_tag,
        ignore_eos=args.ignore_eos,
        api_key=args.api_key,
        time_scale=args.time_scale,
    )
    limits = RunLimits(duration_s=args.duration, max_requests=args.max_requests, max_in_flight=args.max_in_flight)
    stop = asyncio.Event()
    # Ctrl-C ends the load with its result written; SIGTERM (a deleted Job) still ends it outright.
    asyncio.get_running_loop().add_signal_handler(signal.SIGINT, stop.set)
    result = await run(target, planned, limits, progress_to=sys.stderr if args.progress else None, stop=stop)
    config = {
        "url": base_url,
        "model": model,
        "endpoint": args.endpoint,
        "stream": args.stream,
        "arrivals": "trace" if args.trace else args.arrivals,
        "rate": args.rate,
        "trace": args.trace,
        "duration_s": args.duration,
        "max_requests": args.max_requests,
        "timeout_s": args.timeout,
        "time_scale": args.time_scale,
        "seed": args.seed,
        "mix": [
            {
                "name": s.name,
                "weight": s.weight,
                "mean_input_tokens": s.input_tokens.mean,
                "mean_output_tokens": s.output_tokens.mean,
                "deadline_s": s.deadline_s,
            }
            for s in mix
        ],
    }
    return {"config": config, **result}


def main(argv: list[str]) -> int:
    """Entry point of `specpilot loadgen`."""
    try:
        args = _parser().parse_args(argv)
        if not args.time_scale > 0 or not args.duration > 0 or not args.timeout > 0:
            raise UsageError("--time-scale, --duration and --timeout must be > 0")
        result = asyncio.run(_main(args))
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
    except (UsageError, WorkloadError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except aiohttp.ClientError as exc:
        print(f"{PROG}: error: cannot reach {args.url}: {exc}", file=sys.stderr)
        return 1
    text = json.dumps(result, indent=2)
    if args.output:
        Path(args.output).write_text(text + "\n")
    else:
        print(text)
    return 0
