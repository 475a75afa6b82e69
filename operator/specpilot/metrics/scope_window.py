"""One closed window of one scope, put together for the judge: `ScopeWindow`.

The requests come from the sample ledger (per scope and arm), the engine figures from
`engine_window.engine_window` per arm (engines cannot tell scopes apart, so every scope of an arm shares
them), and the ledger says where the router's samples may be incomplete. Close a window at or
before the routers' last good read, or it is incomplete by construction.
"""

from __future__ import annotations

from datetime import datetime

from specpilot.analysis.window import ArmEngine, ScopeWindow
from specpilot.metrics.arm_requests import arm_requests
from specpilot.metrics.ledger import LedgerView, SampleLedger
from specpilot.wire.names import Arm


def scope_window(
    ledger: SampleLedger | LedgerView,
    *,
    scope: str,
    start: datetime,
    end: datetime,
    compared: Arm,
    compared_engine: ArmEngine,
    speculative_engine: ArmEngine,
    alternative: bool = False,
) -> ScopeWindow:
    """The scope's window [start, end): the speculative arm's and the `compared` arm's requests and
    engines (the control arm, or production's baseline without one), the alternative arm's requests
    where the pilot runs one, and the gaps in the samples."""
    samples = ledger.samples(start, end)
    return ScopeWindow(
        scope=scope,
        start=start,
        end=end,
        compared=arm_requests(samples, scope=scope, arm=compared, start=start, end=end),
        speculative=arm_requests(samples, scope=scope, arm=Arm.SPECULATIVE, start=start, end=end),
        compared_engine=compared_engine,
        speculative_engine=speculative_engine,
        compared_arm=compared,
        alternative=arm_requests(samples, scope=scope, arm=Arm.ALTERNATIVE, start=start, end=end)
        if alternative
        else None,
        gaps=ledger.gaps(start, end),
    )
