"""Ready endpoints per arm from EndpointSlice objects."""

from __future__ import annotations

from typing import Any

import pytest

from specpilot.router.core.choice import Endpoint
from specpilot.router.core.slices import ready_endpoints, slice_port
from specpilot.wire.names import Arm


def eps(
    service: str,
    *endpoints: tuple[str, bool | None],
    ports: list[dict[str, Any]] | None = None,
    address_type: str = "IPv4",
) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{service}-abc", "labels": {"kubernetes.io/service-name": service}},
        "addressType": address_type,
        "ports": [{"name": "http", "port": 8000, "protocol": "TCP"}] if ports is None else ports,
        "endpoints": [
            {"addresses": [ip], "conditions": {} if ready is None else {"ready": ready}} for ip, ready in endpoints
        ],
    }


@pytest.mark.parametrize(
    ("ports", "port"),
    [
        ([{"name": "http", "port": 8000}], 8000),
        ([{"name": "metrics", "port": 9000}, {"name": "http", "port": 8001}], 8001),
        ([{"name": "web", "port": 8002}], 8002),  # the only port
        ([{"name": "a", "port": 1}, {"name": "b", "port": 2}], None),  # ambiguous
        ([], None),
        ([{"name": "http"}], None),  # no port number
    ],
)
def test_slice_port(ports: list[dict[str, Any]], port: int | None) -> None:
    assert slice_port({"ports": ports}) == port


def test_only_ready_endpoints_of_the_pilots_arms_count() -> None:
    slices = [
        eps("p1-baseline", ("198.18.0.2", True), ("198.18.0.1", True), ("198.18.0.3", False)),
        eps("p1-baseline", ("198.18.0.2", True)),  # a second slice repeating an address
        eps("p1-speculative", ("198.18.0.9", None)),  # unknown readiness is not ready
        eps("p1-alternative", ("198.18.0.7", True), address_type="FQDN"),
        eps("p1-router", ("198.18.0.5", True)),
        eps("p2-baseline", ("198.18.0.6", True)),
    ]
    assert ready_endpoints("p1", slices) == {
        Arm.BASELINE: (Endpoint("198.18.0.1", 8000), Endpoint("198.18.0.2", 8000)),
        Arm.SPECULATIVE: (),
        Arm.CONTROL: (),
        Arm.ALTERNATIVE: (),
    }


def test_slices_without_a_usable_port_are_skipped() -> None:
    slices = [eps("p1-speculative", ("198.18.0.9", True), ports=[{"name": "a", "port": 1}, {"name": "b", "port": 2}])]
    assert ready_endpoints("p1", slices)[Arm.SPECULATIVE] == ()


def test_no_slices_means_no_endpoints() -> None:
    assert ready_endpoints("p1", []) == {arm: () for arm in Arm}
