"""A decision per scope and one for the pilot, from the evidence store, with sentences of reasons.

The speculative arm is compared with the control arm (the baseline's engine at its size and share),
or, for a pilot without one, with production's baseline; only at the same offered load, never
beyond the loads the compared arm ran at (`bands.compare`). A scope is decided by the first of an
ordered list of small rules (`RULES`) over its facts (`Facts`), each alone; the order, and why, is
stated once, above `RULES` (docs/reference/decision-rules.md is generated from it). An adoption in
low-load windows states what bounds it (`Bound`: speed, the TTFT limit, end-to-end time, a latency or
error limit, or a load not measured) with its figure; a flip for a latency or error limit above the wins
brackets where that limit fails (`limitFailure`), and only a flip for speed brackets the crossover.

A band is a win only when speculation is faster by `bands.MIN_GAIN` or more, beyond the spread of
both arms' windows at analysis.confidence: two identical arms are never adopted on noise. A thin band
above the full ones (fewer than `bands.MIN_INDEPENDENT` windows' worth of requests) is reported and
decided on nowhere: no adoption reaches its loads, no crossover is read against it (its few windows
understate its spread), and it dilutes no win below it. A thin band faster as a win is, with no full win
beside it, is evidence with a remedy (InsufficientEvidence: a longer stage, or the rehearsal up to a flip).

Every adoption states the share of production's windows whose load lies within it.

Where the pilot runs an alternative arm (the speculative arm's GPU budget spent without speculation,
at the same share), each scope's decision also says whether those GPUs do better without speculation:
the alternative against the speculative arm in the same load bins, tested both ways as a band's win
is (`judge_alternative`). It is stated beside the outcome and does not change it.

The pilot adopts in low-load windows if any scope does (at the lowest limit: the engine's
speculation cannot differ per scope), adopts within the envelope of its adopting scopes if those
all win at every load, and defers otherwise, for the reason most of its scopes share.

Pure: takes the evidence and the fallback records, returns the status models.

One module per part: `scope_facts`, what a rule reads (`Facts`) and how it is gathered; `rules`, the
rules and their order (`RULES`), with `schedule_rule` for a scheduled arm; `outcomes`, a scope's
decision as a rule states it; `phrases`, the phrases its sentences share; `gains`, the figures read
over matched bands; `alternative`, the alternative arm's verdict; `pilot_decision`, the scope's and the
pilot's decisions; `revision`, what moved since a decision was stated; `cost`, the report's cost view.
"""

from __future__ import annotations

from specpilot.analysis.decision.cost import CostView, cost_view
from specpilot.analysis.decision.gains import DecodeShare, decode_share, implied_gain
from specpilot.analysis.decision.phrases import COMPARED_NAMES
from specpilot.analysis.decision.pilot_decision import ScopeFindings, decide_pilot, decide_scope, decision_due
from specpilot.analysis.decision.revision import revisions
from specpilot.analysis.decision.rules import MIN_END_TO_END_GAIN, RULES, Rule, too_little_evidence
from specpilot.analysis.decision.scope_facts import Facts, crossover_point, envelope_peak, facts

__all__ = [
    "COMPARED_NAMES",
    "MIN_END_TO_END_GAIN",
    "RULES",
    "CostView",
    "DecodeShare",
    "Facts",
    "Rule",
    "ScopeFindings",
    "cost_view",
    "crossover_point",
    "decide_pilot",
    "decide_scope",
    "decision_due",
    "decode_share",
    "envelope_peak",
    "facts",
    "implied_gain",
    "revisions",
    "too_little_evidence",
]
