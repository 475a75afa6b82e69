"""A scope's evidence built to order for the forecast tests: windows of known per-position acceptance,
and the prompt and output lengths the forecast reads."""

from __future__ import annotations

from specpilot.analysis.evidence import Lengths, Moments, ScopeEvidence

RATES = (0.7, 0.49, 0.343, 0.24)  # the per-position acceptance every window holds


def moments(values: list[float]) -> Moments:
    out = Moments()
    for value in values:
        out = out.add(value)
    return out


def scope(windows: int, *, committed: list[float] | None = None, prompt: int = 200, output: int = 300) -> ScopeEvidence:
    """`windows` windows at `RATES`, committing `committed` (else the rates' sum plus one) each."""
    lengths = Lengths()
    return ScopeEvidence(
        per_position=[moments([rate] * windows) for rate in RATES],
        acceptance_length=moments(committed if committed is not None else [1 + sum(RATES)] * windows),
        prompt_tokens=lengths.add([prompt] * 10),
        output_tokens=lengths.add([output] * 10),
    )
