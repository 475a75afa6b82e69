"""What the operator measures: engine /metrics and the router's per-request samples, made into windows.

Pure math (`exposition`, `counters`, `quantile`, `engine`, `samples`, `ledger`, `window`) turns
scrapes and sample pages into `specpilot.analysis.window` shapes; `scrape` is the one module that
does I/O. Missing or garbage data comes out as an inconclusive reason, never as a pass or a raise.
"""
