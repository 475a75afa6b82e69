"""The shapes that cross processes: one home that the operator, the router and the analysis all import.

Pure code: no Kubernetes client, no HTTP, no sockets. Each module is a contract between programs
that run apart (the operator writes what the router reads, the router serves what the operator
reads), so both sides parse and render through the same code:

- `names`: names and labels of a pilot's objects, the scope header, the ports.
- `routes`: the routing table the operator writes into ``<pilot>-routes`` and the router follows.
- `samples`: the per-request samples the router serves on ``/samples``, and their outcomes.
- `routerconfig`: the router's configuration, rendered as the container args the router parses.
- `buckets`: vLLM's histogram buckets, which the mock serves and the router's histograms share, and
  the fine buckets the router counts chunk gaps in and the operator times to first token.
- `stepcost`: a model's step costs, which the mock times its steps with and the operator forecasts from;
  `stepfit` fits them to the steps a calibration measured (scipy, for the tools that fit).
"""
