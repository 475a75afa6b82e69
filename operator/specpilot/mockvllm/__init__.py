"""A CPU mock of a vLLM 0.33 OpenAI-compatible server with a speculative-decoding cost model.

It accepts `vllm serve` flags, serves the OpenAI API and vLLM's exact `/metrics` families, and
times every engine step from a cost model, so pilots can be rehearsed without GPUs — including
the regimes where speculation loses. Answers are deterministic text or, as a request asks, tool
calls and JSON documents valid against its schema, under stop conditions applied as vLLM applies
them (a new sample per request above temperature 0, unless seeded), so quality probes can run
against it; quality faults (stop overruns, broken tool JSON, invalid documents, leaked cancellations,
answers that loop) can be injected per arm. Mock-only flags: `--profile`,
`--time-scale`, `--admin-port` (fault injection) and `--model-load-seconds` (the server listens
only after it, as a real one loading its weights, so a restart costs what it would). It imports
nothing from the operator; only `specpilot.wire` (the scope header) is shared.
"""
