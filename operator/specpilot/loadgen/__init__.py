"""Trace-driven, open-loop load generation against any OpenAI-compatible server.

Arrivals (Poisson, constant, bursts, or a timestamped JSONL trace) are sent on schedule whether
or not earlier requests have finished, each with a task group ("scope"), lengths drawn from that
scope's distributions and an optional deadline. The result counts timeouts, rejections and
errors next to per-scope latency quantiles, because speed computed from successes alone lies.
It imports nothing from the operator; only `specpilot.wire` (the scope header) is shared.
"""
