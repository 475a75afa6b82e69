"""report.md: the summary and the decision first, then the evidence by scope and load."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

Json = dict[str, Any]


def _f(value: Any, spec: str = ".2f", unit: str = "") -> str:
    return "n/a" if value is None else f"{value:{spec}}{unit}"


def markdown(report: Json, plots: Sequence[str]) -> str:
    """report.md: the summary and the decision first, then the evidence by scope and load."""
    pilot, decision = report["pilot"], report["decision"]
    lines = [f"# Speculation pilot {pilot['namespace']}/{pilot['name']}: {decision['outcome']}", ""]
    if not report["decisionStated"]:
        lines += ["*Provisional: the operator has not stated a decision yet (scopes still piloting).*", ""]
    lines += [f"- {reason}" for reason in decision.get("reasons", [])]
    lines += ["", f"Evidence as of {report['evidenceAsOf'] or 'no window yet'}.", ""]
    lines += [
        "## Decisions by scope",
        "",
        "| scope | state | outcome | reason | crossover (interval) | envelope up to |",
    ]
    lines += ["|---|---|---|---|---|---|"]
    for scope in report["scopes"]:
        d = scope["decision"]
        interval = (
            f"{d['crossoverLoad']:.1f} ({d['crossoverLow']:.1f} to {d['crossoverHigh']:.1f})"
            if d.get("crossoverLoad") is not None
            else ""
        )
        lines.append(
            f"| {scope['name']} | {scope['state'] or ''} | {d['outcome']} | {d.get('deferReason', '')} | {interval} | "
            f"{_f(d.get('maxLoad'), '.1f')} |"
        )
    lines += [
        "",
        "Loads are concurrent requests per arm replica: the batch the engines' tokens ran in (num_requests_running "
        "weighted by itself), or the router's requests in flight where the engines do not report it.",
        "",
    ]
    lines += ["## Decode share and end-to-end gain", ""]
    lines += [
        "| scope | TTFT s | decode s | e2e s | decode share | decode-only gain | implied e2e gain | observed e2e gain |"
    ]
    lines += ["|---|---|---|---|---|---|---|---|"]
    for scope in report["scopes"]:
        t = scope["timing"] or {}
        lines.append(
            f"| {scope['name']} | {_f(t.get('ttftSeconds'), '.3f')} | {_f(t.get('decodeSeconds'), '.3f')} | "
            f"{_f(t.get('e2eSeconds'), '.3f')} | {_f(t.get('decodeShare'), '.0%')} | {_f(t.get('decodeOnlyGain'))}x | "
            f"{_f(t.get('impliedEndToEndGain'))}x | {_f(t.get('observedEndToEndGain'))}x |"
        )
    lines += [
        "",
        "A decode-only gain is not an end-to-end gain: the implied gain is 1 / (1 - share x (1 - ratio)).",
        "",
    ]
    lines += ["## By load band", ""]
    for scope in report["scopes"]:
        lines += [
            f"### {scope['name']}",
            "",
            "| load | windows | speculative ms/token | baseline ms/token | ratio | wins |",
        ]
        lines += ["|---|---|---|---|---|---|"]
        for c in scope["comparisons"]:
            lines.append(
                f"| {c['load']:.1f} | {_band_windows(scope, c['load'])} | {c['speculativeSeconds'] * 1000:.2f} | "
                f"{c['baselineSeconds'] * 1000:.2f} | {c['ratio']:.2f} | {'yes' if c['speculationWins'] else 'no'} |"
            )
        peak = scope["peak"]
        if peak is not None:
            lines += [
                "",
                f"Peak (load {peak['load']:.1f}): ratio {peak['ratio']:.2f}, speculative TTFT p99 "
                f"{_f(peak['speculativeTtftP99Seconds'], '.3f')} s, "
                f"on time {_f(peak['speculativeOnTimeShare'], '.0%')}.",
            ]
        lines.append("")
    lines += ["## Cost", "", "| scope | arm | GPUs | KV blocks / replica | on-time completions / GPU-hour (at load) |"]
    lines += ["|---|---|---|---|---|"]
    for scope in report["scopes"]:
        for arm, c in scope["cost"]["arms"].items():
            lines.append(
                f"| {scope['name']} | {arm} | {_f(c['gpus'], 'd')} | {_f(c['kvBlocksPerReplica'], 'd')} | "
                f"{_f(c['onTimeCompletionsPerGpuHour'], '.0f')} ({_f(c['atLoad'], '.1f')}) |"
            )
    kv = next((s["cost"]["kvCost"] for s in report["scopes"] if s["cost"]["kvCost"] is not None), None)
    lines += ["", f"The draft costs {_f(kv, '.0%')} of the baseline's KV-cache blocks (vllm:cache_config_info).", ""]
    lines += ["## Quality by scope", ""]
    for scope in report["scopes"]:
        q = scope["quality"]
        lines.append(
            f"- {scope['name']}: {q['windowsWithFailingChecks']} window(s) with a failing quality check, "
            f"{len(q['fallbacks'])} quality fallback(s)."
        )
    lines += ["", "## Fallback records", ""]
    if report["fallbacks"]:
        lines += ["| scope | at | reason | metric | observed | threshold |", "|---|---|---|---|---|---|"]
        lines += [
            f"| {f['scope']} | {f['at']} | {f['reason']} | {f['metric']} | {_f(f.get('observed'), '.4g')} | "
            f"{_f(f.get('threshold'), '.4g')} |"
            for f in report["fallbacks"]
        ]
    else:
        lines.append("None.")
    lines += ["", "## Frozen configurations", ""]
    for arm, values in report["arms"].items():
        lines.append(
            f"- {arm}: {values['replicas']} replica(s), {values['gpus']} GPU(s), config hash `{values['configHash']}`"
        )
    lines += ["", "The full engine and arm specs are in report.json (`configurations`) and replay/pilot.yaml.", ""]
    if report["schedules"]:
        lines += ["## Recommended dynamic speculation schedule", ""]
        lines += [
            "**A recommendation derived from the measurements, not something the pilot ran.** Speculation wins "
            "only below the crossover, so the engine could speculate at small batches and decode ordinarily above:",
            "",
        ]
        for item in report["schedules"]:
            lines += [
                f"From {item['derivedFrom']} (crossover {item['crossoverLoad']:.1f}, interval from "
                f"{item['crossoverLow']:.1f}; batch size {item['lastSpeculativeBatchSize']} is the last to speculate):",
                "",
                "```json",
                _json_line(item["speculativeConfig"]),
                "```",
                "",
            ]
    lines += ["## Replay", ""]
    lines += [
        "`replay/pilot.yaml` is the pilot manifest; `replay/workload.yaml` is the observed workload as a loadgen mix "
        f"(weights are arrival rates; {_f(report['replay']['ratePerSecond'], '.2f')} requests per second in all):",
        "",
        "```sh",
        "specpilot loadgen --url ROUTER_URL --mix replay/workload.yaml "
        f"--rate {_f(report['replay']['ratePerSecond'], '.3f')} --arrivals poisson --duration 600",
        "```",
        "",
        "## Plots",
        "",
    ]
    lines += [f"![{name}](plots/{name})" for name in plots]
    return "\n".join(lines) + "\n"


def _band_windows(scope: Json, load: float) -> int:
    for band in scope["bands"]["speculative"]:
        if band["load"] == load:
            return int(band["windows"])
    return 0


def _json_line(value: Any) -> str:
    return json.dumps(value, sort_keys=True)
