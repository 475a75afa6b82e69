"""Static endpoints for running without a cluster."""

from __future__ import annotations

import pytest

from specpilot.router.decide import Endpoint
from specpilot.router.static import parse_endpoints
from specpilot.router.table import Arm


@pytest.mark.parametrize(
    ("spec", "parsed"),
    [
        (
            "baseline=127.0.0.1:8001,127.0.0.2:8001",
            (Arm.BASELINE, (Endpoint("127.0.0.1", 8001), Endpoint("127.0.0.2", 8001))),
        ),
        ("speculative=[::1]:9000", (Arm.SPECULATIVE, (Endpoint("::1", 9000),))),
        ("alternative=", (Arm.ALTERNATIVE, ())),
    ],
)
def test_endpoints_of_an_arm(spec: str, parsed: tuple[Arm, tuple[Endpoint, ...]]) -> None:
    assert parse_endpoints(spec) == parsed


@pytest.mark.parametrize("spec", ["nope=127.0.0.1:1", "baseline=127.0.0.1", "baseline=host:port"])
def test_bad_endpoints_are_refused(spec: str) -> None:
    with pytest.raises(ValueError, match="ARM=HOST:PORT"):
        parse_endpoints(spec)
