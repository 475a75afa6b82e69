"""The operator's HTTP reads of what it measures: engine `/metrics`, the routers' `/samples`, and a
Prometheus' query API. Nothing but cancellation leaves these as an exception: a failure comes back
as a value with its reason, which `specpilot.metrics` makes into an inconclusive window.
"""
