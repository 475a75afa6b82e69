"""What loaded the arms during a window: `WindowLoad`, from the router's samples and the engines.

The offered load per arm replica is the requests sent to the arm that started in the window (every
outcome, finished or still in flight when the router was last read), per second and per replica: its
arrival rate; read too over the last minute of the window's stage, where the operator holds its
requests (`Measurements.load`), which is the load a window is binned at. Counted as they finish, a slow
arm would read less load than it was sent, since it finishes fewer of them in the window; two arms
sent the same requests read the same load.

The router's in-flight requests per arm replica come from its per-request samples by Little's law:
the requests that finished in the window, each held in flight for its end-to-end time, over the
window's length, is the mean number in flight (every outcome counts: a timeout holds a slot as long
as a success). The engines' running and waiting requests are the window's gauge means. The KV
blocks per replica come from ``vllm:cache_config_info``'s ``num_gpu_blocks`` label.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from specpilot.analysis.evidence import ArmLoad, WindowLoad
from specpilot.analysis.window import ArmEngine
from specpilot.metrics.arm_requests import finished_at
from specpilot.metrics.engine_window import EngineScrape, Scrape
from specpilot.metrics.exposition import label
from specpilot.wire.names import Arm
from specpilot.wire.samples import RequestOutcome, RequestSample

CACHE_CONFIG_INFO = "vllm:cache_config_info"


def _per_replica(value: float | None, replicas: int) -> float | None:
    return value / replicas if value is not None and replicas > 0 else None


def window_load(
    samples: Iterable[RequestSample],
    *,
    arrived: Mapping[Arm, int],
    scope: str,
    start: datetime,
    end: datetime,
    replicas: Mapping[Arm, int],
    engines: Mapping[Arm, ArmEngine],
    recent: tuple[Mapping[Arm, int], float] | None = None,
) -> WindowLoad:
    """Each arm's load over [start, end) (all scopes): its `arrived` requests and the finished `samples`,
    and over a longer span to `end` where `recent` gives its arrivals and seconds; and the scope's
    arrival rate and lengths."""
    since, until = start.timestamp(), end.timestamp()
    seconds = until - since
    held: dict[Arm, float] = {}
    scope_requests = 0
    prompts: list[int] = []
    outputs: list[int] = []
    for sample in samples:
        if not since <= finished_at(sample) < until:
            continue
        held[sample.arm] = held.get(sample.arm, 0.0) + sample.e2e
        if sample.scope != scope:
            continue
        scope_requests += 1
        if sample.outcome is RequestOutcome.OK:
            if sample.prompt_tokens is not None:
                prompts.append(sample.prompt_tokens)
            if sample.output_tokens is not None:
                outputs.append(sample.output_tokens)
    arms = {}
    for arm, count in replicas.items():
        engine = engines.get(arm, ArmEngine())
        arms[arm] = ArmLoad(
            offered_per_replica=_per_replica(arrived.get(arm, 0) / seconds, count) if seconds > 0 else None,
            recent_per_replica=_per_replica(recent[0].get(arm, 0) / recent[1], count) if recent else None,
            in_flight_per_replica=_per_replica(held.get(arm, 0.0) / seconds, count) if seconds > 0 else None,
            running_per_replica=_per_replica(engine.running, count),
            waiting_per_replica=_per_replica(engine.waiting, count),
            batch_seen=engine.batch_seen,
        )
    return WindowLoad(
        arms=arms,
        arrival_rate=scope_requests / seconds if seconds > 0 else 0.0,
        prompt_tokens=tuple(prompts),
        output_tokens=tuple(outputs),
    )


def kv_blocks(scrapes: Sequence[Scrape]) -> int | None:
    """KV-cache blocks of one replica, from the newest scrape that reports them."""
    return cache_config(scrapes, "num_gpu_blocks")


def cache_config(scrapes: Sequence[Scrape], name: str) -> int | None:
    """A whole-number attribute of the engine's cache config (``num_gpu_blocks``, ``block_size``), from
    the newest scrape that reports it."""
    for scrape in reversed(scrapes):
        if not isinstance(scrape, EngineScrape):
            continue
        for labels, value in scrape.exposition.series(CACHE_CONFIG_INFO).items():
            found = label(labels, name)
            if value == 1 and found is not None and found.isdigit():
                return int(found)
    return None
