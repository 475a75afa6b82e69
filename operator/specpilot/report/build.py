"""The handover package's content, from the pilot object and its evidence store: every number as
JSON-ready data (report.json, which `markdown` and `plots` draw from), the replay workload and,
where speculation wins only below a load, a dynamic speculation schedule. Pure and deterministic:
the same pilot and evidence give the same package byte for byte, so a report after an operator
restart equals the one before.

Loads are offered loads: requests per second per replica, over every scope an arm serves. The
speculative arm is set against the compared arm (the control arm, or production's baseline for a
pilot without one); production's baseline is otherwise only watched, and reported as such.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from specpilot.analysis.bands import Band
from specpilot.analysis.decision import (
    COMPARED_NAMES,
    ScopeFindings,
    decide_pilot,
    decide_scope,
    envelope_peak,
)
from specpilot.analysis.evidence import (
    Evidence,
    production_quantile,
)
from specpilot.analysis.replay import length_summary, replay_workload, rounded
from specpilot.analysis.scheduled import scheduled_arm
from specpilot.api.flags import flag_value
from specpilot.api.spec import SpeculationPilotSpec
from specpilot.api.status import (
    AdoptionBound,
    ArmsStatus,
    Decision,
    DecisionOutcome,
    DecisionTrigger,
    SpeculationPilotStatus,
    WorkloadStatus,
)
from specpilot.report.followed import FollowedPilot, followed_json, follows, switch_json
from specpilot.report.scope_json import scope_json
from specpilot.wire.batchschedule import below_and_off
from specpilot.wire.names import Arm

Json = dict[str, Any]


def _seconds(duration: timedelta) -> float:
    return duration.total_seconds()


_NO_SCHEDULE_FOR_TTFT = (
    "its TTFT tail fails the limit at every load it decodes faster at, so no load adopted gives a batch to draft "
    "up to; whether drafting only at smaller batches holds the tail is for a pilot of its own"
)


def _batch_below(findings: ScopeFindings, load: float) -> Band | None:
    """The speculative band of the most requests in flight at or below `load`: the batch it ran at."""
    below = [b for b in findings.bands.get(Arm.SPECULATIVE, ()) if b.load <= load and b.in_flight is not None]
    return max(below, key=lambda b: b.in_flight or 0.0, default=None)


def schedule(spec: SpeculationPilotSpec, findings: ScopeFindings) -> Json | None:
    """A recommended batch-size schedule (vLLM's dynamic speculative decoding, in the engine's release's
    form) where speculation is adopted only below a load: the draft's k up to the batch the speculative
    arm ran at, at the highest load adopted (its requests in flight per replica there, the router's: at
    least the engines' batch), 0 above it. Where speculation decodes faster but its TTFT tail fails the
    limit at every load it wins at, the reason none is recommended. None where neither applies, or no
    band lies that low."""
    decision = findings.decision
    bound = decision.bound.kind if decision.bound is not None else None
    if decision.outcome is DecisionOutcome.DEFER and bound is AdoptionBound.TTFT_LIMIT:
        return {"recommendation": False, "derivedFrom": findings.scope, "why": _NO_SCHEDULE_FOR_TTFT}
    if decision.outcome is not DecisionOutcome.ADOPT_IN_LOW_LOAD_WINDOWS or decision.max_load is None:
        return None
    band = _batch_below(findings, decision.max_load)
    if band is None or band.in_flight is None:
        return None
    batch = max(1, math.floor(band.in_flight))
    k = spec.speculative.draft.num_speculative_tokens
    config: Json = {"method": spec.speculative.draft.method.value}
    if spec.speculative.draft.model is not None:
        config["model"] = spec.speculative.draft.model
    config["num_speculative_tokens"] = k
    config[spec.vllm_release.schedule_key] = [r.render() for r in below_and_off(k, batch)]
    return {
        "recommendation": True,
        "derivedFrom": findings.scope,
        "adoptedBelow": rounded(decision.max_load, 3),
        "boundBy": decision.bound.kind.value if decision.bound is not None else None,
        "crossoverLoad": rounded(decision.crossover_load, 3),
        "crossoverLow": rounded(decision.crossover_low, 3),
        "batchMeasuredAtLoad": rounded(band.load, 3),
        "inFlightPerReplica": rounded(band.in_flight, 3),
        "lastSpeculativeBatchSize": batch,
        "speculativeConfig": config,
    }


def provisional(
    spec: SpeculationPilotSpec, evidence: Evidence, status: SpeculationPilotStatus | None
) -> tuple[list[ScopeFindings], Decision, bool]:
    """The scopes' findings and the pilot's decision: the one in status when stated, else provisional."""
    fallbacks = status.fallbacks if status is not None else []
    by_name = {scope.name: scope for scope in status.scopes} if status is not None else {}
    findings = [
        decide_scope(
            scope.name,
            evidence,
            fallbacks=fallbacks,
            confidence=spec.analysis.confidence,
            state=by_name[scope.name].state if scope.name in by_name else None,
            ttft=spec.analysis.thresholds.ttft,
            peak=envelope_peak(spec, evidence, status.rehearsal if status is not None else None),
            scheduled=scheduled_arm(spec),
        )
        for scope in spec.scopes
    ]
    stated = status.decision if status is not None else None
    if stated is not None:
        # The decisions as stated: the evidence may have moved within their noise since (they are
        # restated only when it moves beyond it), and the report says what status says.
        kept = {name: scope.decision for name, scope in by_name.items() if scope.decision is not None}
        return [replace(f, decision=kept.get(f.scope, f.decision)) for f in findings], stated, True
    last = max((s.last_end for s in evidence.scopes.values() if s.last_end is not None), default=None)
    at = last or datetime(1970, 1, 1, tzinfo=UTC)
    return findings, decide_pilot(findings, trigger=DecisionTrigger.REQUESTED, now=at), False


def _role(arm: Arm, compared: Arm) -> str | None:
    """What an arm is to the comparison: production's baseline is compared only without a control."""
    if arm is Arm.BASELINE:
        return "production, compared" if compared is Arm.BASELINE else "production, watched"
    return "compared" if arm is compared else None


def arm_label(report: Json, arm: str) -> str:
    """An arm's name in the report, with what it is to the comparison where that is not its name."""
    role = report["arms"].get(arm, {}).get("role")
    return f"{arm} ({role})" if role else arm


def _production(evidence: Evidence, findings: Sequence[ScopeFindings]) -> Json:
    """Production's offered load per replica (upper edges of its load bins), and the share of its windows
    each scope's decision covers."""
    quantiles = (("p50", 0.5), ("p95", 0.95), ("max", 1.0))
    return {
        "windows": sum(evidence.production.values()),
        "offeredPerReplica": {key: rounded(production_quantile(evidence.production, q), 3) for key, q in quantiles},
        "productionCovered": {f.scope: rounded(f.decision.production_covered, 4) for f in findings},
    }


def _comparison_cost(spec: SpeculationPilotSpec, evidence: Evidence) -> Json | None:
    """The price of comparing at matched load: the control arm's GPUs over the time the evidence covers
    (the most windows of a scope, one per analysis.interval); None without a control arm."""
    if evidence.compared is not Arm.CONTROL:
        return None
    gpus = evidence.gpus.get(Arm.CONTROL)
    windows = max((scope.windows for scope in evidence.scopes.values()), default=0)
    hours = windows * _seconds(spec.analysis.interval) / 3600
    return {
        "gpus": gpus,
        "hoursCovered": rounded(hours, 3),
        "gpuHours": rounded(gpus * hours, 3) if gpus is not None else None,
    }


DEFAULT_BLOCK_SIZE = 16  # vLLM's KV-cache block size on GPUs, where the engines do not report theirs


def _concurrency(spec: SpeculationPilotSpec, evidence: Evidence, workload: WorkloadStatus | None) -> Json | None:
    """The concurrency the draft costs: how many requests of the scopes' mean length (prompt and answer,
    weighted by their arrival rates) each arm's KV cache holds at once per replica, beside the scheduler's
    own limit where the engine's flags set one; None before any length or KV block count is known."""
    tokens = [
        (rate, prompt["mean"] + output["mean"])
        for found in evidence.scopes.values()
        if (rate := found.arrival_rate.mean)
        and (prompt := length_summary(found.prompt_tokens)) is not None
        and (output := length_summary(found.output_tokens)) is not None
    ]
    if not tokens or not evidence.kv_blocks:
        return None
    mean = sum(rate * length for rate, length in tokens) / sum(rate for rate, _ in tokens)
    size = evidence.block_size or DEFAULT_BLOCK_SIZE
    per_request = math.ceil(mean / size)
    args = spec.engine.extra_args if spec.engine is not None else (workload.args if workload is not None else [])
    limit = _flag_value(args, "--max-num-seqs")
    return {
        "tokensPerRequest": rounded(mean, 1),
        "blockSize": size,
        "blockSizeReported": evidence.block_size is not None,
        "blocksPerRequest": per_request,
        "schedulerLimit": limit,
        "arms": {
            arm.value: {"kvBlocks": blocks, "concurrentRequests": blocks // per_request}
            for arm, blocks in sorted(evidence.kv_blocks.items())
        },
    }


def build(pilot: Mapping[str, Any], evidence: Evidence, *, followed: FollowedPilot | None = None) -> Json:
    """Every number of the package, from the pilot object as the API server holds it; `followed`: the pilot
    it follows (its annotation's), where that one is still there."""
    spec = SpeculationPilotSpec.from_wire(pilot["spec"])
    status = SpeculationPilotStatus.from_wire(pilot["status"]) if pilot.get("status") else None
    findings, decision, stated = provisional(spec, evidence, status)
    by_name = {scope.name: scope for scope in (status.scopes if status is not None else [])}
    replicas = _replicas(spec, evidence)
    fallbacks = status.fallbacks if status is not None else []
    scopes = []
    for found in findings:
        scopes.append(
            scope_json(
                spec,
                evidence=evidence,
                findings=found,
                status=by_name.get(found.scope),
                replicas=replicas,
                fallbacks=fallbacks,
            )
        )
    schedules = [s for s in (schedule(spec, f) for f in findings) if s is not None]
    mix, rate = replay_workload(spec, evidence)
    last = max((s.last_end for s in evidence.scopes.values() if s.last_end is not None), default=None)
    meta = pilot.get("metadata", {})
    return {
        "pilot": {"name": meta.get("name"), "namespace": meta.get("namespace"), "generation": meta.get("generation")},
        "evidenceAsOf": last.isoformat() if last is not None else None,
        "decisionStated": stated,
        "decision": decision.to_wire(),
        "compared": {"arm": evidence.compared.value, "name": COMPARED_NAMES[evidence.compared]},
        "production": _production(evidence, findings),
        "comparisonCost": _comparison_cost(spec, evidence),
        "concurrency": _concurrency(spec, evidence, status.workload if status is not None else None),
        "scopes": scopes,
        "arms": _arms(evidence, replicas, status.arms if status is not None else None),
        "configurations": _configurations(spec),
        "envelope": {
            "sampling": spec.sampling.to_wire(),
            "maxModelLen": spec.engine.max_model_len if spec.engine is not None else None,
            "totalArrivalRatePerSecond": rounded(rate, 4),
        },
        "fallbacks": [f.to_wire() for f in fallbacks],
        "kvUsage": {
            arm.value: [[p.at.isoformat(), rounded(p.usage, 4)] for p in points]
            for arm, points in sorted(evidence.kv_usage.items())
        },
        "kvUsageLimit": spec.analysis.thresholds.kv_cache_usage.max,
        "schedules": schedules,
        "switch": switch_json(scheduled_arm(spec), findings),
        "followed": followed_json(
            follows(pilot), build(followed.pilot, followed.evidence) if followed is not None else None
        ),
        "replay": {"mix": mix, "ratePerSecond": rounded(rate, 4)},
        "rehearsal": status.rehearsal.to_wire() if status is not None and status.rehearsal is not None else None,
    }


def _replicas(spec: SpeculationPilotSpec, evidence: Evidence) -> dict[Arm, int]:
    """Each arm's replicas: as the spec sets them, or as the evidence saw them."""
    replicas = {
        Arm.BASELINE: spec.baseline.replicas,
        Arm.SPECULATIVE: spec.speculative.replicas,
        **({Arm.CONTROL: spec.speculative.replicas} if spec.control.enabled else {}),
        **({Arm.ALTERNATIVE: spec.alternative.replicas} if spec.alternative else {}),
    }
    replicas.update(evidence.replicas)
    return replicas


def _arms(evidence: Evidence, replicas: Mapping[Arm, int], arms_status: ArmsStatus | None) -> Json:
    """Each arm the pilot runs: its role in the comparison, size, config hash and peak KV usage."""
    return {
        arm.value: {
            "role": _role(arm, evidence.compared),
            "replicas": replicas.get(arm),
            "gpus": evidence.gpus.get(arm),
            "kvBlocksPerReplica": evidence.kv_blocks.get(arm),
            "configHash": getattr(arms_status, arm.value).config_hash
            if arms_status is not None and getattr(arms_status, arm.value) is not None
            else evidence.config_hashes.get(arm),
            "kvUsageMax": rounded(max((p.usage for p in evidence.kv_usage.get(arm, [])), default=None), 4),
        }
        for arm in Arm
        if arm in replicas
    }


def _configurations(spec: SpeculationPilotSpec) -> Json:
    """The engine and arm specs the pilot froze."""
    return {
        **({"engine": spec.engine.to_wire()} if spec.engine is not None else {}),
        **({"workloadRef": spec.workload_ref.to_wire()} if spec.workload_ref is not None else {}),
        "baseline": spec.baseline.to_wire(),
        "speculative": spec.speculative.to_wire(),
        "control": spec.control.to_wire(),
        **({"alternative": spec.alternative.to_wire()} if spec.alternative else {}),
    }


def pilot_manifest(pilot: Mapping[str, Any]) -> Json:
    """The pilot as someone would apply it again: identity and spec, no status or server fields."""
    meta = pilot.get("metadata", {})
    return {
        "apiVersion": pilot.get("apiVersion"),
        "kind": pilot.get("kind"),
        "metadata": {"name": meta.get("name"), **({"namespace": meta["namespace"]} if "namespace" in meta else {})},
        "spec": pilot["spec"],
    }


def _flag_value(args: Sequence[str], flag: str) -> int | None:
    """An integer flag's value in `args`; None when absent or not a number."""
    text = flag_value(args, flag)
    return int(text) if text is not None and text.isdigit() else None
