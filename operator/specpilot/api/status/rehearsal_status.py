"""The peak rehearsal's progress: its steps, each arm's figures over them, and the fallbacks rehearsed
at peak."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated

from pydantic import Field, StringConstraints

from specpilot.api.common import ApiModel
from specpilot.api.status.status_fields import Count, ScopeName


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
