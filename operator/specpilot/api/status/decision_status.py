"""The pilot's conclusion: outcomes and the reasons to defer, what bounds an adoption, each scope's
decision and the pilot's."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated

from pydantic import Field, StringConstraints

from specpilot.api.common import ApiModel
from specpilot.api.reasons import MetricName
from specpilot.api.status.status_fields import ScopeName, Sentence


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
