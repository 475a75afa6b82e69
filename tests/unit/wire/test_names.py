"""Names and labels of a pilot's objects, as operator, router and tests find them."""

from __future__ import annotations

import pytest

from specpilot.wire.names import Arm, arm_name, arm_of_service, routes_name


def test_names_of_the_objects_the_router_reads() -> None:
    assert routes_name("p1") == "p1-routes"
    assert arm_name("p1", Arm.SPECULATIVE) == "p1-speculative"


@pytest.mark.parametrize(
    ("service", "arm"),
    [
        ("p1-baseline", Arm.BASELINE),
        ("p1-speculative", Arm.SPECULATIVE),
        ("p1-alternative", Arm.ALTERNATIVE),
        ("p1-router", None),
        ("p2-baseline", None),
        ("p1-baseline-x", None),
    ],
)
def test_arm_of_service(service: str, arm: Arm | None) -> None:
    assert arm_of_service("p1", service) is arm
