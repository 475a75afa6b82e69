"""SpeculationPilot status: everything the operator knows, so that a restarted operator resumes exactly.

The operator writes it through the status subresource, once per tick. Phases map one to one onto Argo
CD health; conditions follow metav1.Condition, so `kubectl wait --for=condition=Ready` works.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated

from pydantic import Field, StringConstraints

from specpilot.api.common import ApiModel, KubeObject
from specpilot.api.reasons import FallbackReason, MetricName
from specpilot.wire.names import Arm

FALLBACK_LIMIT = 20

Count = Annotated[int, Field(ge=0)]
Reason = Annotated[
    str, StringConstraints(pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$", min_length=1, max_length=1024)
]
ScopeName = Annotated[str, StringConstraints(max_length=63)]


class Phase(StrEnum):
    """The pilot's phase, named after the Argo CD health status it maps onto."""

    PROGRESSING = "Progressing"
    """Arms are starting, or at least one scope is still piloting; rollbacks happen within this phase."""
    HEALTHY = "Healthy"
    """Arms ready and every scope settled: speculative at its last stage, held, or rolled back with a
    decision stated."""
    DEGRADED = "Degraded"
    """The spec is invalid, or an arm or the router is unavailable."""
    SUSPENDED = "Suspended"
    """spec.suspend is set."""


class ConditionType(StrEnum):
    """Condition types the operator sets."""

    READY = "Ready"
    ARMS_READY = "ArmsReady"
    PROGRESSING = "Progressing"
    DEGRADED = "Degraded"
    SUSPENDED = "Suspended"
    INVALID_SPEC = "InvalidSpec"
    CONTROLLED = "Controlled"
    PRODUCTION_SATURATED = "ProductionSaturated"
    SPEED_ONLY = "SpeedOnly"


class ConditionStatus(StrEnum):
    """Whether a condition holds."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(ApiModel):
    """One aspect of the pilot's state, shaped as metav1.Condition."""

    type: Annotated[str, StringConstraints(pattern=r"^([a-z0-9.-]+/)?[A-Za-z0-9_.-]+$", max_length=316)]
    """Ready, ArmsReady, Progressing, Degraded, Suspended or InvalidSpec."""
    status: ConditionStatus
    """True, False or Unknown."""
    observed_generation: Count | None = None
    """The spec generation the condition was set for."""
    last_transition_time: datetime
    """When status last changed."""
    reason: Reason
    """Machine-readable CamelCase reason."""
    message: Annotated[str, StringConstraints(max_length=32768)] = ""
    """Human-readable detail."""


class ArmStatus(ApiModel):
    """One arm's deployment."""

    replicas: Count = 0
    """Desired engine replicas."""
    ready_replicas: Count = 0
    """Engine replicas that pass their readiness check."""
    gpus: Count = 0
    """GPUs the arm holds (replicas x tensor parallel size)."""
    config_hash: Annotated[str, StringConstraints(max_length=64)] | None = None
    """Hash of the rendered engine configuration; equal hashes mean identical arms."""
    speculative_config: Annotated[str, StringConstraints(max_length=4096)] | None = None
    """The `--speculative-config` the arm runs with, as rendered (the speculative arm's alone), a schedule
    under the key that engine.vllmVersion names."""


class RouterStatus(ApiModel):
    """The router's deployment."""

    replicas: Count = 0
    """Desired router replicas."""
    ready_replicas: Count = 0
    """Router replicas that pass their readiness check."""


class RoutesStatus(ApiModel):
    """The routing table last written to the `<pilot>-routes` ConfigMap."""

    generation: Count = 0
    """Increases whenever the table's content changes; the router reports the generation it uses."""
    hash: Annotated[str, StringConstraints(max_length=64)] | None = None
    """Hash of the table's content (scopes, matches, weights, deadlines)."""


class ArmsStatus(ApiModel):
    """The arms' deployments."""

    baseline: ArmStatus = ArmStatus()
    """The production baseline: serves what the pilot does not take; watched, not compared."""
    speculative: ArmStatus = ArmStatus()
    """The speculative arm."""
    control: ArmStatus | None = None
    """The control arm the speculative arm is compared with; absent when the pilot runs without one."""
    alternative: ArmStatus | None = None
    """The alternative arm, when the spec has one."""


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


class DecisionOutcome(StrEnum):
    """What the pilot recommends."""

    ADOPT_WITHIN_ENVELOPE = "AdoptWithinEnvelope"
    """Speculation pays within the stated envelope of scopes and load."""
    ADOPT_IN_LOW_LOAD_WINDOWS = "AdoptInLowLoadWindows"
    """Speculation pays only below the crossover load."""
    ADOPT_WITH_SCHEDULE = "AdoptWithSchedule"
    """The speculative arm's batch-size schedule pays: it wins below its switch and is no worse than the
    compared arm above it, up to the highest load measured (`schedule`, the envelope)."""
    DEFER = "Defer"
    """Speculation does not pay, or the evidence is insufficient."""


class DeferReason(StrEnum):
    """Why a pilot or scope defers speculation."""

    NO_NET_GAIN = "NoNetGain"
    """Speculation is not faster at any load measured."""
    QUALITY_REGRESSION = "QualityRegression"
    """A quality gate (probes, webhooks) failed."""
    MEMORY_PRESSURE = "MemoryPressure"
    """The speculative arm ran out of KV cache."""
    BOTTLENECK_ELSEWHERE = "BottleneckElsewhere"
    """Decoding is too small a share of request time for its gain to matter end to end."""
    INSUFFICIENT_EVIDENCE = "InsufficientEvidence"
    """Too few windows, or too few loads, to say."""
    LIMIT_FAILED = "LimitFailed"
    """A latency or error limit flipped the scope back at a load where speculation decodes faster."""


class DecisionTrigger(StrEnum):
    """Why a decision was stated."""

    SETTLED = "EveryScopeSettled"
    """Every scope is speculative at its last stage, rolled back, or never piloted."""
    REQUESTED = "Requested"
    """The specpilot.io/decide annotation asked for it."""


Sentence = Annotated[str, StringConstraints(max_length=1024)]


class AlternativeVerdict(StrEnum):
    """Whether the speculative arm's GPU budget does better with speculation or spent another way."""

    SPECULATION_BETTER = "SpeculationBetter"
    """Speculation is measurably faster per committed token than the alternative at some load both ran
    at, and slower at none."""
    ALTERNATIVE_BETTER = "AlternativeBetter"
    """The alternative, without speculation, is measurably faster at some load both ran at, and slower at none."""
    NO_DIFFERENCE = "NoDifference"
    """Neither is measurably faster anywhere, or each is at some load."""
    INSUFFICIENT_EVIDENCE = "InsufficientEvidence"
    """Too few windows at the same loads to say."""


class AlternativeDecision(ApiModel):
    """The alternative arm of a scope: the same share on the same GPU budget, without speculation, judged
    against the control arm and the speculative arm in the same load bins."""

    verdict: AlternativeVerdict
    """SpeculationBetter, AlternativeBetter, NoDifference or InsufficientEvidence."""
    ratio: float | None = None
    """Alternative / control time per committed token, pooled over the loads both ran at."""
    speculative_ratio: float | None = None
    """Speculative / alternative time per committed token, pooled over the loads both ran at."""
    observed_gain: float | None = None
    """The control arm's mean end-to-end time over the alternative's, at the loads both ran at."""
    reason: Sentence
    """Why, in a sentence."""


class AdoptionBound(StrEnum):
    """What stops an adoption in low-load windows at its load."""

    SPEED = "Speed"
    """Speculation is not measurably faster above it: its crossover, a flip for speed, or no win above."""
    TTFT_LIMIT = "TtftLimit"
    """Its TTFT quantile over the loads it wins at runs above thresholds.ttft; below it, within."""
    END_TO_END = "EndToEnd"
    """Its requests take longer end to end over the loads it wins at; below it, they finish faster."""
    LIMIT = "Limit"
    """A latency or error limit flipped the scope back above it (limitFailure), where it may still decode
    faster."""
    UNMEASURED_LOAD = "UnmeasuredLoad"
    """It wins at every load measured, but not up to the load it must hold (production's p95, or the
    rehearsal's peak): the load checked is the load stated."""


class Bound(ApiModel):
    """What bounds an adoption in low-load windows, with the figure that bounds it."""

    kind: AdoptionBound
    """Speed, TtftLimit, EndToEnd, Limit or UnmeasuredLoad."""
    metric: MetricName | None = None
    """For Limit: the metric whose limit flipped the scope back."""
    observed: float | None = None
    """The figure beyond the bound: the TTFT ratio or the end-to-end gain over every load it wins at, the
    flip's observed value, or (UnmeasuredLoad) the load it must hold."""
    limit: float | None = None
    """The limit that figure is held against."""


class LimitFailure(ApiModel):
    """Where a latency or error limit fails for a scope: between the highest load it passed at and the
    load its windows flipped it back at. Not the speed crossover: speculation may decode faster there."""

    metric: MetricName
    """The limit's metric."""
    low: float
    """Offered load (requests per second per replica) it held at: the highest win."""
    high: float
    """The load it flipped back at."""


class LoadSpan(ApiModel):
    """Two offered loads, requests per second per replica."""

    low: float
    """The lower."""
    high: float
    """The higher."""


class ScopeDecision(ApiModel):
    """One scope's conclusion, from every window recorded for it."""

    outcome: DecisionOutcome
    """AdoptWithinEnvelope, AdoptInLowLoadWindows, AdoptWithSchedule or Defer."""
    defer_reason: DeferReason | None = None
    """For Defer: NoNetGain, QualityRegression, MemoryPressure, BottleneckElsewhere or InsufficientEvidence."""
    max_load: float | None = None
    """Highest load at which speculation was measured winning against the compared arm at the same load,
    as offered load: requests per second per replica, over every scope the arms serve."""
    crossover_load: float | None = None
    """For AdoptInLowLoadWindows: the offered load above which ordinary decoding wins, when it was measured."""
    crossover_low: float | None = None
    """Lower end of the crossover's interval at analysis.confidence."""
    crossover_high: float | None = None
    """Upper end of the crossover's interval at analysis.confidence."""
    limit_failure: LimitFailure | None = None
    """For a scope flipped back for a latency or error limit above its wins: the loads between which that
    limit fails. Never the crossover (where speculation stops decoding faster)."""
    bound: Bound | None = None
    """For AdoptInLowLoadWindows: what bounds it at its load; for a Defer of a scope that decodes faster,
    what blocks an adoption at every load it wins at (its TTFT tail or its end-to-end time)."""
    schedule: Annotated[str, StringConstraints(max_length=1024)] | None = None
    """For AdoptWithSchedule: the schedule adopted, as vLLM's `--speculative-config` key and value."""
    rehearse: LoadSpan | None = None
    """For a rolled-back scope its evidence leaves unsettled below the load it flipped at (a win in a band
    too thin to decide on, or no win): the loads the rehearsal's router climbs for it (spec.rehearsal)."""
    observed_gain: float | None = None
    """For an adoption: the compared arm's mean end-to-end time over the speculative arm's, in the windows
    at the loads it is adopted for."""
    ttft_ratio: float | None = None
    """For an adoption: the speculative arm's TTFT quantile (thresholds.ttft) over the compared arm's,
    pooled over the requests at the loads it is adopted for; an adoption needs it not shown above the limit."""
    production_covered: float | None = None
    """For an adoption: the share of production's windows whose baseline load per replica lay at or
    below the loads it is adopted for."""
    decode_share: float | None = None
    """Share of the baseline's request time spent decoding."""
    decode_gain: float | None = None
    """Baseline / speculative time per committed token: the decode-only gain."""
    implied_gain: float | None = None
    """The end-to-end gain the decode gain implies at that decode share."""
    reasons: Annotated[list[Sentence], Field(max_length=8)] = []
    """Why, in sentences."""
    alternative: AlternativeDecision | None = None
    """Where the pilot runs an alternative arm: whether the same GPUs do better without speculation
    (stated beside the outcome; it does not change it)."""


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


class Envelope(ApiModel):
    """Where speculation was shown to pay."""

    scopes: Annotated[list[ScopeName], Field(max_length=16)] = []
    """Scopes inside the envelope."""
    max_load: float | None = None
    """Highest load measured within it, as offered load: requests per second per replica."""


class Decision(ApiModel):
    """The pilot's conclusion."""

    outcome: DecisionOutcome
    """AdoptWithinEnvelope, AdoptInLowLoadWindows, AdoptWithSchedule or Defer."""
    decided_at: datetime
    """When it was stated."""
    envelope: Envelope | None = None
    """The envelope, for AdoptWithinEnvelope and AdoptWithSchedule."""
    stated_because: DecisionTrigger = DecisionTrigger.SETTLED
    """EveryScopeSettled, or Requested through the specpilot.io/decide annotation."""
    defer_reason: DeferReason | None = None
    """For Defer: the reason that applies to the most scopes."""
    crossover_load: float | None = None
    """Offered load (requests per second per replica) below which speculation is adopted, for
    AdoptInLowLoadWindows: the lowest of its scopes' crossovers, or of their highest wins where something
    else bounds them (`bound`)."""
    crossover_low: float | None = None
    """Lower end of that crossover's interval at analysis.confidence (or of the loads it is bracketed by,
    between a win and a flip for speed)."""
    crossover_high: float | None = None
    """Upper end of that crossover's interval at analysis.confidence."""
    limit_failure: LimitFailure | None = None
    """Where the bounding scope's latency or error limit fails, when a flip for it bounds the adoption."""
    bound: Bound | None = None
    """For AdoptInLowLoadWindows: what bounds the adoption at crossover_load."""
    schedule: Annotated[str, StringConstraints(max_length=1024)] | None = None
    """For AdoptWithSchedule: the schedule to deploy, as vLLM's `--speculative-config` key and value; the
    envelope says up to which load it was shown to pay."""
    looks: Annotated[int, Field(ge=1)] = 1
    """How many times it has been stated: once, and once more at each revision. A scheduled config's
    test of being no worse above its switch spends its level over these looks."""
    reasons: Annotated[list[Sentence], Field(max_length=32)] = []
    """Why, in sentences."""


class RehearsalPhase(StrEnum):
    """Where the peak rehearsal stands."""

    WAITING = "Waiting"
    """Due, but production cannot take the rehearsed scopes' shares yet."""
    STARTING = "Starting"
    """Production took the rehearsed scopes' shares; the rehearsal router is starting."""
    RUNNING = "Running"
    COMPLETED = "Completed"
    STOPPED = "Stopped"
    """Stopped before its last step: production saturated, a scope flipped, or the time cap."""


class ArmStepFigures(ApiModel):
    """What one arm did over a step, every rehearsed scope together: a ladder step past its first
    analysis window (which still carries the previous step's queue), any other over its last."""

    requests: Count = 0
    """Requests that finished in the span read, whatever their outcome."""
    completed_per_replica: float | None = None
    """Those requests per second per replica: the arm's throughput, below the step's load when it
    cannot keep up (the rest wait in its queue)."""
    kept_up: bool | None = None
    """The arm finished as many requests as the step sent it, within three standard deviations of its
    Poisson arrivals: it was not falling behind."""
    ttft_p50: float | None = None
    """Seconds."""
    ttft_p99: float | None = None
    """Seconds."""
    end_to_end_p95: float | None = None
    """Seconds."""
    time_per_committed_token: float | None = None
    """Seconds of decode per output token after the first."""
    timeout_share: float | None = None
    """Share of requests that timed out or finished after their scope's deadline."""
    rejection_share: float | None = None
    """Share of requests the engines refused (429/503) or no endpoint took."""
    on_time: float | None = None
    """Share of requests that completed within their scope's deadline."""
    peak_kv_usage: float | None = None
    """Highest KV-cache usage of the arm's pods (0-1)."""
    preemptions: Count | None = None
    """Requests the arm's engines preempted."""


class RoutingFlip(ApiModel):
    """The fallback rehearsed at peak: the speculative share flipped to the control arm mid-step."""

    at: datetime
    """When the rehearsal router's table flipped."""
    recovered: bool
    """The control arm kept up and met the on-time target over the step's last analysis window."""
    recovery_seconds: float | None = None
    """From the flip to the last request that missed its deadline (0: none did); absent when it did
    not recover within the step."""
    missed: Count = 0
    """Requests on the control arm that finished after the flip and missed their deadline."""
    requests: Count = 0
    """Requests on the control arm that finished after the flip."""


class RestartFallback(ApiModel):
    """The fallback rehearsed at peak where falling back means a restart: one speculative replica
    replaced by one running ordinary decoding."""

    at: datetime
    """When the replica was taken down and its ordinary-decoding replacement created."""
    ready_at: datetime | None = None
    """When the replacement became Ready; absent while it was not, within the step."""
    seconds_to_ready: float | None = None
    """From `at` to `readyAt`."""
    requests: Count = 0
    """Requests on the speculative arm in flight at `at` or sent until the replacement was Ready (or the
    step's end), as far as they finished by then: those the restart interrupted, and the remaining
    replicas'."""
    missed: Count = 0
    """Those that timed out or missed their deadline."""
    on_time: float | None = None
    """The share of them that completed within their deadline."""
    fell_back: Count = 0
    """Requests of the speculative share sent to the control arm meanwhile, as no speculative replica
    was ready (with one replica, all of them)."""


class ScopeStepFigures(ApiModel):
    """One rehearsed scope's figures over a step, per arm. What the scopes share
    is the arm's alone: whether it kept up with the step's load, its KV usage and preemptions."""

    name: Annotated[str, StringConstraints(max_length=63)]
    """The scope."""
    speculative: ArmStepFigures | None = None
    """Its requests on the speculative arm."""
    control: ArmStepFigures | None = None
    """Its requests on the control arm."""


class RehearsalStep(ApiModel):
    """One step of the ladder: its planned load and, once it ran, what each arm did."""

    load: float
    """Planned offered load, requests per second per replica of each rehearsed arm."""
    burst: bool = False
    """The burst after the ladder."""
    flip: bool = False
    """The routing fallback at peak: halfway through, the speculative share goes to the control arm."""
    restart: bool = False
    """The restart fallback at peak: at its start, one speculative replica restarts as ordinary decoding."""
    crossover: ScopeName | None = None
    """A step at this scope's crossover, after the ladder (rehearsal.crossoverSteps)."""

    @property
    def on_ladder(self) -> bool:
        """One of the ladder's steps (not a crossover step, the burst, nor a fallback): what capacity
        and the peak are read from."""
        return not self.burst and not self.flip and not self.restart and self.crossover is None

    @property
    def held(self) -> bool:
        """A step that holds one load throughout (a ladder or a crossover step): read past its first
        analysis window, which still carries the previous step's queue."""
        return self.on_ladder or self.crossover is not None

    started_at: datetime | None = None
    """When its load began."""
    speculative: ArmStepFigures | None = None
    """The speculative arm's figures over the step."""
    control: ArmStepFigures | None = None
    """The control arm's."""
    scopes: Annotated[list[ScopeStepFigures], Field(max_length=16)] = []
    """Each scope's figures, when more than one was rehearsed."""


class CrossoverBracket(ApiModel):
    """A rehearsed scope that was rolled back when the rehearsal began, and the loads its decision left to
    rehearse then (its crossover interval, where the limit that flipped it fails, or the span it states below
    its flip): the rehearsal's ladder and the scope's crossover steps lie within it."""

    scope: ScopeName
    """The scope."""
    low: float
    """Lower end of the interval, requests per second per replica (its highest win, its thin win, or a
    fraction of the flip's load)."""
    high: float
    """Upper end (the flip's load, or the crossover's interval below it)."""


class RehearsalStatus(ApiModel):
    """The peak rehearsal: the ladder, each step's figures as they come, and each arm's capacity."""

    phase: RehearsalPhase
    """Waiting, Starting, Running, Completed or Stopped."""
    message: Annotated[str, StringConstraints(max_length=1024)] = ""
    """Why it waits or stopped, or where it stands."""
    started_at: datetime | None = None
    """When it became due."""
    finished_at: datetime | None = None
    """When it completed or stopped (its load ended)."""
    scopes: Annotated[list[Annotated[str, StringConstraints(max_length=63)]], Field(max_length=16)] = []
    """The scopes rehearsed (those on speculative decoding when it began, and those rolled back with a
    crossover interval to narrow); their live shares go to production meanwhile."""
    brackets: Annotated[list[CrossoverBracket], Field(max_length=16)] = []
    """The rehearsed scopes that were rolled back when it began, each with its crossover interval:
    production keeps them on ordinary decoding, and only a flip since it began stops it."""
    step: Count = 0
    """Index of the current (or last) step."""
    steps: Annotated[list[RehearsalStep], Field(max_length=67)] = []
    """The ladder, the crossover steps, the burst, then the routing and the restart fallback at peak:
    planned loads, and each step's figures once it ran."""
    speculative_capacity: float | None = None
    """Highest load the speculative arm completed (requests per second per replica, as measured) on a
    ladder step where it kept up and completed at least rehearsal.onTimeTarget of its requests on time;
    absent when no step met it."""
    control_capacity: float | None = None
    """The same for the control arm (ordinary decoding at the same size)."""
    routing_flip: RoutingFlip | None = None
    """The routing fallback rehearsed at peak, once its step ran."""
    restart_fallback: RestartFallback | None = None
    """The restart fallback rehearsed at peak, once its step ran."""


class TakeoverPhase(StrEnum):
    WAITING = "Waiting"
    RECORDED = "Recorded"
    TAKEN = "Taken"
    RESTORED = "Restored"


class TakeoverStatus(ApiModel):
    """spec.router.takeover's Service: what it selected before, and where it stands."""

    service: Annotated[str, StringConstraints(max_length=63)]
    """The Service."""
    phase: TakeoverPhase
    """Waiting (for the Service or the routers), Recorded (its original is kept here; it is re-pointed next),
    Taken (it selects the routers) or Restored (put back as it was)."""
    selector: Annotated[dict[str, Annotated[str, StringConstraints(max_length=63)]], Field(max_length=32)] = {}
    """Its original selector."""
    ports: Annotated[list[KubeObject], Field(max_length=32)] = []
    """Its original ports."""
    at: datetime | None = None
    """When the phase last changed."""
    message: Annotated[str, StringConstraints(max_length=1024)] = ""
    """Why it stands where it does."""


class WorkloadStatus(ApiModel):
    """spec.workloadRef's Deployment as the arms last copied it: what a change to it is named by."""

    name: Annotated[str, StringConstraints(max_length=253)]
    """The Deployment."""
    image: Annotated[str, StringConstraints(max_length=512)] = ""
    """Its engine container's image."""
    args: Annotated[list[Annotated[str, StringConstraints(max_length=1024)]], Field(max_length=128)] = []
    """Its engine container's command line."""


class ProductionGuard(ApiModel):
    """The production guard's hysteresis: the state it holds and the windows read against it."""

    saturated: Annotated[bool, Field(strict=True)] = False
    """Whether ProductionSaturated holds."""
    streak: Count = 0
    """Consecutive windows, up to the last, that read the other way (saturated while it has headroom,
    headroom while saturated); at spec.baseline.saturation's count the state changes."""
    read_at: datetime | None = None
    """The end of the last window read."""
    reason: Sentence = ""
    """Why the last saturated window was saturated."""


class SpeculationPilotStatus(ApiModel):
    """Observed state of a pilot."""

    observed_generation: Count | None = None
    """The spec generation last reconciled."""
    phase: Phase | None = None
    """Progressing, Healthy, Degraded or Suspended (as Argo CD health)."""
    conditions: Annotated[
        list[Condition],
        Field(
            max_length=16,
            json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
        ),
    ] = []
    """Ready, ArmsReady, Progressing, Degraded, Suspended and InvalidSpec."""
    arms: ArmsStatus | None = None
    """The arms' deployments."""
    router: RouterStatus | None = None
    """The router's deployment."""
    routes: RoutesStatus | None = None
    """The routing table last written."""
    scopes: Annotated[list[ScopeStatus], Field(max_length=16)] = []
    """Per-scope progress, in spec order."""
    speculative_scopes: Annotated[str, StringConstraints(pattern=r"^[0-9]+/[0-9]+$", max_length=16)] | None = None
    """Speculative scopes out of all scopes, e.g. 2/5 (shown by kubectl get)."""
    fallbacks: Annotated[list[FallbackRecord], Field(max_length=FALLBACK_LIMIT)] = []
    """The latest rollbacks, newest last, at most 20."""
    fallbacks_dropped: Count = 0
    """Older rollbacks no longer listed in fallbacks, which keeps the newest 20 so that status stays
    bounded however long the pilot runs (each rollback's Event said it too)."""
    decision: Decision | None = None
    """The conclusion, once stated."""
    rehearsal: RehearsalStatus | None = None
    """The peak rehearsal, once due."""
    workload: WorkloadStatus | None = None
    """spec.workloadRef's Deployment as last read."""
    takeover: TakeoverStatus | None = None
    """spec.router.takeover's Service, once taken over (kept until it is restored)."""
    production: ProductionGuard | None = None
    """The production guard's windows, once read."""
    forecast_problem: Sentence | None = None
    """Why spec.analysis.forecast's step costs cannot be read (its ConfigMap missing or unfittable)."""
