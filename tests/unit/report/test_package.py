"""The handover package from a pilot and its evidence: files, numbers, replay workload, determinism."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from specpilot.analysis.evidence import Evidence, Moments, ProbeArm, ProbeCounts, production_quantile, record_probes
from specpilot.api.reasons import FallbackReason, MetricName
from specpilot.api.spec import ProbeKind, SpeculationPilotSpec
from specpilot.api.status import (
    DecisionOutcome,
    FallbackRecord,
    ScopeForecast,
    ScopeState,
    ScopeStatus,
    SpeculationPilotStatus,
    Window,
)
from specpilot.controller.core.decide import decide
from specpilot.loadgen.workload import load_mix
from specpilot.report.build import build
from specpilot.report.markdown import markdown
from specpilot.report.package import write_package
from specpilot.wire.batchschedule import switched_off_above, validate
from specpilot.wire.names import Arm
from tests.unit.analysis.crossover import analytic_crossover
from tests.unit.analysis.crossover import pilot as crossover_pilot
from tests.unit.report.evidence import INTERVAL, LOADS, pilot

ROOT = Path(__file__).resolve().parents[3]
ALPHAS = {"always": 0.95, "low": 0.5, "never": 0.1}
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def manifest(*, control: bool = True, alternative: bool = False) -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "manifests/demo/pilot.yaml").read_text())
    doc["metadata"]["namespace"] = "team-a"
    stages = [{"weight": 33 if alternative else 50, "minRequests": 10, "minDuration": "10s"}]
    doc["spec"]["scopes"] = [{"name": name, "stages": stages} for name in ALPHAS]
    if not control:
        doc["spec"]["control"] = {"enabled": False}
    if alternative:
        doc["spec"]["alternative"] = {"extraArgs": ["--max-num-seqs=64"]}
    return doc


@pytest.fixture(scope="module")
def evidence() -> Evidence:
    return pilot(ALPHAS)


def test_report_numbers_and_a_provisional_decision(evidence: Evidence) -> None:
    report = build(manifest(), evidence)
    assert report["decisionStated"] is False
    assert report["decision"]["outcome"] == DecisionOutcome.ADOPT_IN_LOW_LOAD_WINDOWS
    assert report["compared"] == {"arm": "control", "name": "the control arm"}
    low = next(s for s in report["scopes"] if s["name"] == "low")
    assert low["crossover"]["load"] == pytest.approx(analytic_crossover(0.5), rel=0.15)
    assert low["timing"]["decodeShare"] > 0.5
    assert low["cost"]["kvCost"] == pytest.approx(0.2)
    assert len(low["acceptance"]["perPosition"]) == 3
    (schedule,) = report["schedules"]
    assert schedule["recommendation"] is True and schedule["derivedFrom"] == "low"
    assert schedule["batchMeasuredAtLoad"] <= schedule["crossoverLow"]
    per_batch = schedule["speculativeConfig"]["num_speculative_tokens_per_batch_size"]
    switch = int(schedule["inFlightPerReplica"])
    # the demo pilot's two draft tokens up to the batch it ran at below the crossover, none above
    assert per_batch == [[1, switch, 2], [switch + 1, switch + 1, 0]]
    assert switched_off_above(validate(per_batch)) == switch


def test_speculation_is_set_against_the_control_arm_at_the_same_offered_load(evidence: Evidence) -> None:
    report = build(manifest(), evidence)
    low = next(s for s in report["scopes"] if s["name"] == "low")
    assert set(low["bands"]) == {"control", "speculative"}
    assert [b["load"] for b in low["bands"]["control"]] == [b["load"] for b in low["bands"]["speculative"]]
    lowest = min(c["load"] for c in low["comparisons"])  # requests per second, not concurrency
    assert min(LOADS) <= lowest < 1 and lowest == low["bands"]["speculative"][0]["load"]
    for comparison in low["comparisons"]:
        assert set(comparison) == {
            "load",
            "speculativeSeconds",
            "comparedSeconds",
            "ratio",
            "differenceStandardErrorSeconds",
            "paired",
            "measured",
            "powered",
            "speculationWins",
        }
        assert comparison["measured"] is True and comparison["paired"] is True
        assert comparison["ratio"] == pytest.approx(
            comparison["speculativeSeconds"] / comparison["comparedSeconds"], rel=1e-3
        )
        if comparison["speculationWins"]:  # a win is at least 3% faster, beyond the windows' spread
            assert comparison["ratio"] <= 1 / 1.03
    assert set(low["progress"]) == {"control", "speculative"}
    assert low["progress"]["control"]["offeredPerReplicaMean"] == pytest.approx(sum(LOADS) / len(LOADS), rel=0.01)
    assert report["arms"]["control"]["role"] == "compared"
    assert report["arms"]["baseline"]["role"] == "production, watched"
    assert report["arms"]["control"]["replicas"] == 1


def test_production_is_watched_and_the_comparison_priced(evidence: Evidence) -> None:
    report = build(manifest(), evidence)
    production = report["production"]
    assert production["windows"] == 4 * len(LOADS)
    assert production["offeredPerReplica"] == {
        key: pytest.approx(production_quantile(evidence.production, q), abs=1e-3)
        for key, q in (("p50", 0.5), ("p95", 0.95), ("max", 1.0))
    }
    assert production["offeredPerReplica"]["max"] >= max(LOADS) / 2
    decisions = {s["name"]: s["decision"] for s in report["scopes"]}
    assert production["productionCovered"] == {
        name: pytest.approx(decision.get("productionCovered"), abs=1e-4) for name, decision in decisions.items()
    }
    assert production["productionCovered"]["never"] is None  # deferred: covers nothing
    assert 0.5 < production["productionCovered"]["low"] <= 1  # production runs at half the pilot's loads
    hours = 4 * len(LOADS) * INTERVAL.total_seconds() / 3600
    assert report["comparisonCost"] == {
        "gpus": 1,
        "hoursCovered": pytest.approx(hours, abs=1e-3),
        "gpuHours": pytest.approx(hours, abs=1e-3),
    }
    md = markdown(report, [])
    assert "## Production" in md and "watched, not compared" in md
    assert "the price of comparing speculation with ordinary decoding at matched load" in md
    assert "requests per second per replica" in md and "concurrent" not in md


def test_stream_cadence_is_reported_and_not_judged_by_default(evidence: Evidence) -> None:
    """The gap between streamed chunks grows with the tokens a speculative step commits: reported, and
    judged only where the spec opts in."""
    report = build(manifest(), evidence)
    gaps = {s["name"]: s["chunkGaps"] for s in report["scopes"]}
    assert gaps["always"]["ratio"] == pytest.approx((1 + 3 * 0.95) / 2, rel=1e-3)
    assert gaps["always"]["comparedSeconds"] == pytest.approx(0.03)
    assert gaps["never"]["ratio"] == pytest.approx((1 + 3 * 0.1) / 2, rel=1e-3)
    assert {g["judged"] for g in gaps.values()} == {False} and gaps["always"]["quantile"] == 0.99
    md = markdown(report, [])
    assert "- always: p99 57.8 ms against 30.0 ms, 1.93x; not judged." in md
    opted = manifest()
    opted["spec"]["analysis"]["thresholds"]["interTokenLatency"] = {"quantile": 0.99, "maxRatio": 3.0}
    assert build(opted, evidence)["scopes"][0]["chunkGaps"]["judged"] is True


def test_quality_by_scope_lists_each_probe_kind_per_arm_beside_the_baselines_own_variation(
    evidence: Evidence,
) -> None:
    def arm(checks: int, passed: int, *scores: float) -> ProbeArm:
        moments = Moments()
        for score in scores:
            moments = moments.add(score)
        return ProbeArm(checks=checks, passed=passed, scores=moments)

    earlier = {ProbeKind.GREEDY: ProbeCounts(rounds=10, baseline=arm(20, 19), speculative=arm(40, 40))}
    now = {
        ProbeKind.GREEDY: ProbeCounts(rounds=2, baseline=arm(4, 4), speculative=arm(8, 7)),
        ProbeKind.TOOL_CALL: ProbeCounts(rounds=2, baseline=arm(2, 2), speculative=arm(2, 1)),
        ProbeKind.SAMPLED: ProbeCounts(rounds=1, baseline=arm(4, 4, 1, 2, 3, 4), speculative=arm(4, 4, 1, 1, 2, 2)),
    }
    # an operator restart between the two runs: the first run's counts are kept beside the second's
    probed = record_probes(record_probes(evidence, {"low": earlier}, since=NOW), {"low": now}, since=NOW + INTERVAL)
    report = build(manifest(), probed)
    probes = next(s for s in report["scopes"] if s["name"] == "low")["quality"]["probes"]
    assert list(probes) == ["greedy", "toolCall", "sampled"]
    assert probes["greedy"] == {
        "rounds": 12,
        "speculative": {"checks": 48, "passed": 47, "passRate": pytest.approx(47 / 48, abs=1e-4)},
        "baseline": {"checks": 24, "passed": 23, "passRate": pytest.approx(23 / 24, abs=1e-4)},
        "baselineVariation": {"selfDivergences": 1, "comparisons": 24},
    }
    assert probes["toolCall"]["speculative"]["passRate"] == 0.5 and probes["toolCall"]["baselineVariation"] is None
    assert probes["sampled"]["speculative"] == {"answers": 4, "scored": 4, "meanScore": 1.5, "scoreSd": 0.5774}
    assert probes["sampled"]["baselineVariation"] == {"scoreSd": 1.291}
    assert next(s for s in report["scopes"] if s["name"] == "always")["quality"]["probes"] == {}
    md = markdown(report, [])
    assert "| scope | kind | rounds | speculative | baseline | baseline's own variation |" in md
    assert (
        "| low | greedy | 12 | 47/48 (98%) equal to the baseline | 23/24 (96%) equal to its repeat | "
        "1 self-divergence(s) in 24 |"
    ) in md
    assert "| low | toolCall | 2 | 1/2 (50%) pass | 2/2 (100%) pass | n/a |" in md
    assert (
        "| low | sampled | 1 | mean score 1.5 (sd 0.577) over 4 of 4 answers | "
        "mean score 2.5 (sd 1.29) over 4 of 4 answers | score sd 1.29 |"
    ) in md


def test_the_report_says_whether_the_same_gpus_do_better_without_speculation() -> None:
    report = build(manifest(alternative=True), pilot(ALPHAS, alternative=True))
    scopes = {s["name"]: s for s in report["scopes"]}
    never = scopes["never"]["decision"]["alternative"]
    assert never["verdict"] == "AlternativeBetter", never
    assert never["ratio"] == pytest.approx(0.9, rel=0.05)
    assert never["speculativeRatio"] > 1 and never["observedGain"] > 1
    assert scopes["always"]["decision"]["alternative"]["speculativeRatio"] < 1
    assert scopes["never"]["bands"]["alternative"], "its bands, at the compared pair's loads"
    cost = scopes["never"]["cost"]["arms"]["alternative"]
    assert cost["gpus"] == 1 and cost["onTimeCompletionsPerGpuHour"] is not None
    md = markdown(report, [])
    assert "## The same GPUs without speculation" in md
    assert "| never | AlternativeBetter | 0.9" in md and never["reason"] in md
    assert "## The same GPUs without speculation" not in markdown(build(manifest(), pilot(ALPHAS)), [])


def test_without_a_control_arm_speculation_is_compared_with_production_only_where_both_ran() -> None:
    report = build(manifest(control=False), pilot(ALPHAS, control=False))
    assert report["compared"] == {"arm": "baseline", "name": "the production baseline"}
    assert "control" not in report["arms"] and report["comparisonCost"] is None
    assert report["arms"]["baseline"]["role"] == "production, compared"
    always = next(s for s in report["scopes"] if s["name"] == "always")
    assert set(always["bands"]) == {"baseline", "speculative"}
    unmeasured = [c for c in always["comparisons"] if not c["measured"]]
    assert unmeasured and all(c["load"] > max(LOADS) / 2 for c in unmeasured)  # above where production ran
    for comparison in unmeasured:
        assert comparison["comparedSeconds"] is None and comparison["ratio"] is None
        assert comparison["speculationWins"] is False
    assert always["decision"]["maxLoad"] <= max(LOADS) / 2
    md = markdown(report, [])
    assert "compared with the production baseline" in md and "| unmeasured |" in md
    assert "The pilot runs without a control arm" in md


def test_the_package_is_written_and_reads_back(tmp_path: Path, evidence: Evidence) -> None:
    folder = write_package(manifest(), evidence, tmp_path / "pkg")
    names = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    assert names == [
        "plots/acceptance.png",
        "plots/decode_share.png",
        "plots/kv_cache.png",
        "plots/load.png",
        "replay/pilot.yaml",
        "replay/workload.yaml",
        "report.json",
        "report.md",
    ]
    for png in folder.glob("plots/*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    md = (folder / "report.md").read_text()
    assert md.startswith("# Speculation pilot team-a/demo: AdoptInLowLoadWindows")
    assert (
        "| offered load | windows | source | in flight (speculative) | speculative ms/token | control ms/token |" in md
    )
    assert "Recommended dynamic speculation schedule" in md and "not something the pilot ran" in md
    mix = load_mix(str(folder / "replay/workload.yaml"))
    assert [scope.name for scope in mix] == list(ALPHAS)
    assert mix[0].input_tokens.dist == "lognormal" and mix[0].input_tokens.low == 100
    replayed = yaml.safe_load((folder / "replay/pilot.yaml").read_text())
    assert replayed == {k: v for k, v in manifest().items() if k != "status"} | {
        "metadata": {"name": "demo", "namespace": "team-a"}
    }
    assert json.loads((folder / "report.json").read_text())["pilot"]["name"] == "demo"


def test_the_same_evidence_gives_the_same_package_byte_for_byte(tmp_path: Path, evidence: Evidence) -> None:
    first = write_package(manifest(), evidence, tmp_path / "a")
    second = write_package(manifest(), evidence, tmp_path / "b")
    for path in first.rglob("*"):
        if path.is_file():
            assert path.read_bytes() == (second / path.relative_to(first)).read_bytes(), path


def test_a_stated_decision_is_reported_as_stated_while_the_evidence_moves_within_its_noise() -> None:
    doc = manifest()
    spec = SpeculationPilotSpec.from_wire(doc["spec"])
    settled = [ScopeStatus(name=name, state=ScopeState.SPECULATIVE) for name in ALPHAS]
    stated = decide(pilot(ALPHAS), spec=spec, scopes=settled, fallbacks=[], annotations={}, previous=None, now=NOW)
    assert stated.decision is not None
    doc["status"] = SpeculationPilotStatus(scopes=stated.scopes, decision=stated.decision).to_wire()
    later = pilot(ALPHAS, per_load=5)  # more windows since: other sentences, the same decisions
    report = build(doc, later)
    assert report["decisionStated"] is True
    for scope in report["scopes"]:
        expected = next(s.decision for s in stated.scopes if s.name == scope["name"])
        assert expected is not None and scope["decision"]["reasons"] == expected.reasons
    fresh = build(manifest(), later)
    assert [s["decision"]["reasons"] for s in fresh["scopes"]] != [s["decision"]["reasons"] for s in report["scopes"]]


def test_a_flip_for_a_latency_limit_is_reported_where_that_limit_fails_not_as_a_crossover(evidence: Evidence) -> None:
    doc = manifest()
    spec = SpeculationPilotSpec.from_wire(doc["spec"])
    flip = FallbackRecord(
        scope="always",
        at=NOW,
        reason=FallbackReason.THRESHOLD_EXCEEDED,
        metric=MetricName.INTER_TOKEN_LATENCY_RATIO,
        observed=5.99,
        threshold=4.0,
        window=Window(start=NOW, end=NOW),
        loads={Arm.SPECULATIVE: 18.0, Arm.CONTROL: 18.0},
    )
    scopes = [
        ScopeStatus(name=name, state=ScopeState.ROLLED_BACK if name == "always" else ScopeState.SPECULATIVE)
        for name in ALPHAS
    ]
    stated = decide(evidence, spec=spec, scopes=scopes, fallbacks=[flip], annotations={}, previous=None, now=NOW)
    always = next(s.decision for s in stated.scopes if s.name == "always")
    assert always is not None and always.limit_failure is not None and always.crossover_high is None
    doc["status"] = SpeculationPilotStatus(scopes=stated.scopes, decision=stated.decision, fallbacks=[flip]).to_wire()
    row = next(line for line in markdown(build(doc, evidence), []).splitlines() if line.startswith("| always |"))
    assert (
        f"| none measured; the interTokenLatencyRatio limit fails between {always.limit_failure.low:.2f} and 18.00 |"
        in row
    ), row


def test_a_rehearsal_in_status_is_reported_with_each_arms_capacity_and_a_plot(
    tmp_path: Path, evidence: Evidence
) -> None:
    doc = manifest()
    doc["spec"]["rehearsal"] = {"peak": {"perReplica": 6.0}, "steps": 3, "stepDuration": "1m"}
    figures = {
        "speculative": [(2.0, True, 1.0, 0.3), (4.0, True, 0.995, 0.5), (6.0, False, 0.9, 2.5)],
        "control": [(2.0, True, 1.0, 0.4), (4.0, True, 0.97, 0.9), (6.0, False, 0.5, 4.0)],
    }
    steps = [
        {
            "load": load,
            "startedAt": f"2026-12-01T12:0{index}:00Z",
            **{
                arm: {
                    "requests": 100,
                    "completedPerReplica": load if kept else load / 2,
                    "keptUp": kept,
                    "onTime": on_time,
                    "ttftP99": ttft,
                }
                for arm, rows in figures.items()
                for (load_, kept, on_time, ttft) in [rows[index]]
            },
        }
        for index, load in enumerate((2.0, 4.0, 6.0))
    ]
    doc["status"] = {
        "rehearsal": {
            "phase": "Completed",
            "message": "every step ran",
            "scopes": list(ALPHAS),
            "step": 2,
            "steps": steps,
            "speculativeCapacity": 4.0,
            "controlCapacity": 2.0,
            "routingFlip": {
                "at": "2026-12-01T12:03:30Z",
                "recovered": True,
                "recoverySeconds": 4.5,
                "missed": 3,
                "requests": 120,
            },
            "restartFallback": {
                "at": "2026-12-01T12:04:00Z",
                "readyAt": "2026-12-01T12:04:42Z",
                "secondsToReady": 42.0,
                "requests": 80,
                "missed": 2,
                "onTime": 0.975,
                "fellBack": 0,
            },
        }
    }
    steps[0]["scopes"] = [
        {"name": name, "speculative": {"requests": 50, "onTime": on_time}}
        for name, on_time in (("a", 1.0), ("b", 0.98))
    ]
    folder = write_package(doc, evidence, tmp_path / "pkg")
    md = (folder / "report.md").read_text()
    assert "## Peak and fallback rehearsal" in md
    assert "- Speculative arm's capacity: 4.00 requests/s per replica" in md
    assert "- Control arm's capacity: 2.00 requests/s per replica" in md
    assert "| 3 | 6.00 | speculative | 3.00 | no | 90.0% |" in md
    assert "| 1 | 2.00 | speculative: b | n/a |  | 98.0% |" in md  # each scope's figures, when several ran
    assert "- Routing fallback (the speculative share flipped to the control arm at 2026-12-01T12:03:30Z): " in md
    assert "recovered in 4.50 s; 3 of 120 requests on the control arm late meanwhile." in md
    assert "restarted as ordinary decoding at 2026-12-01T12:04:00Z): Ready in 42.00 s; meanwhile 2 of 80" in md
    png = folder / "plots/rehearsal.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert json.loads((folder / "report.json").read_text())["rehearsal"]["controlCapacity"] == 2.0


def test_each_band_says_whether_the_live_stages_or_the_rehearsal_measured_it() -> None:
    evidence = crossover_pilot({"always": 0.95}, loads=(1, 1.5, 2, 6, 8, 10), production=1.0, rehearsed_from=6)
    report = build(manifest(), evidence)
    always = next(s for s in report["scopes"] if s["name"] == "always")
    sources = {band["source"] for band in always["bands"]["speculative"]}
    assert "live" in sources and sources & {"rehearsal", "live and rehearsal"}
    assert all(band["source"] == "live" for band in always["bands"]["speculative"] if band["loadHigh"] <= 3)
    assert all(band["source"] != "live" for band in always["bands"]["speculative"] if band["loadLow"] >= 5)
    md = markdown(report, [])
    assert "| rehearsal |" in md or "| live and rehearsal |" in md


def test_the_report_says_how_many_requests_each_arms_cache_holds_at_the_scopes_lengths(evidence: Evidence) -> None:
    sized = evidence.model_copy(update={"block_size": 16})
    report = build(manifest(), sized)
    found = report["concurrency"]
    # the evidence's requests: prompts of 100 and 200 tokens, answers of 50 and 150, a lognormal fit
    assert 200 < found["tokensPerRequest"] < 330 and found["blockSize"] == 16 and found["blockSizeReported"]
    per_request = found["blocksPerRequest"]
    assert per_request == math.ceil(found["tokensPerRequest"] / 16)
    arms = found["arms"]
    assert arms["speculative"] == {"kvBlocks": 800, "concurrentRequests": 800 // per_request}
    assert arms["baseline"]["concurrentRequests"] == 1000 // per_request
    md = markdown(report, [])
    assert f"{per_request} blocks of 16 tokens" in md and "--max-num-seqs" in md
    unreported = build(manifest(), evidence)["concurrency"]
    assert unreported["blockSize"] == 16 and not unreported["blockSizeReported"]
    assert found["schedulerLimit"] is None
    # the scheduler's limit as vLLM takes it: `--max-num-seqs=N` or `--max-num-seqs N`, the last one counting
    for args, limit in (
        (["--max-num-seqs=64"], 64),
        (["--max-num-seqs", "32"], 32),
        (["--max-num-seqs=8", "--enforce-eager", "--max-num-seqs", "16"], 16),
        (["--max-num-seqs"], None),
    ):
        doc = manifest()
        doc["spec"]["engine"]["extraArgs"] = args
        assert build(doc, sized)["concurrency"]["schedulerLimit"] == limit, args


def test_each_scopes_forecast_is_reported_beside_its_bands_and_a_disagreement_as_a_finding(evidence: Evidence) -> None:
    doc = manifest()
    wrong = ScopeForecast(
        profile="h200-llama-3.1-8b-draft-1b",
        crossover_load=79.3,
        crossover_low=70.1,
        crossover_high=88.0,
        reach=243.0,
        max_batch=256,
        committed=2.77,
        windows=8,
        measured_low=2.0,
        measured_high=10.0,
        disagrees=True,
    )
    beyond = wrong.model_copy(update={"crossover_load": None, "crossover_high": None, "disagrees": False})
    scopes = [
        ScopeStatus(name="low", forecast=wrong),
        ScopeStatus(name="always", forecast=beyond),
        ScopeStatus(name="never"),
    ]
    doc["status"] = SpeculationPilotStatus(scopes=scopes).to_wire()
    report = build(doc, evidence)
    by_name = {scope["name"]: scope for scope in report["scopes"]}
    assert by_name["low"]["forecast"] == wrong.to_wire() and by_name["never"]["forecast"] is None
    text = markdown(report, [])
    low = text[text.index("### low") :]
    assert (
        "Forecast from h200-llama-3.1-8b-draft-1b at 2.77 committed tokens per round (8 windows): crossover at "
        "79.30 (interval 70.10 to 88.00), offered load per replica. **The measured bands lie outside it"
    ) in low
    always = text[text.index("### always") :]
    assert "speculation still pays at batch 256 (243.00)" in always.split("###")[1]
    assert "Forecast" not in text[text.index("### never") :].split("###")[1]
