"""The pilot's evidence: bounded rolling aggregates of every judged window, by scope, arm and load.

Each window that carried traffic adds its figures to the scope's aggregates: per arm, into the bin
of its offered load (requests per second per replica, over every scope the arm served), and into
running totals (timing breakdown, on-time completions, request lengths, acceptance). The compared
pair (the speculative arm and the control arm, its size, sent a copy of each of its requests) is
binned at one load, the pair's mean, so that each window adds to both arms at the same load; the
alternative arm (the same share on the same GPUs, without speculation) is binned there too. Without
a control arm each arm is binned at its own. A window within which the scope's weight changed is
kept out of the bins, since its requests ran at two loads. Bins are fixed and fine (a quarter of an
octave of load each), so the store stays bounded however long the pilot runs; the load bands a
decision reads are learned from them (`decision.bands`). Production's baseline is watched: the
windows' loads it ran at are kept as a histogram over the same bins. The store lives in a ConfigMap
beside the pilot, never in status.

The probe rounds' counts by scope, kind and arm are kept here too, with the state of each kind's
sequential tests, so that the report's quality by scope and the probe checks survive an operator restart
(`record_probes`).

Pure: the shell passes the window, its load and its verdict, and writes back what this returns.

One module per part: `store`, the models and their load bins; `recording`, what each window, probe
round and change of the arms adds; `production`, production's watch; `configmap`, the store's JSON.
"""

from __future__ import annotations

from specpilot.analysis.evidence.configmap import MAX_TTFT_WIDTH, STORE_BUDGET, dump, fit, load
from specpilot.analysis.evidence.production import production_quantile, rehearsal_peak, watch_production
from specpilot.analysis.evidence.recording import (
    ArmLoad,
    WindowLoad,
    matched_load,
    mix_changed,
    record_probes,
    record_window,
    with_arms,
)
from specpilot.analysis.evidence.store import (
    BINS_PER_OCTAVE,
    ArmTotals,
    BinArm,
    Evidence,
    Lengths,
    Moments,
    ProbeArm,
    ProbeCounts,
    ProbeRecord,
    ScopeEvidence,
    add_counts,
    bin_bounds,
    load_bin,
    ttft_bucket_bounds,
)

__all__ = [
    "BINS_PER_OCTAVE",
    "MAX_TTFT_WIDTH",
    "STORE_BUDGET",
    "ArmLoad",
    "ArmTotals",
    "BinArm",
    "Evidence",
    "Lengths",
    "Moments",
    "ProbeArm",
    "ProbeCounts",
    "ProbeRecord",
    "ScopeEvidence",
    "WindowLoad",
    "add_counts",
    "bin_bounds",
    "dump",
    "fit",
    "load",
    "load_bin",
    "matched_load",
    "mix_changed",
    "production_quantile",
    "record_probes",
    "record_window",
    "rehearsal_peak",
    "ttft_bucket_bounds",
    "watch_production",
    "with_arms",
]
