"""Judge benchmark: how often identical arms flip or are adopted, and how fast real slowdowns flip, on
simulated windows.

Run on demand, not a test:

    .venv/bin/python bench/judge.py                      # defaults: 1,000 pilots x 200 windows, 2 workers
    .venv/bin/python bench/judge.py --pilots 200 --quick # a smoke run

Traces: per-request decode seconds and committed tokens drawn from the mock's cost model
(`specpilot.mockvllm.costmodel`: memory-bound steps T + s*(B - 1), rounds of k draft steps at cost
ratio c plus one verification, acceptance per draft position alpha), with a load that drifts over the
pilot and is shared by both arms, multiplicative jitter, rare stalls (preemptions), TTFT that grows
with load, and rare errors, timeouts and rejections on both arms. The two arms are the speculative arm
and the control arm (the baseline's engine at the speculative arm's size, taking exactly its share of
the scope), so both run at the same offered load. Two acceptance models:

- `varied`: each request's acceptance drawn from Beta(mean 0.7, concentration 15), as prompts of one
  task group differ (the harder case: it makes the per-window ratio four times noisier);
- `mock`: one acceptance rate for the scope, as the mock does.

Each interval adds 40 requests per arm; a window is 5 intervals (200 requests per arm), so consecutive
windows share 80% of their requests. Identical arms (A/A) draw both arms from one model; a slowdown
multiplies the speculative arm's decode seconds (and so its end-to-end times) by 1 + slowdown.

An A/A pilot also keeps the pilot's evidence store, compared with the control arm, as the operator
does: every window the rollout judges is recorded (`evidence.record_window`, with its verdict; a window
that began before the stage did adds to the totals only), at an offered load per replica shared by both
arms and by production's baseline: the load path's sequences in flight per replica over the window's
mean end-to-end time (Little's law). At the end the scope's decision is stated once
(`decision.decide_scope` at confidence 0.95, in the state the rollout reached: RolledBack if it flipped,
else Speculative, with its fallback record). On identical arms either is a false positive: a flip
takes speculation away for nothing, and an adoption (AdoptWithinEnvelope or AdoptInLowLoadWindows)
recommends it for a gain that is not there. The target: at most 1% of A/A pilots flip or state an
adoption, met when the upper end of the share's 95% Wilson interval is at or below 1%.

Judged side by side on the same traces:

- `judge`: `specpilot.analysis` itself: `judge_window` on every window, driven through `rollout.advance`
  at default settings (stages 10/25/33%, confidence 0.95, failureLimit 3, minSamples 50): a flip is the
  scope reaching RolledBack, for any check;
- `judge, tpct only`: the same run, counting only the time-per-committed-token check (failureLimit
  failing windows in a row);
- `mSPRT 0.01`: the always-valid alternative on the same statistic, a one-sided normal-mixture
  sequential probability ratio test of the log ratio above its limit (`mixture_log_lr`), read on the
  windows that share no request (every fifth), rejecting once the mixture reaches 1 / 0.01; counted at
  the rejection (as a hard limit would flip) and, as `mSPRT 0.01, 3 in a row`, failureLimit - 1 windows
  later (as the rollout's failing windows in a row would). The judge keeps whichever of the two reaches
  a decision at a 15% slowdown in fewer windows at the same A/A rate: the spent-level test, as measured;
- `naive z 95%`: the same delta-method statistic tested at 95% on every window, failureLimit in a row;
- `static 1.0`, `static 1.1`: Flagger's rule: a window fails when the observed ratio is above the
  threshold, and failureLimit failed checks (Flagger's counter, not reset by a passing window) roll back.

Tables: A/A (share of pilots with any flip over 200 windows; for the judge, the share that flip,
that state an adoption, and that do either, against the target, and the decisions stated); power with
the slowdown there from the first window (windows to the first flip, and the chance of a flip within
failureLimit + 1 windows); and power when the slowdown appears at window 101, once the scope has long
been speculative, which is what the anytime-valid spending costs in delay.
"""

from __future__ import annotations

import argparse
import math
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from statistics import NormalDist

import numpy as np

from specpilot.analysis.decision import decide_scope
from specpilot.analysis.evidence import ArmLoad, Evidence, WindowLoad, record_window, watch_production, with_arms
from specpilot.analysis.judge import judge_window, summarize
from specpilot.analysis.rollout import Judged, Policy, Tick, advance
from specpilot.analysis.window import ArmEngine, ArmRequests, ScopeWindow
from specpilot.api.reasons import MetricName
from specpilot.api.spec import Analysis, Quality, Rollback, Scope
from specpilot.api.status import DecisionOutcome, FallbackRecord, ScopeState, ScopeStatus, Verdict
from specpilot.mockvllm.costmodel import CostParams
from specpilot.wire.names import Arm
from specpilot.wire.samples import RequestOutcome

PER_INTERVAL = 40  # requests per arm per interval
SPAN = 5  # intervals per window
DRAFT_TOKENS = 4
NEVER = 10**9
ANALYSIS = Analysis()
POLICY = Policy(scope=Scope(name="bench"), analysis=ANALYSIS, rollback=Rollback())
LIMIT = ANALYSIS.failure_limit
T0 = datetime(2026, 1, 1, tzinfo=UTC)
INTERVAL = ANALYSIS.interval
WINDOW = ANALYSIS.window
FAILURES = {RequestOutcome.UPSTREAM_ERROR: 0.002, RequestOutcome.TIMEOUT: 0.002, RequestOutcome.REJECTED: 0.001}
ADOPTIONS = frozenset({DecisionOutcome.ADOPT_WITHIN_ENVELOPE, DecisionOutcome.ADOPT_IN_LOW_LOAD_WINDOWS})
TARGET = 0.01  # at most this share of A/A pilots may flip or state an adoption


@dataclass(frozen=True)
class Job:
    """One chunk of pilots for a worker: a trace model, a slowdown and where it starts."""

    model: str
    slowdown: float
    onset: int  # first window (1-based) that carries the slowdown
    pilots: int
    windows: int
    seed: int
    stop_at_flip: bool
    decide: bool = False  # keep the evidence store and state the scope's decision at the end


@dataclass
class Flips:
    """First flipped window per pilot and method (NEVER when none), failing windows seen, and the
    judge's decision per pilot ("Outcome" or "Defer/Reason"; in pilot order, as `first["judge"]`)."""

    first: dict[str, list[int]] = field(default_factory=dict)
    failing_windows: dict[str, list[int]] = field(default_factory=dict)
    decisions: list[str] = field(default_factory=list)
    flipped_on: list[str] = field(default_factory=list)  # the judge's flips: the check each flipped on

    def add(self, other: Flips) -> None:
        for key, values in other.first.items():
            self.first.setdefault(key, []).extend(values)
        for key, values in other.failing_windows.items():
            self.failing_windows.setdefault(key, []).extend(values)
        self.decisions.extend(other.decisions)
        self.flipped_on.extend(other.flipped_on)


# --- traces ---------------------------------------------------------------------------------------


def _acceptance_moments(alpha: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean and variance of 1 + accepted, accepted = leading successes of k Bernoulli(alpha)."""
    powers = alpha[..., None] ** np.arange(1, k + 1)
    mean_accepted = powers.sum(-1)
    second = ((2 * np.arange(1, k + 1) - 1) * powers).sum(-1)
    return 1 + mean_accepted, second - mean_accepted**2


def _arm(rng: np.random.Generator, load: np.ndarray, model: str) -> dict[str, np.ndarray]:
    cost = CostParams()
    shape = (*load.shape, PER_INTERVAL)
    output = np.clip(np.round(rng.lognormal(math.log(150), 0.9, shape)), 2, 2048)
    committed = output - 1
    alpha = rng.beta(0.7 * 15, 0.3 * 15, shape) if model == "varied" else np.full(shape, 0.7)
    per_round, variance = _acceptance_moments(alpha, DRAFT_TOKENS)
    rounds = committed / per_round + rng.standard_normal(shape) * np.sqrt(committed * variance / per_round**3)
    step = cost.step_time_s + cost.per_seq_s * (load[..., None] - 1)
    decode = np.maximum(rounds, 1) * (1 + DRAFT_TOKENS * cost.draft_cost_ratio) * step
    decode *= rng.lognormal(0, 0.03, shape)
    decode += (rng.random(shape) < 0.01) * rng.exponential(0.3, shape)
    ttft = rng.lognormal(math.log(0.12), 0.45, shape) * np.sqrt(load[..., None] / 8)
    ttft += (rng.random(shape) < 0.005) * rng.exponential(0.5, shape)
    failures = {outcome: rng.poisson(PER_INTERVAL * p, load.shape) for outcome, p in FAILURES.items()}
    return {"decode": decode, "committed": committed, "ttft": ttft, **{o.value: n for o, n in failures.items()}}


def traces(job: Job) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], np.ndarray]:
    """Speculative and control arms, shape (pilots, intervals, requests), and their shared load path,
    shape (pilots, intervals): sequences in flight per replica."""
    rng = np.random.default_rng(job.seed)
    intervals = job.windows + SPAN - 1
    drift = np.zeros((job.pilots, intervals))
    x = rng.standard_normal(job.pilots)
    for i in range(intervals):
        x = 0.8 * x + 0.6 * rng.standard_normal(job.pilots)
        drift[:, i] = x
    load = np.maximum(1, np.round(8 * np.exp(0.4 * drift)))
    spec, control = _arm(rng, load, job.model), _arm(rng, load, job.model)
    # From the first window every interval is slow; a later onset starts with the newest interval of
    # window `onset`, so the windows after it carry more and more of the slowdown, as in production.
    factor = np.ones(intervals)
    factor[0 if job.onset == 1 else job.onset + SPAN - 2 :] = 1 + job.slowdown
    spec["decode"] = spec["decode"] * factor[None, :, None]
    for arm in (spec, control):
        arm["e2e"] = arm["ttft"] + arm["decode"] + 0.005
    return spec, control, load


def offered_load(spec: dict[str, np.ndarray], control: dict[str, np.ndarray], load: np.ndarray) -> np.ndarray:
    """Offered load per replica for each pilot and window (pilots, windows), the same for both arms and
    production: the window's mean sequences in flight per replica over the mean end-to-end time of both
    arms' requests (Little's law), in requests per second per replica."""
    in_flight = _window_sums(load[..., None]) / SPAN
    e2e = (_window_sums(spec["e2e"]) + _window_sums(control["e2e"])) / (2 * SPAN * PER_INTERVAL)
    return np.asarray(in_flight / e2e)


# --- the judge, through the rollout --------------------------------------------------------------


def _requests(arm: dict[str, np.ndarray], p: int, t: int) -> ArmRequests:
    """Window t (0-based) of pilot p: intervals t .. t + SPAN - 1."""
    cut = slice(t, t + SPAN)
    outcomes = {o: int(arm[o.value][p, cut].sum()) for o in FAILURES}
    outcomes[RequestOutcome.OK] = SPAN * PER_INTERVAL
    return ArmRequests(
        outcomes=outcomes,
        decode_seconds=tuple(arm["decode"][p, cut].ravel().tolist()),
        committed_tokens=tuple(arm["committed"][p, cut].ravel().astype(int).tolist()),
        ttft_seconds=tuple(arm["ttft"][p, cut].ravel().tolist()),
        e2e_seconds=tuple(arm["e2e"][p, cut].ravel().tolist()),
    )


def _engine(end: datetime) -> ArmEngine:
    return ArmEngine(kv_usage=((end - WINDOW, 0.4), (end, 0.4)), acceptance_length=2.8)


def _window_load(offered: float, in_flight: float) -> WindowLoad:
    """Both compared arms and production's baseline at the same offered load per replica."""
    arm = ArmLoad(offered_per_replica=offered, in_flight_per_replica=in_flight, running_per_replica=in_flight)
    return WindowLoad(
        arms={Arm.SPECULATIVE: arm, Arm.CONTROL: arm, Arm.BASELINE: arm},
        arrival_rate=2 * SPAN * PER_INTERVAL / WINDOW.total_seconds(),
    )


def _fresh_evidence() -> Evidence:
    return with_arms(
        Evidence(compared=Arm.CONTROL),
        overlap=WINDOW / INTERVAL,
        kv_blocks={},
        gpus={Arm.BASELINE: 1, Arm.SPECULATIVE: 1, Arm.CONTROL: 1},
    )


def judge_pilot(
    spec: dict[str, np.ndarray],
    control: dict[str, np.ndarray],
    p: int,
    job: Job,
    loads: tuple[np.ndarray, np.ndarray] | None = None,
    *,
    flipped_on: list[str] | None = None,
) -> tuple[dict[str, int], str | None]:
    """First flip (1-based window) of the judge through the rollout, and of its tpct check alone; with
    `loads` (offered load and sequences in flight per replica, per pilot and window), every window the
    rollout judges is recorded into an evidence store compared with the control arm, and the scope's
    decision is stated at the end."""
    quality = Quality()
    status = advance(ScopeStatus(name="bench"), Tick(), policy=POLICY, warm=True, now=T0).status
    judge_state: dict[str, float] = {}
    first = {"judge": NEVER, "judge, tpct only": NEVER}
    failing = {"judge": 0, "judge, tpct only": 0}
    evidence = _fresh_evidence() if loads is not None else None
    fallbacks: list[FallbackRecord] = []
    run = 0
    for t in range(job.windows):
        end = T0 + INTERVAL * (t + 1)
        window = ScopeWindow(
            scope="bench",
            start=end - WINDOW,
            end=end,
            compared=_requests(control, p, t),
            speculative=_requests(spec, p, t),
            compared_engine=_engine(end),
            speculative_engine=_engine(end),
        )
        # The tpct-only count keeps judging after the scope flipped: the spending goes on alike.
        state = status.judge if status.state is not ScopeState.ROLLED_BACK else judge_state
        verdict = judge_window(window, analysis=ANALYSIS, quality=quality, draft_tokens=DRAFT_TOKENS, state=state)
        judge_state = verdict.state
        tpct = next(c for c in verdict.checks if c.metric is MetricName.TIME_PER_COMMITTED_TOKEN_RATIO)
        run = run + 1 if tpct.verdict is Verdict.FAIL else 0
        failing["judge, tpct only"] += tpct.verdict is Verdict.FAIL
        if run >= LIMIT and first["judge, tpct only"] == NEVER:
            first["judge, tpct only"] = t + 1
        if status.state is not ScopeState.ROLLED_BACK:
            failing["judge"] += verdict.verdict is Verdict.FAIL
            judged = Judged(
                verdict=verdict,
                summary=summarize(window, verdict),
                start=window.start,
                requests=PER_INTERVAL + sum(int(spec[o.value][p, t + SPAN - 1]) for o in FAILURES),
            )
            step = advance(status, judged, policy=POLICY, warm=True, now=end)
            status = step.status
            if step.record is not None:
                fallbacks.append(step.record)
            if status.state is ScopeState.ROLLED_BACK:
                first["judge"] = t + 1
            if evidence is not None and loads is not None:
                # As the operator records it: a window that began before its stage adds to the totals only.
                load = _window_load(float(loads[0][p, t]), float(loads[1][p, t]))
                started = status.stage_started_at
                evidence = record_window(
                    evidence,
                    window,
                    load,
                    verdict=verdict.verdict,
                    quality_failed=False,
                    settled=started is None or started <= window.start,
                )
                evidence = watch_production(evidence, load)
        if job.stop_at_flip and all(v != NEVER for v in first.values()):
            break
    counts = {**first, **{f"failing:{k}": v for k, v in failing.items()}}
    if flipped_on is not None:
        flipped_on.extend(record.metric.value for record in fallbacks)
    if evidence is None:
        return counts, None
    flipped = first["judge"] != NEVER
    decision = decide_scope(
        "bench",
        evidence,
        fallbacks=fallbacks,
        confidence=ANALYSIS.confidence,
        state=ScopeState.ROLLED_BACK if flipped else ScopeState.SPECULATIVE,
        ttft=ANALYSIS.thresholds.ttft,
    ).decision
    outcome = decision.outcome.value
    return counts, outcome if decision.defer_reason is None else f"{outcome}/{decision.defer_reason.value}"


# --- the same statistic and Flagger's rule, vectorised --------------------------------------------


def _window_sums(x: np.ndarray) -> np.ndarray:
    """Sums of x (pilots, intervals, requests) over each window's intervals: (pilots, windows)."""
    per_interval = x.sum(-1)
    cumulative = np.concatenate([np.zeros((x.shape[0], 1)), np.cumsum(per_interval, axis=1)], axis=1)
    return np.asarray(cumulative[:, SPAN:] - cumulative[:, :-SPAN])


def _log_ratio(arm: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    d, c = arm["decode"], arm["committed"]
    n = SPAN * PER_INTERVAL
    sd, sc = _window_sums(d), _window_sums(c)
    r = sd / sc
    residual = _window_sums(d * d) - 2 * r * _window_sums(d * c) + r * r * _window_sums(c * c)
    return np.log(r), n * residual / (n - 1) / sc**2 / r**2


def _first(fails: np.ndarray, *, consecutive: bool) -> np.ndarray:
    count = np.zeros(fails.shape[0], dtype=int)
    first = np.full(fails.shape[0], NEVER)
    for t in range(fails.shape[1]):
        count = np.where(fails[:, t], count + 1, 0 if consecutive else count)
        first = np.where((count >= LIMIT) & (first == NEVER), t + 1, first)
    return first


def vectorised(spec: dict[str, np.ndarray], control: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    (ls, vs), (lb, vb) = _log_ratio(spec), _log_ratio(control)
    log_ratio, se = ls - lb, np.sqrt(vs + vb)
    limit = math.log(ANALYSIS.thresholds.max_time_per_committed_token_ratio)
    naive = (log_ratio - limit) / se > NormalDist().inv_cdf(ANALYSIS.confidence)
    out = {"naive z 95%": _first(naive, consecutive=True), "failing:naive z 95%": naive.sum(1)}
    for threshold in (1.0, 1.1):
        fails = log_ratio > math.log(threshold)
        out[f"static {threshold:g}"] = _first(fails, consecutive=False)
        out[f"failing:static {threshold:g}"] = fails.sum(1)
    return out


MIXTURE_SCALE = 0.1  # the half-normal prior's scale on the log ratio's excess: a 10% slowdown


def mixture_log_lr(score: float, information: float, *, scale: float = MIXTURE_SCALE) -> float:
    """log of the one-sided normal-mixture likelihood ratio (Robbins 1970; Johari, Koomen, Pekelis and
    Walsh, "Always Valid Inference", Operations Research 70(3), 2022) for independent normal estimates
    x_i of an excess delta over a limit, variances v_i: `score` = sum(x_i / v_i), `information` =
    sum(1 / v_i), the excess mixed over a half-normal of `scale`. With delta at or below zero it is a
    nonnegative supermartingale, so it ever reaches 1/a with chance at most a (Ville), however often
    it is read."""
    spread = 1 + scale * scale * information
    m = scale * score / math.sqrt(spread)
    tail = 0.5 * math.erfc(-m / math.sqrt(2))  # the normal CDF at m
    return math.log(2) - 0.5 * math.log(spread) + m * m / 2 + math.log(max(tail, 1e-300))


def mixture(spec: dict[str, np.ndarray], control: dict[str, np.ndarray], *, alpha: float) -> dict[str, np.ndarray]:
    """The always-valid alternative on the same statistic: a one-sided normal-mixture SPRT
    (`mixture_log_lr`) on the log ratio's estimates of windows that share no request (every
    SPAN-th window), read at each of them; it rejects once the mixture reaches 1 / alpha. Two flips are
    counted: at the rejection, as a hard limit would flip, and LIMIT - 1 windows later, as the rollout's
    failureLimit windows in a row would (a rejection stands until the next independent window)."""
    (ls, vs), (lb, vb) = _log_ratio(spec), _log_ratio(control)
    limit = math.log(ANALYSIS.thresholds.max_time_per_committed_token_ratio)
    x, v = (ls - lb - limit)[:, ::SPAN], (vs + vb)[:, ::SPAN]
    score, information = np.cumsum(x / v, axis=1), np.cumsum(1 / v, axis=1)
    log_lr = np.vectorize(mixture_log_lr)(score, information)
    rejects = log_lr >= math.log(1 / alpha)
    looked = np.arange(rejects.shape[1]) * SPAN + 1  # the 1-based window each independent look is
    first = np.where(rejects.any(1), looked[np.argmax(rejects, axis=1)], NEVER)
    in_a_row = np.where(first == NEVER, NEVER, first + LIMIT - 1)
    name = f"mSPRT {alpha:g}"
    failing = rejects.sum(1)
    return {
        name: first,
        f"{name}, {LIMIT} in a row": in_a_row,
        f"failing:{name}": failing,
        f"failing:{name}, {LIMIT} in a row": failing,
    }


def run_job(job: Job) -> Flips:
    spec, control, load = traces(job)
    flips = Flips()
    found = {
        **vectorised(spec, control),
        **{k: v for a in MIXTURE_ALPHAS for k, v in mixture(spec, control, alpha=a).items()},
    }
    for key, values in found.items():
        target = flips.failing_windows if key.startswith("failing:") else flips.first
        target[key.removeprefix("failing:")] = values.tolist()
    loads = (offered_load(spec, control, load), _window_sums(load[..., None]) / SPAN) if job.decide else None
    for p in range(job.pilots):
        counts, decision = judge_pilot(spec, control, p, job, loads, flipped_on=flips.flipped_on)
        for key, value in counts.items():
            target = flips.failing_windows if key.startswith("failing:") else flips.first
            target.setdefault(key.removeprefix("failing:"), []).append(value)
        if decision is not None:
            flips.decisions.append(decision)
    return flips


# --- tables ---------------------------------------------------------------------------------------

MIXTURE_ALPHAS = (0.01,)
METHODS = (
    "judge",
    "judge, tpct only",
    *(f"mSPRT {alpha:g}{tail}" for alpha in MIXTURE_ALPHAS for tail in ("", f", {LIMIT} in a row")),
    "naive z 95%",
    "static 1",
    "static 1.1",
)


def _jobs(template: Job) -> Iterator[Job]:
    """`template.pilots` pilots in chunks of 25, each chunk with its own seed."""
    chunk = 25
    for i, start in enumerate(range(0, template.pilots, chunk)):
        yield replace(template, pilots=min(chunk, template.pilots - start), seed=template.seed * 1_000_003 + i)


def _run(pool: ProcessPoolExecutor, jobs: list[Job]) -> Flips:
    total = Flips()
    for flips in pool.map(run_job, jobs):
        total.add(flips)
    return total


def _wilson_bounds(hits: int, n: int) -> tuple[float, float]:
    z = 1.96
    centre = (hits + z * z / 2) / (n + z * z)
    half = z * math.sqrt(hits * (n - hits) / n + z * z / 4) / (n + z * z)
    return max(0.0, centre - half), min(1.0, centre + half)


def _wilson(hits: int, n: int) -> str:
    low, high = _wilson_bounds(hits, n)
    return f"[{low:.2%}, {high:.2%}]"


def aa_table(flips: Flips, *, model: str, windows: int) -> None:
    n = len(flips.first["judge"])
    print(f"\nA/A, identical arms ({model} acceptance): {n} pilots x {windows} windows, share of pilots with a flip")
    print(f"| {'method':22} | pilots flipped | 95% interval      | failing windows per pilot |")
    print(f"|{'-' * 24}|----------------|-------------------|---------------------------|")
    for method in METHODS:
        first = np.array(flips.first[method])
        hits = int((first != NEVER).sum())
        failing = float(np.mean(flips.failing_windows[method]))
        print(f"| {method:22} | {hits / n:>14.2%} | {_wilson(hits, n):17} | {failing:>25.2f} |")
    if flips.decisions:
        _false_positives(flips)


def _false_positives(flips: Flips) -> None:
    """The judge's pilots that flip, that state an adoption, and that do either, against the target."""
    flipped = np.array(flips.first["judge"]) != NEVER
    adopted = np.array([d.split("/")[0] in ADOPTIONS for d in flips.decisions])
    n = len(flipped)
    print(f"\nA/A against the control arm, judge through the rollout then decide_scope: {n} pilots")
    print(f"| {'pilots that':28} | pilots | share  | 95% interval      |")
    print(f"|{'-' * 30}|--------|--------|-------------------|")
    for what, hits in (
        ("flip (RolledBack)", flipped),
        ("state an adoption", adopted),
        ("flip or state an adoption", flipped | adopted),
    ):
        k = int(hits.sum())
        print(f"| {what:28} | {k:>6} | {k / n:>6.2%} | {_wilson(k, n):17} |")
    k = int((flipped | adopted).sum())
    share, high = k / n, _wilson_bounds(k, n)[1]
    if high <= TARGET:
        met = f"met (upper 95% bound {high:.2%})"
    elif share <= TARGET:
        met = f"not shown: {share:.2%} observed, but the upper 95% bound is {high:.2%} with {n} pilots"
    else:
        met = f"not met ({share:.2%} observed, 95% interval {_wilson(k, n)})"
    print(f"Target: at most {TARGET:.0%} of A/A pilots flip or state an adoption: {met}")
    on = Counter(flips.flipped_on)
    print("Flips by the check that tripped: " + (", ".join(f"{m} {c}" for m, c in on.most_common()) or "none"))
    stated = Counter(flips.decisions)
    print("Decisions stated: " + ", ".join(f"{d} {c / n:.1%}" for d, c in stated.most_common()))


def power_table(results: dict[float, Flips], *, model: str, onset: int) -> None:
    within = LIMIT + 1
    when = "from the first window" if onset == 1 else f"from window {onset} (the scope speculative by then)"
    print(f"\nPower ({model} acceptance), slowdown in time per committed token {when}; windows counted from the onset")
    print(f"| slowdown | {'method':22} | flipped before | flipped | median | p95   | P(flip within {within} windows) |")
    print(f"|----------|{'-' * 24}|----------------|---------|--------|-------|---------------------------|")
    for slowdown, flips in results.items():
        for method in METHODS:
            first = np.array(flips.first[method])
            early = first < onset  # a false flip before there was anything to find
            delay = np.where(early, NEVER, np.where(first == NEVER, NEVER, first - (onset - 1)))
            flipped = delay != NEVER
            within_share = float((flipped & (delay <= within)).mean())
            print(
                f"| {slowdown:>8.0%} | {method:22} | {early.mean():>14.1%} | {flipped.mean():>7.1%} |"
                f" {_windows(float(np.median(delay))):>6} | {_windows(float(np.percentile(delay, 95))):>5} |"
                f" {within_share:>25.1%} |"
            )


def _windows(value: float) -> str:
    return "never" if value >= NEVER else f"{value:.3g}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pilots", type=int, default=1000, help="A/A and power pilots per row")
    parser.add_argument("--windows", type=int, default=200, help="windows per A/A pilot")
    parser.add_argument("--late-pilots", type=int, default=200, help="pilots per late-onset row")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--models", default="varied,mock", help="acceptance models, comma-separated")
    parser.add_argument("--quick", action="store_true", help="skip the late-onset rows")
    args = parser.parse_args()
    started = time.perf_counter()
    print(
        f"defaults: confidence {ANALYSIS.confidence}, failureLimit {LIMIT}, minSamples {ANALYSIS.min_samples}, "
        f"interval {ANALYSIS.interval}, window {ANALYSIS.window} ({SPAN * PER_INTERVAL} requests per arm, "
        f"{1 - 1 / SPAN:.0%} shared with the next window), max tpct ratio "
        f"{ANALYSIS.thresholds.max_time_per_committed_token_ratio:g}"
    )
    with ProcessPoolExecutor(args.workers) as pool:
        for model in args.models.split(","):
            aa = _run(pool, list(_jobs(Job(model, 0.0, 1, args.pilots, args.windows, args.seed, False, decide=True))))
            aa_table(aa, model=model, windows=args.windows)
            power = {
                s: _run(pool, list(_jobs(Job(model, s, 1, args.pilots, 60, args.seed + 1, True))))
                for s in (0.10, 0.15, 0.25)
            }
            power_table(power, model=model, onset=1)
            if not args.quick:
                late = {
                    s: _run(pool, list(_jobs(Job(model, s, 101, args.late_pilots, 160, args.seed + 2, True))))
                    for s in (0.10, 0.15, 0.25)
                }
                power_table(late, model=model, onset=101)
    print(f"\n{time.perf_counter() - started:.0f}s with {args.workers} workers")


if __name__ == "__main__":
    main()
