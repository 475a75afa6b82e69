"""Each scope's progress: its state, its last window, its forecast, and the record of its fallbacks."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated

from pydantic import Field, StringConstraints

from specpilot.api.common import ApiModel
from specpilot.api.reasons import FallbackReason, MetricName
from specpilot.api.status.decision_status import ScopeDecision
from specpilot.api.status.status_fields import Count, ScopeName, Sentence
from specpilot.wire.names import Arm


class ScopeState(StrEnum):
    """Where a scope stands."""

    ORDINARY = "Ordinary"
    """All its traffic on the baseline; not piloting (yet)."""
    PILOTING = "Piloting"
    """Advancing through its stages."""
    SPECULATIVE = "Speculative"
    """At its last stage with passing windows."""
    ROLLED_BACK = "RolledBack"
    """Flipped back to ordinary decoding after failing windows, a hard limit or a critical webhook."""
    HELD = "Held"
    """Kept at its current weight (pilot suspended or inconclusive windows)."""


class Verdict(StrEnum):
    """The judgement of one window."""

    PASS = "Pass"
    FAIL = "Fail"
    INCONCLUSIVE = "Inconclusive"


class WindowSummary(ApiModel):
    """The last closed window of a scope, speculative arm against baseline."""

    end: datetime
    """When the window closed."""
    verdict: Verdict
    """Pass, Fail or Inconclusive."""
    samples: Count = 0
    """Requests of the speculative arm in the window."""
    ms_per_committed_token: float | None = None
    """Speculative arm's decode time per committed token, in milliseconds."""
    ratio: float | None = None
    """Speculative / baseline decode time per committed token."""
    offered_load: float | None = None
    """The load the window's evidence is filed at, in requests per second per replica: the compared arms'
    arrivals over up to the last minute of its stage, as the bands read load."""
    ttft_p99: float | None = None
    """Speculative arm's 99th percentile time to first token, in seconds."""
    e2e_p95: float | None = Field(default=None, alias="e2eP95")
    """Speculative arm's 95th percentile end-to-end latency, in seconds."""
    acceptance_length: float | None = None
    """Mean committed tokens per speculative round."""
    reason: Annotated[str, StringConstraints(max_length=1024)] = ""
    """Why the window got its verdict: the failing or inconclusive checks, in a sentence."""


class ScopeForecast(ApiModel):
    """Where speculation should stop paying for a scope, forecast from the arms' step costs and the
    scope's measured acceptance and lengths, beside what its bands measured."""

    profile: Annotated[str, StringConstraints(max_length=263)]
    """The step costs: a calibrated profile's name, or configmap/NAME."""
    crossover_load: float | None = None
    """Offered load (requests per second per replica) above which ordinary decoding should win; unset:
    speculation still pays at the profile's largest batch (reach)."""
    crossover_low: float | None = None
    """Lower end of its interval at analysis.confidence, from the acceptance's uncertainty."""
    crossover_high: float | None = None
    """Upper end of its interval; unset: none up to the profile's largest batch."""
    reach: float
    """The ordinary arm's load at max_batch: how far the forecast sees."""
    max_batch: Count
    """The largest batch the step costs were measured at."""
    committed: float
    """Mean committed tokens per round the forecast assumed (1 + the per-position acceptance)."""
    windows: Count
    """Windows whose acceptance and lengths it was made from."""
    measured_low: float | None = None
    """The crossover the bands measured, where they did: its load, or the lower end of the bracket of a
    win and a flip it lies in."""
    measured_high: float | None = None
    """The same load, or the upper end of that bracket."""
    disagrees: bool = False
    """The measured crossover lies outside the forecast's interval: the profile does not describe the pods."""
    message: Sentence = ""
    """The forecast, in a sentence."""


class ScopeStatus(ApiModel):
    """One scope's progress."""

    name: ScopeName
    """Scope name."""
    config_hash: Annotated[str, StringConstraints(max_length=64)] | None = None
    """Hash of the scope's spec (match, deadline, stages) its progress was made under; a change
    restarts the scope from ordinary decoding."""
    state: ScopeState = ScopeState.ORDINARY
    """Ordinary, Piloting, Speculative, RolledBack or Held."""
    stage: Count | None = None
    """Index of the current stage in spec.scopes[].stages."""
    weight: Annotated[int, Field(ge=0, le=100)] = 0
    """Percent of the scope's requests currently routed to the speculative arm."""
    failed_checks: Count = 0
    """Consecutive failing windows."""
    stage_started_at: datetime | None = None
    """When the current stage's weight took effect."""
    stage_requests: Count = 0
    """Speculative-arm requests of the scope judged at the current stage."""
    passed_windows: Count = 0
    """Passing windows at the current stage."""
    judge: Annotated[dict[str, float], Field(max_length=32)] = {}
    """State of the sequential comparison at the current stage (so that a restarted operator resumes
    the same test)."""
    last_transition_time: datetime | None = None
    """When state last changed."""
    last_window: WindowSummary | None = None
    """The last closed window."""
    decision: ScopeDecision | None = None
    """The scope's conclusion once the pilot's decision is stated."""
    forecast: ScopeForecast | None = None
    """Its crossover forecast from spec.analysis.forecast's step costs, once its windows measured enough."""


class Window(ApiModel):
    """A time interval."""

    start: datetime
    """Start of the interval."""
    end: datetime
    """End of the interval."""


class FallbackRecord(ApiModel):
    """Why a scope was flipped back to ordinary decoding."""

    scope: ScopeName
    """The scope."""
    at: datetime
    """When the routing table was flipped."""
    reason: FallbackReason
    """ThresholdExceeded, HardLimit, KvCachePressure, QualityRegression, CriticalWebhookFailed or
    ManualAbort."""
    metric: MetricName
    """The metric that tripped, e.g. ttftRatio."""
    observed: float | None = None
    """Its value in the window."""
    threshold: float | None = None
    """The limit it crossed."""
    window: Window
    """The window judged."""
    loads: Annotated[dict[Arm, float], Field(max_length=4)] = {}
    """Each compared arm's offered load over that window, in requests per second per replica: where
    speculation lost, for a flip for speed or latency."""
    in_flight: Annotated[dict[Arm, float], Field(max_length=4)] = {}
    """Each compared arm's requests in flight per replica over that window (the router's, by Little's
    law): the batch it ran at where it lost."""
