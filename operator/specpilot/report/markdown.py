"""report.md: the summary and the decision first, then the evidence by scope and load."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from specpilot.report.build import arm_label
from specpilot.report.cells import fig
from specpilot.report.rehearsal_section import rehearsal
from specpilot.report.schedule_section import SCHEDULE_PLOT_PREFIX, piloted_schedule

Json = dict[str, Any]


def _limit_failure(failed: Json) -> str:
    """A latency or error limit's failure bracket, in the crossover column: no crossover, and why."""
    return f"none measured; the {failed['metric']} limit fails between {failed['low']:.2f} and {failed['high']:.2f}"


def _loads(report: Json) -> list[str]:
    """What a load is, and which arm speculation is set against at it."""
    compared = report["compared"]
    if compared["arm"] == "control":
        against = (
            "the control arm: the baseline's engine at the speculative arm's size, sent a copy of every request "
            "the speculative arm takes, so the two serve the same requests at the same offered load"
        )
    else:
        against = (
            "the production baseline (the pilot runs without a control arm), only at the offered loads both ran "
            "at: a speculative band where it never ran is unmeasured, and never a win"
        )
    return [
        "Loads are offered load: requests per second per engine replica, over every scope an arm serves. "
        f"Speculation is compared with {against}. Requests in flight per replica (concurrency) follow from an "
        "arm's speed, so they are kept as a diagnostic, not as a load to compare at.",
        "",
    ]


def _production(report: Json) -> list[str]:
    """Production's load, watched, and how much of it each scope's decision covers."""
    production, compared = report["production"], report["compared"]
    role = (
        "the compared arm: the pilot runs without a control arm"
        if compared["arm"] == "baseline"
        else f"watched, not compared: speculation is compared with {compared['name']}"
    )
    lines = ["## Production", ""]
    if production["windows"]:
        load = production["offeredPerReplica"]
        lines.append(
            f"Production's baseline is {role}. Over {production['windows']} window(s) it ran at an offered load of "
            f"p50 {fig(load['p50'])}, p95 {fig(load['p95'])}, max {fig(load['max'])} requests per second per replica "
            "(upper edges of its load bins)."
        )
    else:
        lines.append(f"Production's baseline is {role}; its load has not been watched yet.")
    lines += ["", "| scope | outcome | adopted up to | production windows covered |", "|---|---|---|---|"]
    for scope in report["scopes"]:
        d = scope["decision"]
        covered = production["productionCovered"].get(scope["name"])
        lines.append(f"| {scope['name']} | {d['outcome']} | {fig(d.get('maxLoad'))} | {fig(covered, '.0%')} |")
    return [*lines, ""]


def _bands(report: Json, scope: Json) -> list[str]:
    """The speculative arm's load bands against the compared arm's windows in the same bins."""
    compared = report["compared"]["arm"]
    lines = [
        f"### {scope['name']}",
        "",
        "| offered load | windows | source | in flight (speculative) | speculative ms/token | "
        f"{compared} ms/token | ratio | wins |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in scope["comparisons"]:
        band = _band_at(scope, c["load"])
        against = f"{c['comparedSeconds'] * 1000:.2f}" if c["measured"] else "unmeasured"
        lines.append(
            f"| {c['load']:.2f} | {band['windows']} | {band['source']} | {fig(band['inFlightPerReplica'], '.1f')} | "
            f"{c['speculativeSeconds'] * 1000:.2f} | {against} | {fig(c['ratio'])} | "
            f"{'yes' if c['speculationWins'] else 'no' if c['powered'] else 'too few windows to decide on'} |"
        )
    peak = scope["peak"]
    if peak is not None:
        ratio = f"ratio {peak['ratio']:.2f}" if peak["ratio"] is not None else f"unmeasured against {compared}"
        lines += [
            "",
            f"Peak (offered load {peak['load']:.2f}): {ratio}, speculative TTFT p99 "
            f"{fig(peak['speculativeTtftP99Seconds'], '.3f')} s, on time {fig(peak['speculativeOnTimeShare'], '.0%')}.",
        ]
    return [*lines, *_forecast(scope.get("forecast")), ""]


def _forecast(forecast: Json | None) -> list[str]:
    """The crossover forecast from the step-cost profile, beside the bands above."""
    if forecast is None:
        return []
    if forecast.get("crossoverLoad") is None:
        said = f"speculation still pays at batch {forecast['maxBatch']} ({forecast['reach']:.2f})"
    else:
        high = forecast.get("crossoverHigh")
        upper = f"{high:.2f}" if high is not None else f"beyond batch {forecast['maxBatch']}"
        low = forecast.get("crossoverLow")
        said = f"crossover at {forecast['crossoverLoad']:.2f} (interval {fig(low)} to {upper})"
    finding = " **The measured bands lie outside it: the profile does not describe these pods.**"
    return [
        "",
        f"Forecast from {forecast['profile']} at {forecast['committed']:.2f} committed tokens per round "
        f"({forecast['windows']} windows): {said}, offered load per replica."
        + (finding if forecast.get("disagrees") else ""),
    ]


def _alternative(report: Json) -> list[str]:
    """Whether the speculative arm's GPUs do better without speculation, where the pilot runs an alternative."""
    found = [(s["name"], s["decision"]["alternative"]) for s in report["scopes"] if s["decision"].get("alternative")]
    if not found:
        return []
    lines = [
        "## The same GPUs without speculation",
        "",
        "The alternative arm takes the speculative arm's share on the same GPU budget, without speculation, and "
        "is compared with the control and speculative arms at the same loads.",
        "",
        "| scope | verdict | alternative / control ms/token | speculative / alternative ms/token | "
        "alternative e2e gain over control |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {name} | {a['verdict']} | {fig(a.get('ratio'), unit='x')} | {fig(a.get('speculativeRatio'), unit='x')} | "
        f"{fig(a.get('observedGain'), unit='x')} |"
        for name, a in found
    ]
    return [*lines, "", *(f"- {a['reason']}" for _, a in found), ""]


def _concurrency(report: Json) -> list[str]:
    """How many requests of the scopes' mean length each arm's KV cache holds at once."""
    found = report.get("concurrency")
    if not found:
        return []
    size = f"{found['blockSize']} tokens" + ("" if found["blockSizeReported"] else ", vLLM's default")
    held = ", ".join(
        f"{arm_label(report, arm)} {a['concurrentRequests']} ({a['kvBlocks']} blocks)"
        for arm, a in found["arms"].items()
    )
    limit = found["schedulerLimit"]
    scheduler = (
        f" The scheduler admits at most {limit} (--max-num-seqs)."
        if limit is not None
        else " The scheduler's own limit (--max-num-seqs) is the engine's default for its device."
    )
    return [
        f"At the scopes' mean length ({fig(found['tokensPerRequest'], '.0f')} tokens of prompt and answer, "
        f"{found['blocksPerRequest']} blocks of {size}), the KV cache of one replica holds at most this many "
        f"requests at once: {held}.{scheduler}",
        "",
    ]


def _cost(report: Json) -> list[str]:
    """GPUs, KV blocks and throughput per arm, and the price of the comparison itself."""
    lines = ["## Cost", "", "| scope | arm | GPUs | KV blocks / replica | on-time completions / GPU-hour (at load) |"]
    lines += ["|---|---|---|---|---|"]
    for scope in report["scopes"]:
        for arm, c in scope["cost"]["arms"].items():
            lines.append(
                f"| {scope['name']} | {arm_label(report, arm)} | {fig(c['gpus'], 'd')} | "
                f"{fig(c['kvBlocksPerReplica'], 'd')} | "
                f"{fig(c['onTimeCompletionsPerGpuHour'], '.0f')} ({fig(c['atLoad'])}) |"
            )
    kv = next((s["cost"]["kvCost"] for s in report["scopes"] if s["cost"]["kvCost"] is not None), None)
    lines += ["", f"The draft costs {fig(kv, '.0%')} of the baseline's KV-cache blocks (vllm:cache_config_info).", ""]
    lines += _concurrency(report)
    price = report["comparisonCost"]
    if price is None:
        lines.append(
            "The pilot runs without a control arm: no GPUs are spent on the comparison, and speculation is "
            "compared with the production baseline only at the loads both ran at."
        )
    else:
        lines.append(
            f"The control arm holds {fig(price['gpus'], 'd')} GPU(s); over the {fig(price['hoursCovered'])} h the "
            f"evidence covers that is {fig(price['gpuHours'])} GPU-hours: the price of comparing speculation with "
            "ordinary decoding at matched load."
        )
    return [*lines, ""]


def markdown(report: Json, plots: Sequence[str]) -> str:
    """report.md: the summary and the decision first, then the evidence by scope and load."""
    lines = [*_summary(report), *_decisions(report), "", *_loads(report), *_production(report)]
    lines += _decode_share(report)
    lines += _alternative(report)
    lines += ["## By load band", ""]
    for scope in report["scopes"]:
        lines += _bands(report, scope)
    lines += _cost(report)
    lines += rehearsal(report)
    lines += [*_quality(report), "", *_probes(report)]
    lines += _fallback_records(report)
    lines += ["", *_frozen(report)]
    lines += _schedules(report)
    lines += piloted_schedule(report, plots)
    lines += _replay(report, [p for p in plots if not p.startswith(SCHEDULE_PLOT_PREFIX)])
    return "\n".join(lines) + "\n"


def _summary(report: Json) -> list[str]:
    """The pilot's outcome and its reasons, and how recent the evidence is."""
    pilot, decision = report["pilot"], report["decision"]
    lines = [f"# Speculation pilot {pilot['namespace']}/{pilot['name']}: {decision['outcome']}", ""]
    if not report["decisionStated"]:
        lines += ["*Provisional: the operator has not stated a decision yet (scopes still piloting).*", ""]
    lines += [f"- {reason}" for reason in decision.get("reasons", [])]
    return [*lines, "", f"Evidence as of {report['evidenceAsOf'] or 'no window yet'}.", ""]


def _decisions(report: Json) -> list[str]:
    """Each scope's state, outcome, crossover and envelope."""
    lines = [
        "## Decisions by scope",
        "",
        "| scope | state | outcome | reason | crossover (interval) | envelope up to |",
    ]
    lines += ["|---|---|---|---|---|---|"]
    for scope in report["scopes"]:
        d = scope["decision"]
        interval = (
            f"{d['crossoverLoad']:.2f} ({d['crossoverLow']:.2f} to {d['crossoverHigh']:.2f})"
            if d.get("crossoverLoad") is not None
            else f"between {d['crossoverLow']:.2f} and {d['crossoverHigh']:.2f}"
            if d.get("crossoverLow") is not None and d.get("crossoverHigh") is not None
            else _limit_failure(d["limitFailure"])
            if d.get("limitFailure")
            else ""
        )
        lines.append(
            f"| {scope['name']} | {scope['state'] or ''} | {d['outcome']} | {d.get('deferReason', '')} | {interval} | "
            f"{fig(d.get('maxLoad'))} |"
        )
    return lines


def _decode_share(report: Json) -> list[str]:
    """Each scope's decode share, and the end-to-end gain a decode ratio implies beside the one observed."""
    compared = report["compared"]["name"]
    lines = [
        "## Decode share and end-to-end gain",
        "",
        f"Each scope's requests on {compared}, and speculation's decode ratio against it over every conclusive "
        "window; the last two columns are the observed gain and the TTFT tail ratio (pooled over the requests) "
        "at the loads the scope is adopted for, which is what an adoption rests on.",
        "",
    ]
    lines += [
        "| scope | TTFT s | decode s | e2e s | decode share | decode-only gain | implied e2e gain | observed e2e gain "
        "| observed where adopted | TTFT tail where adopted |"
    ]
    lines += ["|---|---|---|---|---|---|---|---|---|---|"]
    for scope in report["scopes"]:
        t = scope["timing"] or {}
        lines.append(
            f"| {scope['name']} | {fig(t.get('ttftSeconds'), '.3f')} | {fig(t.get('decodeSeconds'), '.3f')} | "
            f"{fig(t.get('e2eSeconds'), '.3f')} | {fig(t.get('decodeShare'), '.0%')} | "
            f"{fig(t.get('decodeOnlyGain'), unit='x')} | "
            f"{fig(t.get('impliedEndToEndGain'), unit='x')} | {fig(t.get('observedEndToEndGain'), unit='x')} | "
            f"{fig(scope['decision'].get('observedGain'), unit='x')} | "
            f"{fig(scope['decision'].get('ttftRatio'), unit='x')} |"
        )
    return [
        *lines,
        "",
        "A decode-only gain is not an end-to-end gain: the implied gain is 1 / (1 - share x (1 - ratio)).",
        "",
        *_chunk_gaps(report),
    ]


def _quality(report: Json) -> list[str]:
    """Each scope's windows with a failing quality check, and its quality fallbacks."""
    lines = ["## Quality by scope", ""]
    for scope in report["scopes"]:
        q = scope["quality"]
        lines.append(
            f"- {scope['name']}: {q['windowsWithFailingChecks']} window(s) with a failing quality check, "
            f"{len(q['fallbacks'])} quality fallback(s)."
        )
    return lines


def _fallback_records(report: Json) -> list[str]:
    """Every fallback the pilot took, with the figure that crossed its threshold."""
    lines = ["## Fallback records", ""]
    if report["fallbacks"]:
        lines += ["| scope | at | reason | metric | observed | threshold |", "|---|---|---|---|---|---|"]
        lines += [
            f"| {f['scope']} | {f['at']} | {f['reason']} | {f['metric']} | {fig(f.get('observed'), '.4g')} | "
            f"{fig(f.get('threshold'), '.4g')} |"
            for f in report["fallbacks"]
        ]
    else:
        lines.append("None.")
    return lines


def _frozen(report: Json) -> list[str]:
    """Each arm's replicas, GPUs and config hash, as frozen for the pilot."""
    lines = ["## Frozen configurations", ""]
    for arm, values in report["arms"].items():
        lines.append(
            f"- {arm_label(report, arm)}: {values['replicas']} replica(s), {values['gpus']} GPU(s), "
            f"config hash `{values['configHash']}`"
        )
    specs = "The full engine and arm specs are in report.json (`configurations`) and replay/pilot.yaml."
    return [*lines, "", specs, ""]


def _schedules(report: Json) -> list[str]:
    """The recommended dynamic speculation schedules, and why a scope has none."""
    lines: list[str] = []
    recommended = [item for item in report["schedules"] if item["recommendation"]]
    if report["schedules"]:
        lines += ["## Recommended dynamic speculation schedule", ""]
    if recommended:
        lines += [
            "**A recommendation derived from the measurements, not something the pilot ran** (`kubectl specpilot "
            "follow-up` writes the pilot that runs it). Speculation is adopted only below a load, so the engine "
            "could speculate at small batches and decode ordinarily above:",
            "",
        ]
        for item in recommended:
            lines += [
                f"From {item['derivedFrom']} ({_crossover(item)}; at {item['batchMeasuredAtLoad']:.2f} the "
                f"speculative arm held {item['inFlightPerReplica']:.1f} requests in flight per replica, so batch "
                f"size {item['lastSpeculativeBatchSize']} is the last to speculate):",
                "",
                "```json",
                _json_line(item["speculativeConfig"]),
                "```",
                "",
            ]
    for item in report["schedules"]:
        if not item["recommendation"]:
            lines += [f"No schedule for {item['derivedFrom']}: {item['why']}.", ""]
    return lines


def _replay(report: Json, plots: Sequence[str]) -> list[str]:
    """How to replay the observed workload, and the plots."""
    lines = ["## Replay", ""]
    lines += [
        "`replay/pilot.yaml` is the pilot manifest; `replay/workload.yaml` is the observed workload as a loadgen mix "
        f"(weights are arrival rates; {fig(report['replay']['ratePerSecond'], '.2f')} requests per second in all):",
        "",
        "```sh",
        "specpilot loadgen --url ROUTER_URL --mix replay/workload.yaml "
        f"--rate {fig(report['replay']['ratePerSecond'], '.3f')} --arrivals poisson --duration 600",
        "```",
        "",
        "## Plots",
        "",
    ]
    return [*lines, *(f"![{name}](plots/{name})" for name in plots)]


def _share(passed: int, checks: int) -> str:
    return f"{passed}/{checks} ({passed / checks:.0%})" if checks else "none yet"


def _probe_cells(kind: str, arm: Json, *, greedy_side: str) -> str:
    """What one arm's answers of a kind came to, in words."""
    if kind == "sampled":
        return (
            f"mean score {fig(arm['meanScore'], '.4g')} (sd {fig(arm['scoreSd'], '.3g')}) "
            f"over {arm['scored']} of {arm['answers']} answers"
        )
    if kind == "greedy":
        return f"{_share(arm['passed'], arm['checks'])} equal to {greedy_side}"
    return f"{_share(arm['passed'], arm['checks'])} pass"


def _variation(kind: str, variation: Json | None) -> str:
    if variation is None:
        return "n/a"
    if kind == "greedy":
        return f"{variation['selfDivergences']} self-divergence(s) in {variation['comparisons']}"
    return f"score sd {fig(variation['scoreSd'], '.3g')}"


def _probes(report: Json) -> list[str]:
    """Each probe kind's answers per scope and arm, beside the baseline's own variation; counted over every
    probe round, operator restarts included."""
    rows = [
        (scope["name"], kind, found) for scope in report["scopes"] for kind, found in scope["quality"]["probes"].items()
    ]
    if not rows:
        return []
    lines = [
        "Probe answers by kind, counted over every round. Greedy texts are compared with the baseline's, and the "
        "baseline's with its own repeat (its own variation, which the greedy check allows for); sampled answers are "
        "scored, and judged pair by pair against the baseline's (one answer of each arm per pair).",
        "",
        "| scope | kind | rounds | speculative | baseline | baseline's own variation |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {name} | {kind} | {found['rounds']} | "
        f"{_probe_cells(kind, found['speculative'], greedy_side='the baseline')} | "
        f"{_probe_cells(kind, found['baseline'], greedy_side='its repeat')} | "
        f"{_variation(kind, found['baselineVariation'])} |"
        for name, kind, found in rows
    ]
    return [*lines, ""]


def _band_at(scope: Json, load: float) -> Json:
    """The speculative band a comparison was made at."""
    return next(band for band in scope["bands"]["speculative"] if band["load"] == load)


def _crossover(item: Json) -> str:
    """Where a schedule's crossover was placed: measured with its interval, or only bracketed; or, for an
    adoption bounded by something else, the load it is adopted below and what bounds it."""
    if item.get("crossoverLow") is None:
        return f"adopted below {item['adoptedBelow']:.2f} requests per second per replica, bounded by {item['boundBy']}"
    if item.get("crossoverLoad") is None:
        return f"crossover above {item['crossoverLow']:.2f} requests per second per replica, not measured"
    return (
        f"crossover at {item['crossoverLoad']:.2f} requests per second per replica, interval from "
        f"{item['crossoverLow']:.2f}"
    )


def _json_line(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _chunk_gaps(report: Json) -> list[str]:
    """Stream cadence per scope: the gap between streamed chunks on each compared arm."""
    compared = report["compared"]["name"]
    lines = []
    for scope in report["scopes"]:
        gaps = scope["chunkGaps"]
        if gaps["ratio"] is None:
            continue
        judged = "judged (thresholds.interTokenLatency)" if gaps["judged"] else "not judged"
        lines.append(
            f"- {scope['name']}: p{gaps['quantile'] * 100:g} {fig(gaps['speculativeSeconds'] * 1000, '.1f')} ms "
            f"against {fig(gaps['comparedSeconds'] * 1000, '.1f')} ms, {fig(gaps['ratio'], unit='x')}; {judged}."
        )
    if not lines:
        return []
    return [
        f"Gaps between streamed chunks (arm-wide, mean over windows), speculative against {compared}: a "
        "speculative step streams several committed tokens at once, so its gaps are longer while each token "
        "comes sooner.",
        "",
        *lines,
        "",
    ]
