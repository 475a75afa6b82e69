"""report.md's peak and fallback rehearsal section: each arm's capacity, each ladder step's figures per arm
(and scope), and both fallbacks rehearsed at peak."""

from __future__ import annotations

from typing import Any

from specpilot.report.cells import fig

Json = dict[str, Any]

REHEARSED_ARMS = ("speculative", "control")


def _kind(step: Json) -> str:
    if step.get("burst"):
        return " (burst)"
    if step.get("flip"):
        return " (routing fallback: flipped halfway)"
    return " (restart fallback: a replica restarted)" if step.get("restart") else ""


def _fallbacks(found: Json) -> list[str]:
    """Both fallbacks rehearsed at peak, with what they cost."""
    lines = []
    flip = found.get("routingFlip")
    if flip is not None:
        recovery = (
            f"recovered in {fig(flip.get('recoverySeconds'))} s"
            if flip.get("recovered")
            else "not recovered by the step's end"
        )
        lines.append(
            f"- Routing fallback (the speculative share flipped to the control arm at {flip['at']}): {recovery}; "
            f"{flip.get('missed', 0)} of {flip.get('requests', 0)} requests on the control arm late meanwhile."
        )
    restart = found.get("restartFallback")
    if restart is not None:
        ready = (
            f"Ready in {fig(restart['secondsToReady'])} s"
            if restart.get("secondsToReady") is not None
            else "not Ready by the step's end"
        )
        lines.append(
            f"- Restart fallback (a speculative replica restarted as ordinary decoding at {restart['at']}): {ready}; "
            f"meanwhile {restart.get('missed', 0)} of {restart.get('requests', 0)} requests on the speculative arm "
            f"missed their deadline (on time {fig(restart.get('onTime'), '.1%')}), "
            f"{restart.get('fellBack', 0)} went to the control arm as no speculative replica was ready."
        )
    return [*lines, ""] if lines else []


def _step_row(label: str, load: float, arm: str, f: Json) -> str:
    kept = {True: "yes", False: "no"}.get(bool(f["keptUp"]), "") if f.get("keptUp") is not None else ""
    tpct = f.get("timePerCommittedToken")
    return (
        f"| {label} | {fig(load)} | {arm} | "
        f"{fig(f.get('completedPerReplica'))} | {kept} | {fig(f.get('onTime'), '.1%')} | "
        f"{fig(f.get('ttftP50'), '.3f')} / {fig(f.get('ttftP99'), '.3f')} | {fig(f.get('endToEndP95'), '.2f')} | "
        f"{fig(tpct * 1000 if tpct is not None else None, '.1f')} | {fig(f.get('timeoutShare'), '.1%')} | "
        f"{fig(f.get('rejectionShare'), '.1%')} | {fig(f.get('peakKvUsage'), '.0%')} | "
        f"{fig(f.get('preemptions'), 'd')} |"
    )


def rehearsal(report: Json) -> list[str]:
    """The peak rehearsal: each arm's capacity, each step's figures per arm (and scope), and both
    fallbacks rehearsed at peak."""
    found = report.get("rehearsal")
    if not found:
        return []
    lines = [
        "## Peak and fallback rehearsal",
        "",
        f"{found['phase']}: {found['message']}",
        "",
        "The scopes' own mix, replayed through a rehearsal router that reaches only the speculative and control "
        "arms, at a ladder of loads (requests per second per replica of each arm); a ladder step is read past its "
        "first analysis window, any other step over its last. An arm's capacity is the highest load it completed on "
        "a ladder step it kept up with (it finished what it was sent) while completing the on-time target.",
        "",
        f"- Speculative arm's capacity: {fig(found.get('speculativeCapacity'), unit=' requests/s per replica')}",
        f"- Control arm's capacity: {fig(found.get('controlCapacity'), unit=' requests/s per replica')}",
        "",
        "| step | load | arm | completed / replica | kept up | on time | TTFT p50 / p99 s | e2e p95 s | ms/token "
        "| timeouts | rejections | peak KV | preemptions |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for index, step in enumerate(found.get("steps", []), start=1):
        for arm in REHEARSED_ARMS:
            if step.get(arm) is not None:
                lines.append(_step_row(f"{index}{_kind(step)}", step["load"], arm, step[arm]))
            for scope in step.get("scopes", []):
                if scope.get(arm) is not None:
                    lines.append(_step_row(f"{index}", step["load"], f"{arm}: {scope['name']}", scope[arm]))
    return [*lines, "", *_fallbacks(found)]
