"""What follows a scope's flip back to ordinary decoding."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from specpilot.api.common import ApiModel, Duration, duration_within


class Reentry(StrEnum):
    """How a rolled-back scope may pilot again."""

    MANUAL = "Manual"
    AUTOMATIC = "Automatic"


class Rollback(ApiModel):
    """What happens after a scope is flipped back to ordinary decoding."""

    cooldown: Annotated[Duration, duration_within("1m", "168h")] = Duration("30m")
    """A rolled-back scope stays ordinary at least this long."""
    reentry: Reentry = Reentry.MANUAL
    """Manual: it stays RolledBack until an SRE intervenes. Automatic: it restarts at the first stage
    once the cooldown ends."""
