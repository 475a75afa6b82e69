"""The peak rehearsal after the live stages: its load ladder, peak and burst."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from pydantic import ConfigDict, Field

from specpilot.api.common import ApiModel, Duration, Rule, cel, duration_within

PEAK_ONE_SOURCE = Rule(
    cel="has(self.perReplica) != has(self.productionFactor)",
    message="set exactly one of perReplica (requests per second per replica) or productionFactor "
    "(x production's highest observed load per replica)",
)


class Peak(ApiModel):
    """The load the rehearsal climbs to, as offered requests per second per replica of each rehearsed arm."""

    model_config = ConfigDict(json_schema_extra=cel(PEAK_ONE_SOURCE))

    per_replica: Annotated[float, Field(strict=True, gt=0, le=4096)] | None = None
    """The peak itself."""
    production_factor: Annotated[float, Field(strict=True, ge=1, le=10)] | None = None
    """The peak as this many times the highest load per replica production's baseline ran at during the
    live stages."""


class Burst(ApiModel):
    """A short burst above the peak, rehearsed after the ladder."""

    factor: Annotated[float, Field(strict=True, gt=1, le=10)] = 1.5
    """The burst's load as a multiple of the peak."""
    duration: Annotated[Duration, duration_within("10s", "1h")] = Duration("1m")
    """How long the burst lasts."""


class Rehearsal(ApiModel):
    """A load ladder replayed against the speculative and control arms after the live stages, through a
    router of its own that reaches no production pod, with the scopes' own mix of traffic."""

    peak: Peak = Peak(production_factor=1.5)
    """The highest step's load."""
    steps: Annotated[int, Field(strict=True, ge=2, le=16)] = 4
    """Steps from production's median load per replica (observed live) to the peak, evenly spaced."""
    step_duration: Annotated[Duration, duration_within("30s", "2h")] = Duration("5m")
    """How long each step runs; its figures are read over its last analysis window. At least 4 x
    analysis.window for a step to form a load band of its own in the decision. The routing fallback at
    peak runs one more step: halfway through it, the speculative share goes to the control arm."""
    restart: bool = True
    """Rehearse the restart fallback too, in one more step at the peak: at its start one speculative
    replica is replaced by one running ordinary decoding, as falling back means where the service's own
    pods run the speculative config. Measures its time to Ready and the remaining replicas' on-time
    completions meanwhile."""
    burst: Burst | None = None
    """A burst after the ladder (none unless set)."""
    crossover_steps: Annotated[int, Field(strict=True, ge=0, le=3)] = 2
    """Steps per rehearsed scope after the ladder, each twice stepDuration, at the load where its
    speculation stops winning (its crossover, read from the live and rehearsed windows as the step
    before ends). Near the crossover the arms differ by a few percent while a window's figures swing with
    each burst of arrivals: the ladder alone places it roughly and, read between coarse load bands across
    a convex curve, low; each step at the crossover as it then stands narrows it. None for a scope whose
    arms never cross, and none that would not fit within maxDuration with the steps still to run."""
    max_duration: Annotated[Duration, duration_within("1m", "24h")] = Duration("1h")
    """A hard cap on the whole rehearsal, waiting included: reached, it stops at once."""
    on_time_target: Annotated[float, Field(strict=True, gt=0, le=1)] = 0.99
    """An arm's capacity is the highest step load at which at least this share of the scopes' requests
    complete within their deadlines."""

    @property
    def crossover_step_duration(self) -> timedelta:
        """A crossover step runs twice a ladder step: near the crossover the arms differ by little."""
        return self.step_duration * 2
