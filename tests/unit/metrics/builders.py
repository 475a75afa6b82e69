"""A finished request as the router records it, for the metrics tests to vary."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from specpilot.wire.names import Arm
from specpilot.wire.samples import RequestOutcome, RequestSample

_OK = RequestSample(
    seq=1,
    at=0.0,
    scope="code",
    arm=Arm.SPECULATIVE,
    endpoint="10.0.0.7:8000",
    model="m",
    stream=True,
    status=200,
    outcome=RequestOutcome.OK,
    e2e=1.0,
    ttft=0.2,
    output_tokens=11,
    tokens_from_usage=True,
    decode=0.5,
    deadline_met=True,
    fallback=None,
)


def ok_sample(**changes: Any) -> RequestSample:
    """An ok streamed request of scope code on the speculative arm, with `changes`."""
    return replace(_OK, **changes)
