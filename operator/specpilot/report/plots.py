"""The package's plots, drawn with matplotlib from report.json's numbers (so plot and table agree).

matplotlib is an optional dependency (`pip install 'specpilot[report]'`): the operator never draws.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from specpilot.report.build import arm_label

try:  # optional: only the report draws
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot
    from matplotlib.dates import DateFormatter
except ImportError:  # pragma: no cover - depends on the installation
    pyplot = None  # type: ignore[assignment]

Json = dict[str, Any]
COLORS = {"baseline": "#8172b3", "speculative": "#dd8452", "control": "#4c72b0", "alternative": "#55a868"}
PLAIN_COLOR = "#c44e52"  # the followed pilot's plain speculation, set beside a schedule
PRODUCTION_LINES = (("p50", ":"), ("p95", "-."), ("max", "-"))
LOAD_AXIS = "offered load: requests per second per replica"


class MissingMatplotlib(RuntimeError):
    """matplotlib is not installed."""


def _pyplot() -> Any:
    if pyplot is None:
        raise MissingMatplotlib("specpilot report draws its plots with matplotlib: pip install 'specpilot[report]'")
    plt: Any = pyplot
    plt.rcParams.update({"figure.dpi": 110, "font.size": 9, "axes.grid": True, "grid.alpha": 0.3})
    return plt


def _save(fig: Any, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})


def _production(report: Json, ax: Any) -> None:
    """Production's offered load per replica (p50, p95, max) as vertical lines: watched, not a band."""
    load = report["production"]["offeredPerReplica"]
    for key, style in PRODUCTION_LINES:
        if load[key] is not None:
            ax.axvline(load[key], color=COLORS["baseline"], linestyle=style, linewidth=1, label=f"production {key}")


def _unmeasured(report: Json, scope: Json, ax: Any) -> None:
    """Ring the speculative bands the compared arm never ran at."""
    points = [(c["load"], c["speculativeSeconds"] * 1000) for c in scope["comparisons"] if not c["measured"]]
    if points:
        label = f"unmeasured against {report['compared']['arm']}"
        ax.scatter(*zip(*points, strict=True), s=110, facecolors="none", edgecolors="black", label=label, zorder=3)


def _no_bands(report: Json, scope: Json, ax: Any) -> None:
    """Say so in an empty panel, and what the scope's decision rests on instead (its latest flip)."""
    if any(scope["bands"].values()):
        return
    flips = [f for f in report["fallbacks"] if f["scope"] == scope["name"]]
    text = "no window settled at a matched load"
    if flips:
        f = flips[-1]
        observed = f" {f['observed']:.3g} > {f['threshold']:.3g}" if f.get("observed") is not None else ""
        text += f"\nflipped back: {f['reason']} on {f['metric']}{observed}\n(fallback records)"
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=8, transform=ax.transAxes)


def load_plot(report: Json, plt: Any) -> Any:
    """Per scope: time per committed token and TTFT p99 against offered load, the speculative and the
    compared arm on the same axis, unmeasured bands ringed, crossover and production's load marked."""
    scopes = report["scopes"]
    fig, axes = plt.subplots(len(scopes), 2, figsize=(12, 3.2 * len(scopes)), squeeze=False)
    for row, scope in enumerate(scopes):
        tpct_ax, ttft_ax = axes[row]
        for arm, bands in scope["bands"].items():
            if not bands:
                continue
            label = arm_label(report, arm)
            loads = [b["load"] for b in bands]
            tpct = [b["timePerCommittedTokenSeconds"] * 1000 for b in bands]
            err = [b["timePerCommittedTokenStandardError"] * 1000 for b in bands]
            tpct_ax.errorbar(loads, tpct, yerr=err, marker="o", capsize=3, color=COLORS[arm], label=label)
            ttft = [(b["load"], b["ttftP99Seconds"] * 1000) for b in bands if b["ttftP99Seconds"] is not None]
            if ttft:
                ttft_ax.plot(*zip(*ttft, strict=True), marker="o", color=COLORS[arm], label=label)
        _unmeasured(report, scope, tpct_ax)
        _no_bands(report, scope, tpct_ax)
        cross = scope["crossover"]
        decision = scope["decision"]
        for ax in (tpct_ax, ttft_ax):
            if cross is not None and decision["outcome"] == "AdoptInLowLoadWindows":
                ax.axvspan(cross["low"], cross["high"], color="grey", alpha=0.15)
                ax.axvline(cross["load"], color="black", linestyle="--", linewidth=1)
            _production(report, ax)
            ax.set_xlabel(LOAD_AXIS)
            ax.set_xlim(left=0)
        if cross is not None and decision["outcome"] == "AdoptInLowLoadWindows":
            tpct_ax.annotate(
                f"crossover {cross['load']:.2f}\n"
                f"({cross['confidence']:.0%}: {cross['low']:.2f} to {cross['high']:.2f})",
                xy=(cross["load"], 0.95),
                xycoords=("data", "axes fraction"),
                ha="left",
                va="top",
                fontsize=8,
                xytext=(4, 0),
                textcoords="offset points",
            )
        title = f"{scope['name']}: {decision['outcome']}"
        if decision.get("deferReason"):
            title += f" ({decision['deferReason']})"
        tpct_ax.set_title(f"{title}\ntime per committed token")
        ttft_ax.set_title(f"{scope['name']}: TTFT p99")
        tpct_ax.set_ylabel("ms per committed token")
        ttft_ax.set_ylabel("ms")
        tpct_ax.set_ylim(bottom=0)
        ttft_ax.set_ylim(bottom=0)
        handles, labels = tpct_ax.get_legend_handles_labels()
        ttft_ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=7)
    return fig


def acceptance_plot(report: Json, plt: Any) -> Any:
    """Acceptance rate by draft position, per scope (the speculative engines' rate while it ran)."""
    fig, ax = plt.subplots(figsize=(9, 3.5))
    scopes = [s for s in report["scopes"] if s["acceptance"]["perPosition"]]
    width = 0.8 / max(1, len(scopes))
    for index, scope in enumerate(scopes):
        rates = [r if r is not None else 0.0 for r in scope["acceptance"]["perPosition"]]
        xs = [p + index * width for p in range(len(rates))]
        length = scope["acceptance"]["length"]
        label = f"{scope['name']} (mean acceptance length {length:.2f})" if length else scope["name"]
        ax.bar(xs, rates, width=width, label=label)
    positions = max((len(s["acceptance"]["perPosition"]) for s in scopes), default=0)
    ax.set_xticks([p + 0.4 - width / 2 for p in range(positions)], [str(p + 1) for p in range(positions)])
    ax.set_xlabel("draft position")
    ax.set_ylabel("acceptance rate")
    ax.set_ylim(0, 1)
    ax.set_title("Acceptance by draft position\n(speculative engines, over each scope's windows)")
    if scopes:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    else:
        ax.text(0.5, 0.5, "no speculative windows", ha="center", transform=ax.transAxes)
    return fig


def kv_plot(report: Json, plt: Any) -> Any:
    """KV-cache usage over time per arm, the hard limit, and every flip back marked."""
    fig, ax = plt.subplots(figsize=(9, 3.5))
    for arm, points in report["kvUsage"].items():
        if points:
            times = [datetime.fromisoformat(at) for at, _ in points]
            ax.plot(
                times, [usage for _, usage in points], color=COLORS[arm], label=arm_label(report, arm), linewidth=1.2
            )
    ax.axhline(report["kvUsageLimit"], color="red", linestyle=":", linewidth=1, label="kvCacheUsage.max")
    for index, record in enumerate(report["fallbacks"]):
        at = datetime.fromisoformat(record["at"].replace("Z", "+00:00"))
        ax.axvline(at, color="black", linestyle="--", linewidth=0.8)
        ax.annotate(
            f"{record['scope']}: {record['reason']}",
            xy=(at, 0.98 - 0.08 * (index % 5)),
            xycoords=("data", "axes fraction"),
            fontsize=7,
            ha="left",
            va="top",
            xytext=(3, 0),
            textcoords="offset points",
        )
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("KV-cache usage")
    ax.set_title("KV-cache usage over time, flips back to ordinary decoding marked")
    ax.legend(loc="lower right", fontsize=8)
    ax.xaxis.set_major_formatter(DateFormatter("%H:%M:%S"))  # type: ignore[no-untyped-call]
    ax.set_xlabel("time (UTC)")
    return fig


def share_plot(report: Json, plt: Any) -> Any:
    """Decode share against implied end-to-end gain, beside the decode-only gain, per scope."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    shares = [i / 100 for i in range(101)]
    for scope in report["scopes"]:
        timing = scope["timing"]
        if not timing or timing["decodeRatio"] is None:
            continue
        ratio = timing["decodeRatio"]
        curve = [1 / (1 - s * (1 - ratio)) for s in shares]
        (line,) = ax.plot(shares, curve, linewidth=0.8, alpha=0.6)
        color = line.get_color()
        ax.scatter([timing["decodeShare"]], [timing["impliedEndToEndGain"]], color=color, zorder=3)
        ax.scatter([1.0], [timing["decodeOnlyGain"]], color=color, marker="x", zorder=3)
        ax.annotate(
            f"{scope['name']}: {timing['decodeShare']:.0%} decode, {timing['impliedEndToEndGain']:.2f}x e2e "
            f"(decode-only {timing['decodeOnlyGain']:.2f}x)",
            xy=(timing["decodeShare"], timing["impliedEndToEndGain"]),
            fontsize=7,
            ha="right",
            xytext=(-8, 6),
            textcoords="offset points",
        )
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xlim(0, 1.05)
    compared = report["compared"]["arm"]
    ax.set_xlabel(f"decode share of request time ({compared})")
    ax.set_ylabel(f"gain ({compared} / speculative)")
    ax.set_title(
        "Implied end-to-end gain (dots) against the decode-only gain (x, at share 1)\n"
        "lines: the gain each scope's decode ratio implies at any decode share"
    )
    return fig


def rehearsal_plot(report: Json, plt: Any) -> Any:
    """The peak rehearsal's ladder per arm: on-time share and TTFT p99 against the step's load, and the
    burst apart (x); None without a measured step. The fallbacks' steps are in the report's text."""
    found = (report.get("rehearsal") or {}).get("steps", [])
    steps = [s for s in found if s.get("speculative") and not (s.get("burst") or s.get("flip") or s.get("restart"))]
    if not steps:
        return None
    bursts = [step for step in found if step.get("burst")]
    fig, (on_time, ttft) = plt.subplots(1, 2, figsize=(11, 4.5))
    for arm in ("speculative", "control"):
        for marker, shown_steps, label in (("o", steps, arm), ("x", bursts, None)):
            measured = [(step["load"], step[arm]) for step in shown_steps if step.get(arm)]
            loads = [load for load, _ in measured]
            shown = [f["onTime"] if f.get("keptUp") else 0.0 for _, f in measured]
            on_time.plot(loads, shown, marker=marker, color=COLORS[arm], label=label)
            ttft.plot(loads, [f.get("ttftP99") for _, f in measured], marker=marker, color=COLORS[arm], label=label)
        capacity = report["rehearsal"].get(f"{arm}Capacity")
        if capacity is not None:
            on_time.axvline(capacity, color=COLORS[arm], linestyle=":", linewidth=0.8)
    on_time.set_ylabel("on-time share (0 where the arm fell behind)")
    on_time.set_ylim(-0.05, 1.05)
    ttft.set_ylabel("TTFT p99 (s)")
    for ax in (on_time, ttft):
        ax.set_xlabel(LOAD_AXIS)
        ax.legend(loc="best", fontsize=8)
    fig.suptitle("Peak rehearsal: each step per arm (x: the burst; dotted: each arm's capacity)")
    return fig


DRAWERS: dict[str, Callable[[Json, Any], Any]] = {
    "load.png": load_plot,
    "acceptance.png": acceptance_plot,
    "kv_cache.png": kv_plot,
    "decode_share.png": share_plot,
    "rehearsal.png": rehearsal_plot,
}


def _tpct_line(ax: Any, bands: list[Json], *, color: str, label: str, style: str = "-") -> None:
    """Time per committed token against offered load, with each band's standard error."""
    if bands:
        loads = [b["load"] for b in bands]
        tpct = [b["timePerCommittedTokenSeconds"] * 1000 for b in bands]
        err = [b["timePerCommittedTokenStandardError"] * 1000 for b in bands]
        ax.errorbar(loads, tpct, yerr=err, marker="o", capsize=3, color=color, linestyle=style, label=label)


SWITCH_NOTES = {
    "interpolated": "switch: batch {batch} in flight at {load:.2f}",
    "belowLowest": "switch: batch {batch} exceeded at the lowest band ({load:.2f})",
    "notReached": "switch not reached: batch {batch} (highest band {load:.2f})",
}


def schedule_plot(report: Json, scope: Json, plt: Any) -> Any:
    """One scope of a scheduled pilot: the compared arm, the scheduled speculative arm and the followed
    pilot's plain speculation (from its own windows) against offered load, the schedule's switch marked."""
    compared = report["compared"]["arm"]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    _tpct_line(ax, scope["bands"].get(compared, []), color=COLORS[compared], label=arm_label(report, compared))
    _tpct_line(ax, scope["bands"]["speculative"], color=COLORS["speculative"], label="speculative, scheduled")
    followed = report["followed"] or {}
    plain = followed.get("bands", {}).get(scope["name"], [])
    _tpct_line(ax, plain, color=PLAIN_COLOR, label=f"plain speculation ({followed.get('name')})", style="--")
    switch = report["switch"]
    found = switch["scopes"].get(scope["name"])
    if found is not None:
        note = SWITCH_NOTES[found["where"]].format(batch=switch["batch"], load=found["load"])
        ax.axvline(found["load"], color="black", linestyle=":", linewidth=1, label=note)
    ax.set_xlabel(LOAD_AXIS)
    ax.set_ylabel("ms per committed token")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.set_title(f"{scope['name']}: {scope['decision']['outcome']}\ntime per committed token, scheduled and plain")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=7)
    return fig


def _schedule_plots(report: Json, plt: Any, folder: Path) -> list[str]:
    """`schedule-<scope>.png` per scope of a pilot whose draft carries a schedule; none otherwise."""
    if report.get("switch") is None:
        return []
    drawn = []
    for scope in report["scopes"]:
        name = f"schedule-{scope['name']}.png"
        fig = schedule_plot(report, scope, plt)
        _save(fig, folder / name)
        plt.close(fig)
        drawn.append(name)
    return drawn


def draw(report: Json, folder: Path) -> list[str]:
    """Every plot with something to show into `folder`; returns their file names."""
    plt = _pyplot()
    folder.mkdir(parents=True, exist_ok=True)
    drawn = []
    for name, drawer in DRAWERS.items():
        fig = drawer(report, plt)
        if fig is None:
            continue
        _save(fig, folder / name)
        plt.close(fig)
        drawn.append(name)
    return drawn + _schedule_plots(report, plt, folder)
