"""The mock profile the decision tests run: a compute-heavy target whose scopes' drafts are accepted at
0.95, 0.5 and 0.1, so that one scope wins at every load measured, one crosses over near 1 request per
second per replica (with 3 draft tokens) and one loses everywhere; and the lengths of their requests.

Its costs are invented, an exaggerated case: on the costs measured on an H200 speculation stops paying
only at batches of dozens of sequences (a 1B draft) or not below 256 (an EAGLE-style head), loads that
two shared cores cannot drive through served mocks, where this target crosses over within them."""

from __future__ import annotations

PROFILE = {
    "cost": {
        "step_time_s": 0.04,
        "per_seq_s": 0.00005,
        "per_token_s": 0.005,
        "prefill_per_token_s": 0.00002,
        "draft_cost_ratio": 0.1,
    },
    "acceptance": {"default": 0.7, "scopes": {"fast": 0.95, "mid": 0.5, "slow": 0.1}},
}
DRAFT_TOKENS = 3
LENGTHS = {
    "input_tokens": {"dist": "uniform", "min": 80, "max": 120},
    "output_tokens": {"dist": "uniform", "min": 40, "max": 60},
}
