"""The windows a tick judges: each due scope's window, ending at the last collection once the arms are
warm, with the speculative requests new in it and the quality gates' checks. Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from specpilot.analysis.checks import Check
from specpilot.analysis.quality import probe_checks, scope_cases, webhook_check
from specpilot.analysis.window import ScopeWindow
from specpilot.api.spec import SpeculationPilotSpec
from specpilot.api.status import ScopeStatus
from specpilot.controller.core.arm_objects import arm_plans
from specpilot.controller.core.measurements import alternative_judged, compared_arm
from specpilot.controller.core.next_status import carry_scopes
from specpilot.controller.core.progress import Measured, due, warm
from specpilot.controller.core.rehearsal.steps import rehearsing_rolled_back
from specpilot.controller.core.snapshot import Snapshot


def windows_due(snapshot: Snapshot) -> dict[str, ScopeWindow]:
    """The windows this tick judges; the shell asks the webhooks about each before `plan`."""
    spec = snapshot.pilot.spec
    if spec is None or snapshot.pilot.deleting:
        return {}
    arms = arm_plans(snapshot.pilot.ref, spec, snapshot.workload)
    scopes, _ = carry_scopes(snapshot.pilot.status, spec, arms, now=snapshot.now)
    return scope_windows(snapshot, spec, scopes)


def scope_windows(
    snapshot: Snapshot, spec: SpeculationPilotSpec, scopes: Sequence[ScopeStatus]
) -> dict[str, ScopeWindow]:
    """The window of every scope due (a rolled-back one while the rehearsal runs it), ending at the last
    collection, once both arms are warm. A scope judged before this process began measuring (the
    operator restarted) waits until the engines' figures reach back over a whole window: it keeps its
    state rather than being held for want of them."""
    status = snapshot.pilot.status
    end = snapshot.measurements.collected_at
    if end is None or spec.suspend or not warm(status, spec.analysis, snapshot.now):
        return {}
    since = snapshot.measurements.measured_since
    refilling = since is not None and end - spec.analysis.window < since
    last = status.rehearsal if status is not None else None
    rehearsed = rehearsing_rolled_back(last, window=spec.analysis.window, now=snapshot.now)
    return {
        scope.name: snapshot.measurements.window(
            scope.name,
            analysis=spec.analysis,
            end=end,
            compared=compared_arm(spec),
            alternative=alternative_judged(spec),
        )
        for scope in scopes
        if due(scope, spec.analysis, end, rehearsed=rehearsed) and not (refilling and scope.last_window is not None)
    }


def measured_windows(
    snapshot: Snapshot,
    spec: SpeculationPilotSpec,
    scopes: Sequence[ScopeStatus],
    windows: Mapping[str, ScopeWindow],
) -> dict[str, Measured]:
    """Each due window, with the speculative requests new since the scope's last window and the
    quality gates' checks."""
    last_windows = {scope.name: scope.last_window for scope in scopes}
    out = {}
    for name, window in windows.items():
        last = last_windows.get(name)
        since = max(last.end if last is not None else window.start, window.start)
        new = snapshot.measurements.new_requests(name, since=since, end=window.end)
        out[name] = Measured(window, new, _quality(snapshot, spec, name))
    return out


def _quality(snapshot: Snapshot, spec: SpeculationPilotSpec, scope: str) -> tuple[Check, ...]:
    """The quality gates' checks for a scope's window: one per probe kind of its cases, and each webhook's
    answer (a webhook with no answer fails)."""
    checks: list[Check] = []
    if spec.quality.probes is not None:
        cases = scope_cases(spec).get(scope, ())
        found = snapshot.evidence.scopes.get(scope) if snapshot.evidence is not None else None
        # what the operator's earlier runs saw: the probe tests go on from there
        earlier = found.probes.before(snapshot.probe.since if snapshot.probe else None) if found else None
        checks += probe_checks(
            snapshot.probe, cases, quality=spec.quality, confidence=spec.analysis.confidence, earlier=earlier
        )
    answers = {result.name: result for result in snapshot.webhooks.get(scope, ())}
    for hook in spec.quality.webhooks:
        answer = answers.get(hook.name)
        ok, detail = (answer.ok, answer.detail) if answer is not None else (False, "not asked")
        checks.append(webhook_check(hook.name, ok, critical=hook.critical, detail=detail))
    return tuple(checks)
