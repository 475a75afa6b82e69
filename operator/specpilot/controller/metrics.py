"""The operator's own Prometheus metrics: reconciles, errors, apply latency, pilots by phase, Events."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from specpilot.api.status import Phase, ScopeStatus

_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class OperatorMetrics:
    """One registry per operator process (tests run several side by side)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.reconciles = Counter(
            "specpilot_operator_reconciles", "Pilot reconciles, by result", ["result"], registry=self.registry
        )
        self.reconcile_seconds = Histogram(
            "specpilot_operator_reconcile_seconds", "Time of one reconcile", buckets=_SECONDS, registry=self.registry
        )
        self.apply_seconds = Histogram(
            "specpilot_operator_apply_seconds",
            "Latency of one server-side apply, by kind",
            ["kind"],
            buckets=_SECONDS,
            registry=self.registry,
        )
        self.events = Counter(
            "specpilot_operator_events", "Events emitted on pilots, by reason", ["reason"], registry=self.registry
        )
        scope = ["namespace", "pilot", "scope"]
        self.weights = Gauge(
            "specpilot_scope_weight",
            "Percent of a scope's requests on the speculative arm",
            scope,
            registry=self.registry,
        )
        self.verdicts = Counter(
            "specpilot_scope_verdicts", "Windows judged, by verdict", [*scope, "verdict"], registry=self.registry
        )
        self.flips = Counter(
            "specpilot_scope_flips", "Scopes flipped back to ordinary decoding", scope, registry=self.registry
        )
        self.flip_seconds = Histogram(
            "specpilot_operator_flip_ack_seconds",
            "From writing a flipped routing table to every router serving it",
            buckets=_SECONDS,
            registry=self.registry,
        )
        self.pilots = Gauge("specpilot_operator_pilots", "Pilots by phase", ["phase"], registry=self.registry)
        for phase in Phase:
            self.pilots.labels(phase.value).set(0)
        self._phases: dict[tuple[str, str], Phase] = {}

    def observe_apply(self, kind: str, seconds: float) -> None:
        self.apply_seconds.labels(kind).observe(seconds)

    @contextlib.asynccontextmanager
    async def reconciling(self) -> AsyncIterator[None]:
        started = time.perf_counter()
        try:
            yield
        except BaseException:
            self.reconciles.labels("error").inc()
            raise
        else:
            self.reconciles.labels("ok").inc()
        finally:
            self.reconcile_seconds.observe(time.perf_counter() - started)

    def scope(self, namespace: str, pilot: str, status: ScopeStatus) -> None:
        self.weights.labels(namespace, pilot, status.name).set(status.weight)

    def phase(self, namespace: str, name: str, phase: Phase) -> None:
        self._phases[(namespace, name)] = phase
        self._count()

    def forget(self, namespace: str, name: str) -> None:
        self._phases.pop((namespace, name), None)
        self._count()

    def _count(self) -> None:
        for phase in Phase:
            self.pilots.labels(phase.value).set(sum(1 for p in self._phases.values() if p is phase))
