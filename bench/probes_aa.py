"""Probe benchmark: how often identical arms flip the greedy probe check, how often and how soon an arm
that diverges at twice the baseline's rate does, from the first round or after 500 clean ones, over a
pilot's probe rounds; how many asks a round reach the power targets, at what cost; and how soon a cancel
leak or a tool-call breakage that begins after 500 clean rounds flips, beside the same from the first.

Run on demand, not a test:

    .venv/bin/python bench/probes_aa.py --batching probed --server-rounds 0  # 1,000 runs a row, 2 workers
    .venv/bin/python bench/probes_aa.py --runs 200 --late-runs 50 --sweep-runs 50 --server-rounds 0  # smoke

Both sides are the project's own code. The arms are the mock's natural variation: each probe answer's
divergence is drawn by `textgen.draw_divergence` (what the mock's handler calls for a temperature-0
request), with the profile's `model.greedy_divergence` as the rate, the batch the request joins and
the same horizon, and its text is the mock's: the controller's request body (`request_body`) parsed
by the mock (`parse_generation`), planned (`answer_plan.plan`) and committed token by token by the
engine's `Request` until it finishes, as the server's engine does. The verdict is the operator's: each
round is judged by `probes.greedy_round`, added to the rounds before by `quality.accumulated` (which
steps the sequential tests, `proportions.Sequential`) and checked by `quality.probe_checks` at the
default analysis.confidence (0.95: the probes' 1% of false flips, a quarter to the mixture test and the
rest to the change detector, `quality.CHANGE_SHARE`), as the controller does once a round lands. A
round asks the case `--per-round` times (probes.perRound's default), one ask after the other as
`controller.quality_gates.run_probes` does, into one tally. The greedy check is a hard limit: one
failing check flips the scope, so a run flips at its first failing round.

Why in-process is faithful: the server decides a greedy answer's divergence from nothing but the knob,
the batch it counts when the request arrives (requests running and waiting, plus itself), the horizon
min(max_tokens, mean_output_tokens) and a fresh seed from the engine's stream, then writes the text from
the prompt and the server seed; timing enters only through that batch. The in-process path makes the
same calls with the same inputs, so it draws from the same law, at thousands of rounds a second. A probe
round sends each pod a case's two requests at once (whole and streamed), then the baseline its repeat
once both answered, and the mock counts them as they arrive: on an idle pod every pair of answers joins
batches of 1 and 2 (`probed`, what the server shows), so the arms are alike answer by answer. `apart`
puts every answer in a batch of one, as if the requests did not overlap. `--load N` adds N sequences
running on both pods.

Unless `--server-rounds 0`, a calibration leg runs the same case through two real mock servers on
127.0.0.1 (idle, at time scale 0.01), the controller's `probe_case` sending the requests, and prints
the share of comparisons that differed beside the in-process path's at the same pod seeds. Two pods
with the same --seed draw the same seed stream (at different paces: the baseline takes two requests
per speculative one), so each row spreads its rounds over five pod seeds whose canonical answers run
to maxTokens.

Rates are the knob: the chance that an answer alone in its batch departs from the canonical text. The
prompt's canonical answer runs to maxTokens (64), so every drawn position shows in the text. A greedy
comparison differs when either answer diverged, so at rate r both arms' comparisons differ about twice
as often; with every answer alone (`apart`), a speculative arm at 2r differs from the baseline about
1.5 times as often as the baseline from itself, which is what the power rows have to detect. The
header prints the tests' settings, the smallest p-value one round (two comparisons a side) can reach,
and what a round costs in requests.

Tables: per batching, per rate, over that rate's rounds (`--rounds`; the targets: 80% power
within 300 rounds at 10% and within 1,500 at 3%): the comparisons that differed on each side, the
share of A/A runs with any flip against the target (met when the upper end of the 95% Wilson interval
is at most 1%), the power (the share of runs with the speculative arm at twice the rate that flip
within the rounds), the median and the 80th-percentile round of the first flip, and the fixed-sample
bound: the rounds a one-sided test at 1% looking once would need for 80% power at the differing rates
measured (normal approximation, comparisons taken as independent, two a side per ask), the information
limit the 80th percentile is set beside; a target that lies beyond it says so with the figure, and each
row says what a case costs in requests per minute per arm at the default interval. Then the late faults:
runs with the speculative arm at the baseline's rate until round 500 and at twice it after, for twice
the rate's rounds, and a cancel leak (every dropped stream's slot kept, against a fifth of them hidden
by load on both arms) and a tool-call breakage (every call's arguments cut short): the median rounds
from the fault to the flip beside the median of the same fault from the first round, met within 1.5
times, or within the detector's delay where the fault from the first round flips at once (a broken call
is below quality.minAgreement at the first ask). Last, the sweep: power at twice the divergence within
each target's rounds for 1, 2 and 4 asks a round (`--sweep`), with the bound and the cost of each.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import random
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import cache, lru_cache
from typing import Any

import aiohttp

from specpilot.analysis.answers import Answer, ToolCall
from specpilot.analysis.probes import (
    ArmAnswers,
    CaseTally,
    Readings,
    accumulate,
    answer_round,
    cancel_round,
    greedy_round,
)
from specpilot.analysis.proportions import BLOCK, HORIZON, ODDS, WEIGHTS, Sequential
from specpilot.analysis.quality import (
    CHANGE_SHARE,
    ProbeResult,
    accumulated,
    case_key,
    kind_groups,
    probe_alpha,
    probe_checks,
)
from specpilot.analysis.stats import z_quantile
from specpilot.api.spec import Analysis, ProbeCase, ProbeKind, Probes, Quality
from specpilot.api.status import Verdict
from specpilot.controller.quality_gates import probe_case, request_body
from specpilot.mockvllm.answer_plan import Slips, plan
from specpilot.mockvllm.config import ServeConfig, parse_args, resolve_limits
from specpilot.mockvllm.profile import DEFAULT_SCOPE, Profile, parse_profile
from specpilot.mockvllm.protocol import parse_generation
from specpilot.mockvllm.request import Request
from specpilot.mockvllm.server import MockServer
from specpilot.mockvllm.textgen import divergence_chance, draw_divergence, text_seed

MODEL = "bench-model"
PROMPT = "Summarise the release notes for version 2.4."  # its canonical answer runs past maxTokens
RATES = (0.01, 0.03, 0.10)
ROUNDS = (3000, 1500, 300)  # per rate: the rounds a pilot runs (the A/A side) and the power is counted within
ONSET = 500  # the late faults: clean rounds before the speculative arm diverges at FACTOR times the rate
POWER = 0.8  # the power the fixed-sample bound is computed for
FACTOR = 2.0  # the speculative arm's rate in the power rows, as a multiple of the baseline's
TARGET = 0.01  # at most this share of A/A runs may flip
POWER_TARGETS = {0.03: 1500, 0.10: 300}  # rate: the rounds within which 80% of runs at FACTOR must flip
PER_ROUND = Probes().per_round  # asks of each case per round, by default
SWEEP = (1, 2, 4)  # asks per round the power sweep tries
LATE_RATIO = 1.5  # a late fault must flip within this many times the rounds of the same fault from the start
QUALITY = Quality()
CONFIDENCE = Analysis().confidence
CHUNK = 25  # runs per job
LOCAL_ROUNDS = 10_000  # in-process rounds set beside the servers' in the calibration
CALIBRATION_SEEDS = 5  # pod seeds per calibration row: independent server streams


class Batching(StrEnum):
    """Which batches a round's answers join: as the probe's requests arrive together, or each alone."""

    PROBED = "probed"
    APART = "apart"


@dataclass(frozen=True)
class Job:
    """`runs` runs of `rounds` probe rounds, the baseline at `rate` and the speculative arm at
    `rate * factor`."""

    rate: float
    factor: float
    runs: int
    rounds: int
    seed: int
    load: int
    batching: Batching
    prompt: str
    mock_seed: int = 0  # the pods' --seed
    onset: int = 0  # rounds the speculative arm runs at the baseline's rate before it diverges more
    per_round: int = PER_ROUND  # asks of the case per round (probes.perRound), one after the other


@dataclass
class Runs:
    """What a set of runs came to: the round of each run's first flip (None: never), and the
    comparisons that differed on each side over the rounds run."""

    first_flip: list[int | None] = field(default_factory=list)
    speculative_diverged: int = 0
    speculative_trials: int = 0
    baseline_diverged: int = 0
    baseline_trials: int = 0

    def add(self, other: Runs) -> None:
        self.first_flip += other.first_flip
        self.speculative_diverged += other.speculative_diverged
        self.speculative_trials += other.speculative_trials
        self.baseline_diverged += other.baseline_diverged
        self.baseline_trials += other.baseline_trials

    def count(self, tally: CaseTally) -> None:
        self.speculative_diverged += tally.speculative_diverged
        self.speculative_trials += tally.speculative_trials
        self.baseline_diverged += tally.baseline_diverged
        self.baseline_trials += tally.baseline_trials

    def sides(self) -> list[list[int]]:
        """[diverged, trials] of the speculative arm against the baseline, and of the baseline against itself."""
        return [
            [self.speculative_diverged, self.speculative_trials],
            [self.baseline_diverged, self.baseline_trials],
        ]

    @property
    def flipped(self) -> int:
        return sum(first is not None for first in self.first_flip)


def probe(prompt: str) -> tuple[Probes, ProbeCase]:
    """The pilot's probes: one greedy prompt, at the default maxTokens."""
    probes = Probes(prompts=[prompt])
    (case,) = probes.all_cases
    return probes, case


def mock(rate: float, seed: int = 0) -> tuple[ServeConfig, Profile]:
    """A mock pod's flags (the defaults but `--seed`) and its profile at `rate`."""
    return parse_args([MODEL, "--seed", str(seed)]), parse_profile({"model": {"greedy_divergence": rate}})


def batches(batching: Batching, load: int) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
    """The batch each probe answer joins (whole, streamed), for the baseline, its repeat and the
    speculative arm: the mock counts `load` running sequences, the pair's request that arrived before,
    and the request itself (the repeat goes once both arms answered)."""
    if batching is Batching.PROBED:
        pair = (load + 1, load + 2)
        return pair, pair, pair
    alone = (load + 1, load + 1)
    return alone, alone, alone


class Pod:
    """One arm's mock, in-process: where its greedy answers to a case diverge, and their text."""

    def __init__(self, case: ProbeCase, *, max_tokens: int, rate: float, seed: int = 0) -> None:
        config, profile = mock(rate, seed)
        body = request_body(case, model=MODEL, max_tokens=max_tokens, stream=False)
        gen = parse_generation(
            "chat" if "messages" in body else "completion", body, resolve_limits(config, profile), force_usage=False
        )
        self.rate = profile.model.greedy_divergence
        # The horizon the server's handler passes to draw_divergence.
        self.horizon = min(gen.max_tokens, profile.model.mean_output_tokens)
        seed = text_seed(gen.prompt, config.seed)

        @cache
        def text(diverge_at: int | None) -> Answer:
            planned = plan(
                gen, seed=seed, mean_length=profile.model.mean_output_tokens, diverge_at=diverge_at, slips=Slips()
            )
            request = Request(
                scope=DEFAULT_SCOPE,
                prompt_tokens=gen.prompt_tokens,
                max_tokens=gen.max_tokens,
                tokens=planned.tokens,
                stop=gen.stop,
                ignore_eos=gen.ignore_eos,
                arrival=0.0,
                seed=0,
                min_tokens=gen.min_tokens,
                stop_token_ids=gen.stop_token_ids,
                include_stop=gen.include_stop_str_in_output,
            )
            while not request.done:
                request.commit(gen.max_tokens, 0.0)
            return Answer(request.text, str(request.finish_reason))

        self.text: Callable[[int | None], Answer] = text

    def answers(self, rng: random.Random, batch: tuple[int, int]) -> ArmAnswers:
        """A whole and a streamed answer, each drawn as the engine draws it from a fresh seed per request
        (the bench's stream draws from the same law, without seeding a generator per answer)."""
        whole, streamed = (
            self.text(draw_divergence(rng, rate=self.rate, batch=b, horizon=self.horizon)) for b in batch
        )
        return ArmAnswers(whole, streamed)

    def length(self) -> int:
        """Output tokens of the canonical answer (what the text holds when nothing diverged)."""
        return len(self.text(None).text.split())


class Pilot:
    """A case probed on both arms' pods, round by round, judged as the controller judges it."""

    def __init__(self, job: Job) -> None:
        probes, self.case = probe(job.prompt)
        self.baseline = Pod(self.case, max_tokens=probes.max_tokens, rate=job.rate, seed=job.mock_seed)
        self.speculative = Pod(self.case, max_tokens=probes.max_tokens, rate=job.rate * job.factor, seed=job.mock_seed)
        self.onset = job.onset
        self.per_round = job.per_round
        self.batches = batches(job.batching, job.load)
        self.key = case_key(self.case)
        self.groups = kind_groups([self.case]).values()
        # greedy_round is pure and the texts are cached, so a round whose answers repeat an earlier
        # round's is judged once.
        self.judged = lru_cache(maxsize=1 << 16)(self._judge)

    def _judge(self, baseline: ArmAnswers, again: ArmAnswers, speculative: ArmAnswers) -> CaseTally:
        return greedy_round(self.case, baseline=baseline, again=again, speculative=speculative)

    def round(self, rng: random.Random, index: int = 1) -> CaseTally:
        """Probe round `index`: `per_round` asks one after the other, each the baseline, its repeat and
        the speculative arm (at the baseline's rate until the onset), in the order they arrive; one tally,
        as the controller's `run_probes` adds them up."""
        first, again, spec = self.batches
        speculative = self.speculative if index > self.onset else self.baseline
        total: CaseTally | None = None
        for _ in range(self.per_round):
            tally = self.judged(
                self.baseline.answers(rng, first), self.baseline.answers(rng, again), speculative.answers(rng, spec)
            )
            total = tally if total is None else replace(accumulate(total, tally), rounds=1)
        assert total is not None  # asked at least once
        return total

    def flip(self, rng: random.Random, *, rounds: int, seen: Runs) -> int | None:
        """Rounds accumulated and checked after each, as the controller does; the first failing round."""
        result: ProbeResult | None = None
        for index in range(1, rounds + 1):
            tally = self.round(rng, index)
            if index > self.onset:
                seen.count(tally)
            result = accumulated(result, ProbeResult({self.key: tally}), groups=self.groups)
            if shown(result) and failed(result, self.case):
                return index
        return None


def shown(result: ProbeResult) -> bool:
    """Whether the tests' state could fail the check: the levels `quality.probe_checks` reads them at.
    A shortcut only: the check itself (`failed`) decides, read where this holds."""
    alpha = probe_alpha(CONFIDENCE)
    return any(
        test.mixture_p() <= alpha * (1 - CHANGE_SHARE) or test.change_p() <= alpha * CHANGE_SHARE
        for test in result.tests.values()
    )


def failed(result: ProbeResult, case: ProbeCase) -> bool:
    """The operator's check of the case's kind fails."""
    return any(
        check.verdict is Verdict.FAIL for check in probe_checks(result, [case], quality=QUALITY, confidence=CONFIDENCE)
    )


SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOL_CASE = ProbeCase.from_wire(
    {"kind": "toolCall", "prompt": "weather", "toolChoice": "required", "tools": [{"name": "w", "parameters": SCHEMA}]}
)
CANCEL_CASE = ProbeCase.from_wire({"kind": "cancel", "prompt": "long"})
GOOD_CALL = Answer("", "tool_calls", None, (ToolCall("w", '{"city": "Oslo"}'),))
BROKEN_CALL = Answer("", "tool_calls", None, (ToolCall("w", '{"city":'),))


@dataclass(frozen=True)
class Fault:
    """A fault of a kind judged as answers: each ask fails on the baseline at `natural`, on the speculative
    arm at `natural` until the onset and at `faulty` after."""

    name: str
    kind: ProbeKind
    natural: float
    faulty: float


FAULTS = (
    # a loaded pod holds the gauge up past the bound on a fifth of the asks, on both arms; the leak keeps
    # every dropped stream's slot
    Fault("cancel leak", ProbeKind.CANCEL, 0.2, 1.0),
    Fault("tool-call breakage", ProbeKind.TOOL_CALL, 0.0, 1.0),  # every call's arguments cut short
)


def fault_ask(fault: Fault, *, base_fails: bool, spec_fails: bool) -> CaseTally:
    """One ask of the fault's case, judged by the operator's round functions."""
    if fault.kind is ProbeKind.CANCEL:
        base, spec = (Readings(3, 4 if fails else 3) for fails in (base_fails, spec_fails))
        return cancel_round(CANCEL_CASE, baseline=base, speculative=spec)
    base_answer, spec_answer = (BROKEN_CALL if fails else GOOD_CALL for fails in (base_fails, spec_fails))
    return answer_round(
        TOOL_CASE, baseline=ArmAnswers(base_answer, base_answer), speculative=ArmAnswers(spec_answer, spec_answer)
    )


@dataclass(frozen=True)
class FaultJob:
    """`runs` runs of `rounds` rounds of `fault`, `per_round` asks a round, starting after `onset` rounds."""

    fault: Fault
    runs: int
    rounds: int
    seed: int
    onset: int
    per_round: int = PER_ROUND


def run_fault_job(job: FaultJob) -> Runs:
    """Each run: rounds until the kind's check first fails, or all of them."""
    fault, out, rng = job.fault, Runs(), random.Random(job.seed)
    case = CANCEL_CASE if fault.kind is ProbeKind.CANCEL else TOOL_CASE
    key, groups = case_key(case), kind_groups([case]).values()
    for _ in range(job.runs):
        result: ProbeResult | None = None
        flipped = None
        for index in range(1, job.rounds + 1):
            rate = fault.faulty if index > job.onset else fault.natural
            asks = [
                fault_ask(fault, base_fails=rng.random() < fault.natural, spec_fails=rng.random() < rate)
                for _ in range(job.per_round)
            ]
            tally = asks[0]
            for ask in asks[1:]:
                tally = replace(accumulate(tally, ask), rounds=1)
            if index > job.onset:
                out.count(tally)
            result = accumulated(result, ProbeResult({key: tally}), groups=groups)
            # a clean round fails nothing the tests do not show: the share of passes stays whole
            regressed = any(t.regressions for t in result.tallies.values())
            if (shown(result) or regressed) and failed(result, case):
                flipped = index
                break
        out.first_flip.append(flipped)
    return out


def detector_delay(per_round: int) -> int:
    """Rounds the tests take to show a fault on every ask against none on the baseline: the delay a late
    fault is measured give or take."""
    test = Sequential()
    alpha = probe_alpha(CONFIDENCE)
    for index in itertools.count(1):
        test = test.step([(per_round, per_round, 0, per_round)])
        if test.mixture_p() <= alpha * (1 - CHANGE_SHARE) or test.change_p() <= alpha * CHANGE_SHARE:
            return index
    raise AssertionError("unreachable")


def run_job(job: Job) -> Runs:
    """Each run: rounds until the greedy check first fails (the scope flips), or all of them."""
    pilot = Pilot(job)
    out = Runs()
    rng = random.Random(job.seed)
    for _ in range(job.runs):
        out.first_flip.append(pilot.flip(rng, rounds=job.rounds, seen=out))
    return out


def count_job(job: Job) -> Runs:
    """The comparisons that differed over `job.rounds` rounds, unjudged: the calibration's in-process side."""
    pilot = Pilot(job)
    out = Runs()
    rng = random.Random(job.seed)
    for _ in range(job.rounds):
        out.count(pilot.round(rng))
    return out


def _jobs(template: Job) -> Iterator[Job]:
    """`template.runs` runs in chunks, each chunk with its own seed."""
    for i, start in enumerate(range(0, template.runs, CHUNK)):
        yield replace(template, runs=min(CHUNK, template.runs - start), seed=template.seed * 1_000_003 + i)


def simulate(pool: ProcessPoolExecutor, template: Job) -> Runs:
    total = Runs()
    for runs in pool.map(run_job, list(_jobs(template))):
        total.add(runs)
    return total


async def server_leg(*, rate: float, factor: float, rounds: int, prompt: str, seed: int) -> Runs:
    """`rounds` probe rounds through two mock servers on 127.0.0.1, the controller's `probe_case`
    sending them: the divergence the server shows, to set beside the in-process path's."""
    probes, case = probe(prompt)
    servers = []
    for arm_rate in (rate, rate * factor):
        config, profile = mock(arm_rate, seed)
        server = MockServer(replace(config, time_scale=0.01), profile, env={}, on_crash=lambda code: None)
        await server.start("127.0.0.1", 0, 0)
        servers.append(server)
    baseline, speculative = (f"http://127.0.0.1:{server.port}" for server in servers)
    out = Runs()
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(rounds):
                tally = await probe_case(
                    session, case, baseline=baseline, speculative=speculative, model=MODEL, max_tokens=probes.max_tokens
                )
                out.count(tally)
    finally:
        for server in servers:
            await server.stop()
    return out


def wilson(hits: int, n: int) -> tuple[float, float]:
    """The 95% Wilson interval of a share."""
    z = 1.96
    centre = (hits + z * z / 2) / (n + z * z)
    half = z * math.sqrt(hits * (n - hits) / n + z * z / 4) / (n + z * z)
    return max(0.0, centre - half), min(1.0, centre + half)


def _sides(sides: Sequence[Sequence[int]]) -> str:
    """Speculative vs baseline / baseline vs itself, as shares of their comparisons."""
    return " / ".join(f"{diverged / trials:.2%}" if trials else "-" for diverged, trials in sides)


def quantile_round(first_flip: Sequence[int | None], q: float) -> int | None:
    """The round by which `q` of all the runs flipped; None when fewer did within the rounds, or no run
    was made."""
    rounds = sorted(first for first in first_flip if first is not None)
    need = math.ceil(q * len(first_flip))
    return rounds[need - 1] if 0 < need <= len(rounds) else None


def fixed_sample_rounds(
    sides: Sequence[Sequence[int]], *, alpha: float, power: float, per_round: int = PER_ROUND
) -> float | None:
    """The rounds a one-sided two-proportion test looking once at level `alpha` needs for `power` at the
    measured differing rates (speculative vs baseline, baseline vs itself), two comparisons a side per
    ask and `per_round` asks a round; None when the speculative side does not differ more."""
    (x_s, n_s), (x_b, n_b) = sides
    if not n_s or not n_b:
        return None
    p_s, p_b = x_s / n_s, x_b / n_b
    if p_s <= p_b:
        return None
    pooled = (p_s + p_b) / 2
    spread = z_quantile(1 - alpha) * math.sqrt(2 * pooled * (1 - pooled))
    spread += z_quantile(power) * math.sqrt(p_s * (1 - p_s) + p_b * (1 - p_b))
    return (spread / (p_s - p_b)) ** 2 / (2 * per_round)


def requests_per_minute(per_round: int) -> tuple[float, float]:
    """What a greedy case costs each arm at the default interval and `per_round` asks: the baseline 4
    requests an ask (whole and streamed, and their repeat), the speculative arm 2."""
    minutes = Probes().interval.total_seconds() / 60
    return 4 * per_round / minutes, 2 * per_round / minutes


def power_row(rate: float, power: Runs, *, rounds: int, per_round: int) -> dict[str, Any]:
    """The runs at FACTOR times the rate: how many flipped within `rounds`, by when, beside the fixed-sample
    bound and the target."""
    bound = fixed_sample_rounds(power.sides(), alpha=TARGET, power=POWER, per_round=per_round)
    by = quantile_round(power.first_flip, POWER)
    target = POWER_TARGETS.get(rate)
    return {
        "rate": rate,
        "per_round": per_round,
        "requests_per_minute": requests_per_minute(per_round),
        "power_runs": len(power.first_flip),
        "power_diverged": power.sides(),
        "power": power.flipped / len(power.first_flip),
        "power_median_round": quantile_round(power.first_flip, 0.5),
        "power_round": by,
        "fixed_sample_rounds": bound,
        "target_rounds": target,
        "target_met": None if target is None else by is not None and by <= target,
        "target_beyond_bound": None if target is None or bound is None else bound > target,
    }


def row(rate: float, aa: Runs, power: Runs, *, rounds: int, batching: Batching, per_round: int) -> dict[str, Any]:
    runs = len(aa.first_flip)
    low, high = wilson(aa.flipped, runs)
    return {
        "batching": str(batching),
        "runs": runs,
        "rounds": rounds,
        "aa_diverged": aa.sides(),
        "aa_flipped": aa.flipped,
        "aa_flip_share": aa.flipped / runs,
        "aa_flip_interval": [low, high],
        "aa_target_met": high <= TARGET,
        **power_row(rate, power, rounds=rounds, per_round=per_round),
    }


def late_row(kind: str, rate: float, late: Runs, early: Runs, *, rounds: int, per_round: int) -> dict[str, Any]:
    """The runs whose fault starts at round ONSET + 1, beside the same fault from the first round: the
    rounds from the fault to the flip that half of all the runs reach."""
    after = [None if first is None else first - ONSET for first in late.first_flip]
    return {
        "kind": kind,
        "rate": rate,
        "per_round": per_round,
        "runs": len(after),
        "rounds": rounds,
        "diverged": late.sides(),
        "flipped": sum(first is not None for first in after),
        "median_round": quantile_round(after, 0.5),
        "from_start_median_round": quantile_round(early.first_flip, 0.5),
    }


def _cell(value: int | None, rounds: int) -> str:
    """A round by which a share of the runs flipped: beyond the rounds run when fewer did."""
    return f"> {rounds}" if value is None else str(value)


def _target(r: dict[str, Any]) -> str:
    """The power target's cell: met or not, and whether it lies beyond the fixed-sample bound."""
    target, bound = r["target_rounds"], r["fixed_sample_rounds"]
    if target is None:
        return "-"
    said = f"{POWER:.0%} by {target}: {'met' if r['target_met'] else 'NOT met'}"
    if r["target_beyond_bound"]:
        said += f"; beyond the fixed-sample bound ({bound:.0f} > {target})"
    return said


def _cost(r: dict[str, Any]) -> str:
    base, spec = r["requests_per_minute"]
    return f"{base:.2g}, {spec:.2g}"


def print_table(rows: Sequence[dict[str, Any]], *, batching: Batching, load: int, per_round: int) -> None:
    print(
        f"\n{batching} (load {load}, {per_round} asks a round); differed: comparisons that differed, speculative vs "
        "baseline / baseline vs itself"
    )
    head = ["natural greedy divergence", "runs", "rounds", "A/A differed", "A/A runs with any flip", "95% interval"]
    head += ["A/A target", f"{FACTOR:g}x differed", f"{FACTOR:g}x: flipped within the rounds", "median round"]
    head += [f"{POWER:.0%} flipped by", f"fixed-sample bound ({POWER:.0%})", "ratio", "power target"]
    head += ["requests/min per case (baseline, speculative)"]
    cells = [head]
    for r in rows:
        low, high = r["aa_flip_interval"]
        by, bound = r["power_round"], r["fixed_sample_rounds"]
        cells.append(
            [
                f"{r['rate']:.0%}",
                str(r["runs"]),
                str(r["rounds"]),
                _sides(r["aa_diverged"]),
                f"{r['aa_flipped']} of {r['runs']} ({r['aa_flip_share']:.2%})",
                f"[{low:.2%}, {high:.2%}]",
                "met" if r["aa_target_met"] else "NOT met",
                _sides(r["power_diverged"]),
                f"{r['power']:.1%}",
                _cell(r["power_median_round"], r["rounds"]),
                _cell(by, r["rounds"]),
                "-" if bound is None else f"{bound:.0f}",
                "-" if by is None or bound is None else f"{by / bound:.2f}",
                _target(r),
                _cost(r),
            ]
        )
    _print_cells(cells)


def print_sweep(rows: Sequence[dict[str, Any]]) -> None:
    print(f"\nAsks per round (probed, load 0): power at {FACTOR:g}x the divergence, and what it costs")
    head = ["natural greedy divergence", "asks a round", "runs", f"{FACTOR:g}x: flipped within the target's rounds"]
    head += ["median round", f"{POWER:.0%} flipped by", f"fixed-sample bound ({POWER:.0%})", "ratio", "power target"]
    head += ["requests/min per case (baseline, speculative)"]
    cells = [head]
    for r in rows:
        by, bound = r["power_round"], r["fixed_sample_rounds"]
        cells.append(
            [
                f"{r['rate']:.0%}",
                str(r["per_round"]),
                str(r["power_runs"]),
                f"{r['power']:.1%}",
                _cell(r["power_median_round"], r["target_rounds"]),
                _cell(by, r["target_rounds"]),
                "-" if bound is None else f"{bound:.0f}",
                "-" if by is None or bound is None else f"{by / bound:.2f}",
                _target(r),
                _cost(r),
            ]
        )
    _print_cells(cells)


def _late_target(late: int | None, start: int | None, *, delay: int) -> str:
    """Met when the late fault's median is within LATE_RATIO of the early one's, or within the detector's
    delay (a fault from the first round that flips at once, on quality.minAgreement, has nothing to scale)."""
    if late is None or start is None:
        return "-"
    if late <= LATE_RATIO * start:
        return "met"
    return f"within the detector's delay ({delay})" if late <= delay else "NOT met"


def print_late(rows: Sequence[dict[str, Any]], *, delay: int) -> None:
    print(
        f"\nLate faults: {ONSET} clean rounds, then the fault (met: the median from the fault within {LATE_RATIO:g}x "
        "the median of the same fault from the first round)"
    )
    head = ["fault", "asks a round", "runs", "rounds after the fault", "failed, speculative / baseline", "flipped"]
    head += ["median rounds from the fault", "from the first round", "ratio", "target"]
    cells = [head]
    for r in rows:
        late, start = r["median_round"], r["from_start_median_round"]
        ratio = None if late is None or start is None else late / start
        cells.append(
            [
                r["kind"],
                str(r["per_round"]),
                str(r["runs"]),
                str(r["rounds"]),
                _sides(r["diverged"]),
                f"{r['flipped'] / r['runs']:.1%}",
                _cell(late, r["rounds"]),
                _cell(start, r["rounds"]),
                "-" if ratio is None else f"{ratio:.2f}",
                _late_target(late, start, delay=delay),
            ]
        )
    _print_cells(cells)


def _print_cells(cells: Sequence[Sequence[str]]) -> None:
    """A markdown table, columns as wide as their widest cell."""
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    lines = [[cell.rjust(width) for cell, width in zip(row, widths, strict=True)] for row in cells]
    lines.insert(1, ["-" * width for width in widths])
    for line in lines:
        print("| " + " | ".join(line) + " |")


def print_server(checks: Sequence[dict[str, Any]]) -> None:
    print("\nCalibration (probed, load 0): comparisons that differed, speculative vs baseline / baseline vs itself")
    cells = [["rate", "arms", "rounds", "mock servers", f"in-process ({LOCAL_ROUNDS} rounds)"]]
    for c in checks:
        cells.append([f"{c['rate']:.0%}", c["arms"], str(c["rounds"]), _sides(c["server"]), _sides(c["in_process"])])
    _print_cells(cells)


def calibrate(rates: Sequence[float], *, rounds: int, seed: int, prompt: str) -> list[dict[str, Any]]:
    """Each rate, A/A and at FACTOR: the servers' rounds beside LOCAL_ROUNDS in-process ones, both over
    the same CALIBRATION_SEEDS pod seeds for the row."""
    probes, case = probe(prompt)
    full = (
        s
        for s in itertools.count(1)
        if Pod(case, max_tokens=probes.max_tokens, rate=0.0, seed=s).length() == probes.max_tokens
    )
    checks = []
    for rate in rates:
        for factor in (1.0, FACTOR):
            served, local = Runs(), Runs()
            for mock_seed in itertools.islice(full, CALIBRATION_SEEDS):
                share = rounds // CALIBRATION_SEEDS
                served.add(
                    asyncio.run(server_leg(rate=rate, factor=factor, rounds=share, prompt=prompt, seed=mock_seed))
                )
                job = Job(
                    rate, factor, 1, LOCAL_ROUNDS // CALIBRATION_SEEDS, seed, 0, Batching.PROBED, prompt, mock_seed
                )
                local.add(count_job(job))
            arms = "A/A" if factor == 1.0 else f"{factor:g}x"
            checks.append(
                {"rate": rate, "arms": arms, "rounds": rounds, "server": served.sides(), "in_process": local.sides()}
            )
    return checks


def header(args: argparse.Namespace, rates: Sequence[float]) -> None:
    """The settings the tables are measured at."""
    probes, case = probe(args.prompt)
    length = Pod(case, max_tokens=probes.max_tokens, rate=0.0).length()
    alpha = probe_alpha(CONFIDENCE)
    blatant = Sequential().step([(2, 2, 0, 2)])
    print(
        f"defaults: confidence {CONFIDENCE}, maxTokens {probes.max_tokens}, perRound {PER_ROUND}, prompt "
        f"{args.prompt!r} ({length} tokens canonical); target: at most {TARGET:.0%} of A/A runs flip"
    )
    print(
        f"tests: {alpha:g} of false flips per kind, {alpha * (1 - CHANGE_SHARE):g} to the mixture SPRT and "
        f"{alpha * CHANGE_SHARE:g} to the CUSUM (boundaries every {BLOCK} rounds, over {HORIZON}); odds "
        f"{', '.join(f'{o:g}' for o in ODDS)} weighted {', '.join(f'{w:g}' for w in WEIGHTS)}; the smallest "
        f"mixture p-value of one ask: {blatant.mixture_p():.3g}"
    )
    base, spec = requests_per_minute(args.per_round)
    print(
        f"cost: a greedy ask takes the baseline 4 requests (whole and streamed, and their repeat) and the "
        f"speculative arm 2; at {args.per_round} asks a round and the default interval "
        f"({probes.interval.total_seconds() / 60:g} min), {base:.2g} and {spec:.2g} requests per minute per case"
    )
    if args.load:
        chances = ", ".join(f"{rate:g}: {divergence_chance(rate, args.load + 1):.3g}" for rate in rates)
        print(f"with {args.load} sequences running, an answer's chance of diverging by rate: {chances}")


def late_faults(pool: ProcessPoolExecutor, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Each kind's fault from the first round and after ONSET clean rounds."""
    rows = []
    for i, fault in enumerate(FAULTS):
        rounds = 200
        early = FaultJob(fault, args.late_runs, rounds, args.seed + 300 + i, 0, args.per_round)
        late = replace(early, rounds=ONSET + rounds, seed=args.seed + 400 + i, onset=ONSET)
        found_early, found_late = (_merged(pool.map(run_fault_job, _fault_chunks(job))) for job in (early, late))
        rows.append(
            late_row(fault.name, fault.faulty, found_late, found_early, rounds=rounds, per_round=args.per_round)
        )
    return rows


def _fault_chunks(job: FaultJob) -> list[FaultJob]:
    return [
        replace(job, runs=min(CHUNK, job.runs - start), seed=job.seed * 1_000_003 + i)
        for i, start in enumerate(range(0, job.runs, CHUNK))
    ]


def _merged(parts: Iterator[Runs]) -> Runs:
    total = Runs()
    for runs in parts:
        total.add(runs)
    return total


def sweep(pool: ProcessPoolExecutor, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Power at FACTOR within each target's rounds, for each number of asks a round."""
    rows, rates = [], [float(r) for r in args.sweep_rates.split(",") if r]
    for per_round in (int(k) for k in args.sweep.split(",") if k):
        for i, rate in enumerate(rates):
            rounds = POWER_TARGETS[rate]
            job = Job(rate, FACTOR, args.sweep_runs, rounds, args.seed + 500 + i, 0, Batching.PROBED, args.prompt)
            power = simulate(pool, replace(job, per_round=per_round))
            rows.append(power_row(rate, power, rounds=rounds, per_round=per_round))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default=",".join(f"{r:g}" for r in RATES), help="baseline rates, comma-separated")
    parser.add_argument("--runs", type=int, default=1000, help="runs per row, A/A and power each")
    parser.add_argument("--rounds", default=",".join(map(str, ROUNDS)), help="probe rounds per run, one per rate")
    parser.add_argument("--per-round", type=int, default=PER_ROUND, help="asks of the case per round")
    parser.add_argument("--sweep", default=",".join(map(str, SWEEP)), help="asks per round the power sweep tries")
    parser.add_argument("--sweep-runs", type=int, default=400, help="runs per sweep row")
    parser.add_argument(
        "--sweep-rates", default=",".join(f"{r:g}" for r in POWER_TARGETS), help="rates the sweep runs at"
    )
    parser.add_argument("--late-rates", default="0.1", help="rates whose late faults are run; empty skips them")
    parser.add_argument("--late-runs", type=int, default=1000, help="runs per late-fault row")
    parser.add_argument("--batching", default=",".join(Batching), help="probed, apart, or both comma-separated")
    parser.add_argument("--load", type=int, default=0, help="sequences running on each pod besides the probe's")
    parser.add_argument("--prompt", default=PROMPT, help="the greedy probe's prompt")
    parser.add_argument("--server-rounds", type=int, default=500, help="rounds per calibration row; 0 skips it")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()
    started = time.perf_counter()
    rates = [float(r) for r in args.rates.split(",")]
    windows = dict(zip(rates, (int(r) for r in args.rounds.split(",")), strict=True))
    late_rates = [float(r) for r in args.late_rates.split(",") if r]
    header(args, rates)
    out: dict[str, Any] = {"confidence": CONFIDENCE, "per_round": args.per_round, "load": args.load, "rows": []}
    out["late"] = []
    with ProcessPoolExecutor(args.workers) as pool:
        for batching in (Batching(b) for b in args.batching.split(",")):
            rows = []
            for i, rate in enumerate(rates):
                rounds = windows[rate]
                template = Job(
                    rate,
                    1.0,
                    args.runs,
                    rounds,
                    args.seed + i,
                    args.load,
                    batching,
                    args.prompt,
                    per_round=args.per_round,
                )
                aa = simulate(pool, template)
                power = simulate(pool, replace(template, factor=FACTOR, seed=args.seed + 100 + i))
                rows.append(row(rate, aa, power, rounds=rounds, batching=batching, per_round=args.per_round))
                if rate in late_rates:
                    late = replace(
                        template,
                        factor=FACTOR,
                        runs=args.late_runs,
                        rounds=ONSET + 2 * rounds,
                        seed=args.seed + 200 + i,
                        onset=ONSET,
                    )
                    name = f"greedy {FACTOR:g}x of {rate:.0%} ({batching})"
                    found = simulate(pool, late)
                    out["late"].append(late_row(name, rate, found, power, rounds=2 * rounds, per_round=args.per_round))
            print_table(rows, batching=batching, load=args.load, per_round=args.per_round)
            out["rows"] += rows
        if args.late_runs:
            out["late"] += late_faults(pool, args)
        out["sweep"] = sweep(pool, args)
    if out["late"]:
        delay = detector_delay(args.per_round)
        print_late(out["late"], delay=delay)
        print(f"(the detector's delay, a fault on every ask against none on the baseline: {delay} rounds)")
    if out["sweep"]:
        print_sweep(out["sweep"])
    if args.server_rounds:
        out["server"] = calibrate(rates, rounds=args.server_rounds, seed=args.seed, prompt=args.prompt)
        print_server(out["server"])
    print(f"\n{time.perf_counter() - started:.0f}s with {args.workers} workers")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(out, handle, indent=1)


if __name__ == "__main__":
    main()
