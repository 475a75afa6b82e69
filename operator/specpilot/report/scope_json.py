"""One scope's part of report.json: its decision, bands and comparisons, timing, progress, quality, peak,
cost, stream cadence, acceptance and workload."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from specpilot.analysis.bands import Band, Comparison, Crossover
from specpilot.analysis.decision import CostView, DecodeShare, ScopeFindings, cost_view
from specpilot.analysis.evidence import ArmTotals, Evidence, Moments, ProbeArm, ProbeCounts, ScopeEvidence
from specpilot.analysis.replay import length_summary, rounded
from specpilot.api.reasons import FallbackReason
from specpilot.api.spec import ProbeKind, SpeculationPilotSpec
from specpilot.api.status import FallbackRecord, ScopeStatus
from specpilot.wire.names import Arm

Json = dict[str, Any]
QUALITY_REASONS = frozenset({FallbackReason.QUALITY_REGRESSION, FallbackReason.CRITICAL_WEBHOOK_FAILED})


def scope_json(
    spec: SpeculationPilotSpec,
    *,
    evidence: Evidence,
    findings: ScopeFindings,
    status: ScopeStatus | None,
    replicas: Mapping[Arm, int],
    fallbacks: Sequence[FallbackRecord],
) -> Json:
    """One scope's part of report.json."""
    found = evidence.scopes.get(findings.scope, ScopeEvidence())
    scope_spec = next(s for s in spec.scopes if s.name == findings.scope)
    arms = (findings.compared, Arm.SPECULATIVE, *((Arm.ALTERNATIVE,) if findings.bands.get(Arm.ALTERNATIVE) else ()))
    return {
        "name": findings.scope,
        "state": status.state.value if status is not None else None,
        "stage": status.stage if status is not None else None,
        "weight": status.weight if status is not None else None,
        "deadlineSeconds": (scope_spec.deadline or spec.router.request_timeout).total_seconds(),
        "windows": found.windows,
        "verdicts": {verdict.value: count for verdict, count in sorted(found.verdicts.items())},
        "decision": findings.decision.to_wire(),
        "forecast": status.forecast.to_wire() if status is not None and status.forecast is not None else None,
        "bands": {arm.value: [_band(b, found.rehearsed) for b in findings.bands.get(arm, ())] for arm in arms},
        "comparisons": [_comparison(c) for c in findings.comparisons],
        "crossover": _crossover(findings.crossover),
        "timing": _timing(findings.share),
        "progress": {arm.value: _progress(found.totals.get(arm)) for arm in arms},
        "quality": {
            "windowsWithFailingChecks": found.quality_failed,
            "fallbacks": [f.to_wire() for f in fallbacks if f.scope == findings.scope and f.reason in QUALITY_REASONS],
            "probes": {kind.value: _probe_kind(kind, counts) for kind, counts in found.probes.counts().items()},
        },
        "peak": _peak(findings.comparisons[-1] if findings.comparisons else None),
        "cost": _cost(cost_view(evidence, findings.bands, replicas)),
        "chunkGaps": _chunk_gaps(spec, found, findings.compared),
        "acceptance": {
            "length": rounded(found.acceptance_length.mean, 4),
            "perPosition": [rounded(m.mean, 4) for m in found.per_position],
        },
        "workload": {
            "arrivalRatePerSecond": rounded(found.arrival_rate.mean, 4),
            "promptTokens": length_summary(found.prompt_tokens),
            "outputTokens": length_summary(found.output_tokens),
        },
    }


def _comparison(c: Comparison) -> Json:
    """The speculative arm against the compared arm at one band's load: the standard error of their
    difference, read window by window where `paired`."""
    excess = c.excess()
    return {
        "load": rounded(c.band.load, 3),
        "speculativeSeconds": rounded(c.band.tpct),
        "comparedSeconds": rounded(c.compared.tpct) if c.compared is not None else None,
        "ratio": rounded(c.ratio, 4),
        "differenceStandardErrorSeconds": rounded(excess[1]) if excess is not None else None,
        "paired": c.paired,
        "measured": c.measured,
        "powered": c.powered,
        "speculationWins": c.wins,
    }


def _crossover(cross: Crossover | None) -> Json | None:
    """The load where speculation stops paying, with its interval."""
    if cross is None:
        return None
    return {
        "load": rounded(cross.load, 3),
        "low": rounded(cross.low, 3),
        "high": rounded(cross.high, 3),
        "confidence": cross.confidence,
        "drawsCrossing": rounded(cross.draws_crossing, 4),
        "nonMonotone": cross.non_monotone,
    }


def _timing(share: DecodeShare | None) -> Json | None:
    """A request's time by phase, and the end-to-end gain the decode ratio implies beside the one observed."""
    if share is None:
        return None
    return {
        "ttftSeconds": rounded(share.ttft),
        "decodeSeconds": rounded(share.decode),
        "otherSeconds": rounded(max(0.0, share.e2e - share.ttft - share.decode)),
        "e2eSeconds": rounded(share.e2e),
        "decodeShare": rounded(share.share, 4),
        "decodeRatio": rounded(share.decode_ratio, 4),
        "decodeOnlyGain": rounded(share.decode_gain, 4),
        "impliedEndToEndGain": rounded(share.implied_gain, 4),
        "observedEndToEndGain": rounded(share.observed_gain, 4),
    }


def _peak(peak: Comparison | None) -> Json | None:
    """The comparison at the highest load measured."""
    if peak is None:
        return None
    return {
        "load": rounded(peak.band.load, 3),
        "ratio": rounded(peak.ratio, 4),
        "speculativeTtftP99Seconds": rounded(peak.band.ttft_p99),
        "speculativeOnTimeShare": rounded(peak.band.on_time / peak.band.routed, 4) if peak.band.routed else None,
    }


def _cost(cost: CostView) -> Json:
    """The draft's KV cost, and each arm's GPUs and on-time completions per GPU-hour."""
    return {
        "kvCost": rounded(cost.kv_cost, 4),
        "arms": {
            c.arm.value: {
                "gpus": c.gpus,
                "kvBlocksPerReplica": c.kv_blocks,
                "onTimeCompletionsPerGpuHour": rounded(c.on_time_per_gpu_hour, 1),
                "atLoad": rounded(c.at_load, 3),
            }
            for c in cost.arms
        },
    }


def _source(band: Band, rehearsed: Mapping[int, int]) -> str:
    """Where a band's windows came from: the live stages, the peak rehearsal, or both."""
    marked = sum(rehearsed.get(index, 0) for index in range(band.first, band.last + 1))
    if not marked:
        return "live"
    return "rehearsal" if marked >= band.windows else "live and rehearsal"


def _band(band: Band, rehearsed: Mapping[int, int]) -> Json:
    return {
        "source": _source(band, rehearsed),
        "loadLow": rounded(band.low, 3),
        "loadHigh": rounded(band.high, 3),
        "load": rounded(band.load, 3),
        "inFlightPerReplica": rounded(band.in_flight, 3),
        "windows": band.windows,
        "timePerCommittedTokenSeconds": rounded(band.tpct),
        "timePerCommittedTokenStandardError": rounded(band.tpct_se),
        "ttftP99Seconds": rounded(band.ttft_p99),
        "e2eMeanSeconds": rounded(band.e2e),
        "routed": band.routed,
        "onTime": band.on_time,
    }


def _progress(totals: ArmTotals | None) -> Json | None:
    """An arm's running sums over the scope's windows; loads are offered, running and waiting diagnostics."""
    if totals is None:
        return None
    return {
        "routed": totals.routed,
        "ok": totals.ok,
        "onTime": totals.on_time,
        "committedTokens": totals.committed_tokens,
        "decodeSeconds": rounded(totals.decode_seconds, 3),
        "offeredPerReplicaMean": rounded(totals.load.mean, 3),
        "runningPerReplicaMean": rounded(totals.running.mean, 3),
        "waitingPerReplicaMean": rounded(totals.waiting.mean, 3),
    }


def _probe_arm(kind: ProbeKind, arm: ProbeArm) -> Json:
    """One arm's answers of a probe kind: passes for the kinds with a contract, scores for sampled."""
    if kind is ProbeKind.SAMPLED:
        return {
            "answers": arm.checks,
            "scored": arm.passed,
            "meanScore": rounded(arm.scores.mean, 4),
            "scoreSd": rounded(arm.scores.sd, 4),
        }
    return {
        "checks": arm.checks,
        "passed": arm.passed,
        "passRate": rounded(arm.passed / arm.checks, 4) if arm.checks else None,
    }


def _probe_kind(kind: ProbeKind, counts: ProbeCounts) -> Json:
    """A probe kind's rounds on a scope, each probed arm's answers, and the baseline's own variation:
    for greedy, how often it diverged from its own repeat; for sampled, the spread of its scores."""
    base = counts.baseline
    variation: Json | None = None
    if kind is ProbeKind.GREEDY:
        variation = {"selfDivergences": base.checks - base.passed, "comparisons": base.checks}
    elif kind is ProbeKind.SAMPLED:
        variation = {"scoreSd": rounded(base.scores.sd, 4)}
    return {
        "rounds": counts.rounds,
        "speculative": _probe_arm(kind, counts.speculative),
        "baseline": _probe_arm(kind, base),
        "baselineVariation": variation,
    }


def _chunk_gaps(spec: SpeculationPilotSpec, found: ScopeEvidence, compared: Arm) -> Json:
    """Stream cadence: the mean over windows of each arm's chunk gap at the thresholds' quantile. A
    speculative step streams several tokens at once, so its gaps are longer by nature; they are
    judged only where the spec opts in (thresholds.interTokenLatency)."""
    spec_gap, compared_gap = (found.chunk_gaps.get(arm, Moments()).mean for arm in (Arm.SPECULATIVE, compared))
    thresholds = spec.analysis.thresholds
    return {
        "quantile": thresholds.itl_quantile,
        "speculativeSeconds": rounded(spec_gap),
        "comparedSeconds": rounded(compared_gap),
        "ratio": rounded(spec_gap / compared_gap, 4) if spec_gap is not None and compared_gap else None,
        "judged": thresholds.inter_token_latency is not None,
    }
