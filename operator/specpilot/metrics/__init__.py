"""What the operator measures: engine /metrics and the router's per-request samples, made into windows.

Pure math (`exposition`, `counters`, `quantile`, `engine_window`, `arm_requests`, `ledger`, `window`) turns
scrapes, sample pages and query answers into `specpilot.analysis.window` shapes; the reads themselves
are `specpilot.fetch`'s. Missing or garbage data comes out as an inconclusive reason, never as a pass
or a raise.
"""
