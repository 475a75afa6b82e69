"""Static endpoints for running without a cluster."""

from __future__ import annotations

from specpilot.router.core.choice import Endpoint
from specpilot.router.static import static_endpoints
from specpilot.wire.names import Arm


def test_endpoints_of_each_arm() -> None:
    configured = (
        (Arm.BASELINE, ("127.0.0.1:8001", "127.0.0.2:8001")),
        (Arm.SPECULATIVE, ("[::1]:9000",)),
        (Arm.ALTERNATIVE, ()),
    )
    assert static_endpoints(configured) == {
        Arm.BASELINE: (Endpoint("127.0.0.1", 8001), Endpoint("127.0.0.2", 8001)),
        Arm.SPECULATIVE: (Endpoint("::1", 9000),),
        Arm.ALTERNATIVE: (),
    }
