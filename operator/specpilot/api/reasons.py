"""Reasons and metric names the operator writes: one spelling each, for conditions, Events and records.

On-call engineers filter Events and alerts by reason, so every reason says what happened; none is a
generic "Synced". Condition reasons double as Event reasons when the condition changes.
"""

from __future__ import annotations

from enum import StrEnum


class Reason(StrEnum):
    """Why a condition holds, or why an Event was emitted."""

    SPEC_VALID = "SpecValid"
    """Every field passed the operator's checks."""
    SPEC_INVALID = "SpecInvalid"
    """A field only the operator can judge is wrong; nothing new was deployed."""
    ARMS_PROGRESSING = "ArmsProgressing"
    """Arm replicas are starting or rolling out."""
    ARMS_AVAILABLE = "ArmsAvailable"
    """Every arm has all its replicas ready on the current configuration."""
    ARM_UNAVAILABLE = "ArmUnavailable"
    """An arm's pods cannot run or its rollout missed its deadline."""
    ROUTER_PROGRESSING = "RouterProgressing"
    """The router is starting or rolling out."""
    ROUTER_UNAVAILABLE = "RouterUnavailable"
    """The router's pods cannot run or its rollout missed its deadline."""
    PILOT_READY = "PilotReady"
    """Arms and router are ready; the routing table is current."""
    NOT_READY = "NotReady"
    """Arms or router are not ready yet."""
    PILOT_DEGRADED = "PilotDegraded"
    """The spec is invalid, or an arm or the router is unavailable."""
    NOT_DEGRADED = "NotDegraded"
    """Nothing is degraded."""
    PILOT_SUSPENDED = "PilotSuspended"
    """spec.suspend is set: stages do not advance, routing stays as it is."""
    NOT_SUSPENDED = "NotSuspended"
    """spec.suspend is not set."""
    ENGINE_CHANGED = "EngineChanged"
    """The frozen engine changed: every scope restarts from ordinary decoding."""
    DRAFT_CHANGED = "DraftChanged"
    """The speculation config changed: every scope restarts from ordinary decoding."""
    SCOPE_CHANGED = "ScopeChanged"
    """One scope's match, deadline or stages changed: that scope restarts from ordinary decoding."""
    PILOT_CREATED = "PilotCreated"
    """Arms, router and routing table were first applied."""
    CHILD_RESTORED = "ChildRestored"
    """An owned object that was edited or deleted was put back."""
    TEARDOWN = "Teardown"
    """The pilot is being deleted: scopes flipped to ordinary decoding before its objects go."""


class FallbackReason(StrEnum):
    """Why a scope was flipped back to ordinary decoding."""

    THRESHOLD_EXCEEDED = "ThresholdExceeded"
    """failureLimit consecutive windows failed a ratio check."""
    HARD_LIMIT = "HardLimit"
    """An error, timeout, rejection or acceptance limit fired directly."""
    KV_CACHE_PRESSURE = "KvCachePressure"
    """The speculative arm's KV-cache usage stayed above its limit."""
    QUALITY_REGRESSION = "QualityRegression"
    """Greedy probes disagreed beyond quality.minAgreement."""
    CRITICAL_WEBHOOK_FAILED = "CriticalWebhookFailed"
    """A critical webhook failed."""
    MANUAL_ABORT = "ManualAbort"
    """An SRE aborted the scope or the pilot."""


class MetricName(StrEnum):
    """Metrics a check judges, as fallback records and window checks name them."""

    TIME_PER_COMMITTED_TOKEN_RATIO = "timePerCommittedTokenRatio"
    TTFT_RATIO = "ttftRatio"
    END_TO_END_RATIO = "endToEndRatio"
    KV_CACHE_USAGE = "kvCacheUsage"
    ERROR_RATE = "errorRate"
    TIMEOUT_RATE = "timeoutRate"
    REJECTION_RATE = "rejectionRate"
    ACCEPTANCE_LENGTH = "acceptanceLength"
    PROBE_AGREEMENT = "probeAgreement"
    WEBHOOK = "webhook"
    MANUAL = "manual"
