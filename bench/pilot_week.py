"""A pilot left running for days, in virtual time: the operator's real shell (`Controller`) on the
unit tier's fakes, one analysis interval a step, with traffic that swings each day, so that windows
land across many load bins. Reports the largest size of every object the pilot writes (its status,
the evidence store, the routing table, the arms) and the process's RSS at each virtual hour: the
objects must stay under the API server's 1 MiB (900 KiB here) and RSS within 10% of its first hour.
With --trace, the Python heap's live bytes (tracemalloc, from the first window on) are printed beside
RSS, to tell objects kept from memory the allocator holds; it runs slower, and its own bookkeeping,
a few dozen bytes a live block, adds to RSS.

The fakes keep what the operator wrote for inspection (API calls, Events, the router generations it
awaited, router samples already read); the bench drops those as it goes, so that RSS is the operator's own.

    .venv/bin/python bench/pilot_week.py [--days 7] [--interval 60] [--rate 2] [--trace]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))

from specpilot.testing.fakes import Json  # noqa: E402
from specpilot.testing.harness import Harness, pilot_doc  # noqa: E402

OBJECT_LIMIT = 900 * 1024
RSS_GROWTH_LIMIT = 0.10


def rss_mib() -> float:
    match = re.search(r"VmRSS:\s+(\d+) kB", Path("/proc/self/status").read_text())
    return int(match.group(1)) / 1024 if match else math.nan


def week_doc(interval: int) -> Json:
    doc = pilot_doc()
    analysis = doc["spec"]["analysis"]
    analysis.update({"interval": f"{interval}s", "window": f"{5 * interval}s", "warmup": f"{2 * interval}s"})
    for scope in doc["spec"]["scopes"]:
        for stage in scope.get("stages", []):
            stage["minDuration"] = f"{3 * interval}s"
    return doc


def prune(h: Harness) -> None:
    """Drop what only the fakes keep: calls, Events, confirmations asked for and samples the operator has read."""
    h.kube.calls.clear()
    h.kube.events.clear()
    del h.routes.written[:-1]
    h.routes.awaited.clear()
    h.samples.samples.clear()  # each step's collection has read them all
    h.samples.rehearsal.clear()


def growth_line(what: str, hourly: list[float]) -> str:
    """First hour, end of day 1 and the largest after it, of one figure sampled each hour."""
    first, peak = hourly[0], max(hourly)
    line = f"{what} first hour {first:.1f} MiB, largest {peak:.1f} MiB (+{100 * (peak / first - 1):.1f}%)"
    if len(hourly) > 24:  # the first day fills the load bins the daily swing reaches; after it, the operator's own
        day_one, later = hourly[23], max(hourly[24:])
        after = 100 * (later / day_one - 1)
        line += f"; end of day 1 {day_one:.1f} MiB, largest after it {later:.1f} MiB (+{after:.1f}%)"
    return line


async def run(days: float, interval: int, rate: float, trace: bool) -> int:
    h = Harness(week_doc(interval))
    await h.reconcile()
    h.ready_pods = True
    await h.reconcile()
    steps = int(days * 86_400 / interval)
    per_hour = max(1, 3600 // interval)
    largest: dict[str, int] = {}
    rss: list[float] = []
    live: list[float] = []
    if trace:
        tracemalloc.start(1)
    started = time.monotonic()
    for step in range(steps):
        day = step * interval / 86_400
        # From the day's peak (3x rate) down to a third of it at night and back: the first hour holds the most
        # requests in flight and in the collection's two windows, so later growth is the operator's own.
        h.traffic.rate = rate * 10 ** (0.5 * math.cos(2 * math.pi * day))
        await h.step(interval)
        prune(h)
        if (step + 1) % per_hour == 0:
            for (kind, _, name), body in h.kube.objects.items():
                key = f"{kind}/{name}"
                largest[key] = max(largest.get(key, 0), len(json.dumps(body, separators=(",", ":"))))
            rss.append(rss_mib())
            if trace:
                live.append(tracemalloc.get_traced_memory()[0] / 2**20)
            if len(rss) % 24 == 0:
                traced = f", traced live {live[-1]:.1f} MiB" if trace else ""
                print(
                    f"day {len(rss) // 24}: RSS {rss[-1]:.1f} MiB{traced}, {time.monotonic() - started:.0f} s",
                    flush=True,
                )
    status = h.status()
    print(f"\n{steps} windows of {interval} s ({days:g} days) in {time.monotonic() - started:.0f} s")
    for key, size in sorted(largest.items(), key=lambda item: -item[1]):
        print(f"  {key:40s} {size / 1024:8.1f} KiB{'  OVER' if size > OBJECT_LIMIT else ''}")
    growth = max(rss) / rss[0] - 1
    print("RSS by hour (MiB):", " ".join(f"{value:.0f}" for value in rss))
    print(growth_line("RSS", rss))
    if trace:
        print(growth_line("traced live", live))
    decision = status.get("decision") or {}
    dropped = status.get("fallbacksDropped", 0)
    print(f"phase {status.get('phase')}, decision {decision.get('outcome')}, fallbacks dropped {dropped}")
    evidence = h.stored_evidence
    if evidence is not None:
        print(f"evidence: TTFT width {evidence.ttft_width}, windows {[s.windows for s in evidence.scopes.values()]}")
    over = [key for key, size in largest.items() if size > OBJECT_LIMIT]
    return 1 if over or growth > RSS_GROWTH_LIMIT else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--interval", type=int, default=60, help="analysis interval, seconds (one step each)")
    parser.add_argument("--rate", type=float, default=2.0, help="requests per second per scope, daily mean")
    parser.add_argument("--trace", action="store_true", help="also trace the Python heap's live bytes (slower)")
    args = parser.parse_args()
    return asyncio.run(run(args.days, args.interval, args.rate, args.trace))


if __name__ == "__main__":
    sys.exit(main())
