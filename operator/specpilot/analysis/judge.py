"""The judge: one scope's window in, a verdict with its checks out.

Pure: the caller passes the window, the pilot's analysis and quality policy, the quality results it
gathered (`extra`), and the judge state it got back from the previous window of the scope's pilot;
it stores the returned state in status (`ScopeStatus.judge`), so a restarted operator resumes the
same sequential test. The state counts the looks each ratio check has spent (see `ratios`).

A window fails when any check fails and is inconclusive when, short of that, any check could not be
judged: missing data never passes.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from specpilot.analysis.checks import PROBE_METRICS, Check, finite, inconclusive
from specpilot.analysis.limits import PressureFlip, acceptance_check, kv_cache_check, rate_checks
from specpilot.analysis.ratios import RatioPolicy, inter_token_latency_check, quantile_check, time_per_token_check
from specpilot.analysis.stats import nearest_rank
from specpilot.analysis.window import ScopeWindow
from specpilot.api.reasons import FallbackReason, MetricName
from specpilot.api.spec import Analysis, Quality
from specpilot.api.status import Verdict, WindowSummary

REASON_LIMIT = 1024  # WindowSummary.reason's bound
HARD_METRICS = (
    MetricName.KV_CACHE_USAGE,
    MetricName.ERROR_RATE,
    MetricName.TIMEOUT_RATE,
    MetricName.REJECTION_RATE,
)
RATIO_METRICS = (
    MetricName.TIME_PER_COMMITTED_TOKEN_RATIO,
    MetricName.TTFT_RATIO,
    MetricName.END_TO_END_RATIO,
)


@dataclass(frozen=True, kw_only=True)
class WindowVerdict:
    """A window's verdict, its checks, the judge state to keep, and what to record if it flips.

    `failing` is the check a fallback record names: the first hard limit that fired, else the first
    failing check. `fallback` is set when a hard limit fired: the scope flips now."""

    verdict: Verdict
    checks: tuple[Check, ...]
    state: dict[str, float] = field(default_factory=dict)
    reason: str = ""
    fallback: FallbackReason | None = None
    failing: Check | None = None

    def __post_init__(self) -> None:
        if (self.verdict is Verdict.FAIL) != (self.failing is not None):
            raise ValueError("a failing verdict names its failing check, and only a failing one")

    @property
    def hard(self) -> bool:
        """A hard limit fired: the scope flips without waiting for failureLimit windows."""
        return self.fallback is not None


def judge_window(
    window: ScopeWindow,
    *,
    analysis: Analysis,
    quality: Quality,
    draft_tokens: int,
    state: Mapping[str, float],
    extra: Sequence[Check] = (),
    pressure_flip: PressureFlip | None = None,
) -> WindowVerdict:
    """Judge one window of one scope, speculative arm against the arm it is compared with.

    `extra` holds the quality gates' checks (`quality.probe_checks`, `quality.webhook_check`); a gate
    that `quality` configures but `extra` lacks makes the window inconclusive, since a gate that was
    not consulted cannot pass. `pressure_flip` is another scope's latest flip for KV-cache pressure:
    the requests sent before it leave the timeout rate (`limits`)."""
    gates = (*extra, *_missing_gates(extra, quality))
    if window.gaps:
        why = f"the window has gaps ({'; '.join(window.gaps)})"
        hard = [inconclusive(m, why, hard=True) for m in HARD_METRICS]
        if analysis.thresholds.min_acceptance_length is not None:
            hard.append(inconclusive(MetricName.ACCEPTANCE_LENGTH, why, hard=True))
        ratios = tuple(inconclusive(m, why) for m in RATIO_METRICS)
        return _verdict((*hard, *gates, *ratios), _state(_spent(state)))
    # Order matters: KV pressure comes first, since it causes preemptions, which cause timeouts and
    # rejections, and the record should name the cause; quality next, then the statistical comparisons.
    hard_limits = _hard_limits(window, analysis=analysis, draft_tokens=draft_tokens, pressure_flip=pressure_flip)
    ratios, next_state = _ratio_checks(window, analysis=analysis, state=state)
    return _verdict((*hard_limits, *gates, *ratios), next_state)


def attribute_kv_pressure(
    verdicts: Mapping[str, WindowVerdict],
    kv_loads: Mapping[str, float],
    *,
    overlapping: Mapping[str, str] | None = None,
    flipped: Collection[str] = (),
) -> dict[str, WindowVerdict]:
    """Put sustained KV pressure on the scope that loads the speculative arm most.

    The KV cache is the arm's, so every scope judged on it sees the same pressure, and the queueing
    it causes slows them all. `kv_loads` holds the KV cache (token-seconds over the last windows)
    that each scope's requests held on the arm, those of the scopes already on ordinary decoding
    (`flipped`) included, since their requests in flight hold the cache until they drain; the
    heaviest is the one to flip, or, if it is flipped already, the one whose drain the others wait
    out. A judged scope whose KV check failed keeps the failure only if it is that scope. The
    others are held: their KV failure and their speed failures, timeouts included, turn
    inconclusive, naming it; so are the scopes whose window overlaps an earlier KV flip of another
    scope (`overlapping`: scope to why). Error and rejection limits still fire, since those
    requests failed whatever the cause."""
    heaviest = heaviest_loader(kv_loads)
    total = sum(kv_loads.values())
    share = f" ({kv_loads[heaviest] / total:.0%} of the arm's KV load)" if heaviest is not None and total > 0 else ""
    then = draining(heaviest, flipped) or ", which flips first"
    put_on = f"KV-cache pressure on the speculative arm is put on scope {heaviest!r}{share}{then}"
    held = {name: why for name, why in (overlapping or {}).items() if name in verdicts}
    for name, verdict in verdicts.items():
        if kv_fired(verdict) and heaviest not in (None, name):
            held.setdefault(name, put_on)
    out = dict(verdicts)
    for name, why in held.items():
        checks = tuple(
            replace(check, verdict=Verdict.INCONCLUSIVE, reason=why) if _confounded(check) else check
            for check in verdicts[name].checks
        )
        out[name] = _verdict(checks, verdicts[name].state)
    return out


def draining(scope: str | None, flipped: Collection[str]) -> str:
    """What a reason adds when the scope the pressure is put on is on ordinary decoding already."""
    if scope not in flipped:
        return ""
    return ", which is on ordinary decoding already; its requests still hold the cache as they drain"


def heaviest_loader(kv_loads: Mapping[str, float]) -> str | None:
    """The scope whose requests held the most KV cache (the first name on a tie), if any held some."""
    return max((name for name in sorted(kv_loads) if kv_loads[name] > 0), key=lambda name: kv_loads[name], default=None)


def _confounded(check: Check) -> bool:
    """A failure that another scope's KV pressure explains: the KV limit itself, timeouts (the far end
    of slowness), and any speed check."""
    return check.verdict is Verdict.FAIL and (check.metric in _KV_EXPLAINS or not check.hard)


_KV_EXPLAINS = frozenset({MetricName.KV_CACHE_USAGE, MetricName.TIMEOUT_RATE})


def kv_fired(verdict: WindowVerdict) -> bool:
    """The window's sustained-KV-pressure limit fired."""
    return any(check.metric is MetricName.KV_CACHE_USAGE and check.fires for check in verdict.checks)


def _missing_gates(extra: Sequence[Check], quality: Quality) -> tuple[Check, ...]:
    given = [check.metric for check in extra]
    missing = []
    if quality.probes is not None and not PROBE_METRICS.intersection(given):
        missing.append(inconclusive(MetricName.PROBE_AGREEMENT, "probe agreement: no probe result", hard=True))
    answered = given.count(MetricName.WEBHOOK)
    if answered < len(quality.webhooks):
        critical = any(webhook.critical for webhook in quality.webhooks)
        why = f"webhooks: {answered} of {len(quality.webhooks)} results"
        missing.append(inconclusive(MetricName.WEBHOOK, why, hard=critical))
    return tuple(missing)


def _hard_limits(
    window: ScopeWindow, *, analysis: Analysis, draft_tokens: int, pressure_flip: PressureFlip | None
) -> tuple[Check, ...]:
    thresholds = analysis.thresholds
    speculative = window.speculative
    kv = kv_cache_check(
        window.speculative_engine,
        end=window.end,
        limit=thresholds.kv_cache_usage.max,
        sustained_for=thresholds.kv_cache_usage.sustained_for,
        routed=speculative.routed,
    )
    rates = rate_checks(
        speculative,
        max_error=thresholds.max_error_rate,
        max_timeout=thresholds.max_timeout_rate,
        max_rejection=thresholds.max_rejection_rate,
        confidence=analysis.confidence,
        min_samples=analysis.min_samples,
        pressure_flip=pressure_flip,
    )
    if thresholds.min_acceptance_length is None:
        return (kv, *rates)
    acceptance = acceptance_check(
        window.speculative_engine, minimum=thresholds.min_acceptance_length, draft_tokens=draft_tokens
    )
    return (kv, *rates, acceptance)


def _ratio_checks(
    window: ScopeWindow, *, analysis: Analysis, state: Mapping[str, float]
) -> tuple[tuple[Check, ...], dict[str, float]]:
    policy = RatioPolicy.of(analysis)
    thresholds = analysis.thresholds
    spec, base, named = window.speculative, window.compared, window.compared_arm
    spent = _spent(state)
    checks: tuple[Check, ...] = (
        time_per_token_check(
            spec,
            base,
            compared_arm=named,
            max_ratio=thresholds.max_time_per_committed_token_ratio,
            policy=policy,
            look=spent[MetricName.TIME_PER_COMMITTED_TOKEN_RATIO] + 1,
        ),
        quantile_check(
            MetricName.TTFT_RATIO,
            spec.ttft_seconds,
            base.ttft_seconds,
            compared_arm=named,
            limit=thresholds.ttft,
            policy=policy,
            look=spent[MetricName.TTFT_RATIO] + 1,
        ),
        quantile_check(
            MetricName.END_TO_END_RATIO,
            spec.e2e_seconds,
            base.e2e_seconds,
            compared_arm=named,
            limit=thresholds.end_to_end,
            policy=policy,
            look=spent[MetricName.END_TO_END_RATIO] + 1,
        ),
    )
    if thresholds.inter_token_latency is not None:
        checks += (
            inter_token_latency_check(
                spec,
                base,
                engines=(window.speculative_engine, window.compared_engine),
                compared_arm=named,
                limit=thresholds.inter_token_latency,
                min_samples=analysis.min_samples,
            ),
        )
    # Only a judged check spends its look: an inconclusive one tested nothing.
    for check in checks:
        if check.verdict is not Verdict.INCONCLUSIVE and check.metric in spent:  # tests, not point comparisons
            spent[check.metric] += 1
    return checks, _state(spent)


def _key(metric: MetricName) -> str:
    return f"{metric.value}.looks"


def _spent(state: Mapping[str, float]) -> dict[MetricName, int]:
    """Looks spent per ratio check, as the state keeps them; anything garbled counts as none."""
    spent = {}
    for metric in RATIO_METRICS:
        value = state.get(_key(metric), 0.0)
        spent[metric] = int(value) if isinstance(value, int | float) and math.isfinite(value) and value >= 0 else 0
    return spent


def _state(spent: Mapping[MetricName, int]) -> dict[str, float]:
    return {_key(metric): float(looks) for metric, looks in spent.items() if looks}


def _verdict(checks: tuple[Check, ...], state: dict[str, float]) -> WindowVerdict:
    failing = [c for c in checks if c.verdict is Verdict.FAIL]
    unsure = [c for c in checks if c.verdict is Verdict.INCONCLUSIVE]
    fired = next((c for c in failing if c.hard), None)
    if failing:
        verdict, named = Verdict.FAIL, failing
    elif unsure:
        verdict, named = Verdict.INCONCLUSIVE, unsure
    else:
        verdict, named = Verdict.PASS, [c for c in checks if c.metric is MetricName.TIME_PER_COMMITTED_TOKEN_RATIO]
    reason = f"{verdict.value}: " + "; ".join(dict.fromkeys(c.reason for c in named)) if named else verdict.value
    if verdict is Verdict.PASS:
        reason += f" ({len(checks)} checks passed)"
    reason += "".join(f"; {c.note}" for c in checks if c.note)
    return WindowVerdict(
        verdict=verdict,
        checks=checks,
        state=state,
        reason=_bounded(reason + "."),
        fallback=fired.fallback if fired else None,
        failing=fired or (failing[0] if failing else None),
    )


def _bounded(text: str) -> str:
    return text if len(text) <= REASON_LIMIT else text[: REASON_LIMIT - 1] + "…"


def summarize(window: ScopeWindow, verdict: WindowVerdict, *, offered_load: float | None = None) -> WindowSummary:
    """The window as status shows it: the speculative arm's figures, the ratio at the `offered_load` its
    evidence is filed at, the verdict and why."""
    spec = window.speculative
    tpct = spec.time_per_committed_token
    base_tpct = window.compared.time_per_committed_token
    ratio = tpct / base_tpct if tpct is not None and base_tpct else None
    return WindowSummary(
        end=window.end,
        verdict=verdict.verdict,
        samples=spec.routed,
        ms_per_committed_token=finite(tpct * 1000) if tpct is not None else None,
        ratio=finite(ratio),
        offered_load=finite(offered_load),
        ttft_p99=_quantile(spec.ttft_seconds, 0.99),
        e2eP95=_quantile(spec.e2e_seconds, 0.95),
        acceptance_length=finite(window.speculative_engine.acceptance_length),
        reason=verdict.reason,
    )


def _quantile(values: Sequence[float], q: float) -> float | None:
    usable = sorted(v for v in values if math.isfinite(v))
    return nearest_rank(usable, q) if usable else None
