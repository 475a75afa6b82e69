"""The calibrated step-cost profiles the package carries, by name, for every program that reads them.

The mock engine times its steps with a profile; the operator forecasts a scope's crossover from the
same profile's `cost` (the target's steps) and `draft` (the draft's) sections. The files lie beside the
mock (`specpilot/mockvllm/profiles/NAME.yaml`) and are read as package data, so no program imports
another to find them.
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import Literal, get_args

CalibratedProfile = Literal["h200-llama-3.1-8b-draft-1b", "h200-llama-3.1-8b-eagle", "h200-qwen2.5-32b"]
CALIBRATED: tuple[str, ...] = get_args(CalibratedProfile)


@functools.cache
def calibrated_text(name: str) -> str:
    """A calibrated profile's YAML, by one of the CALIBRATED names."""
    if name not in CALIBRATED:
        raise KeyError(f"no calibrated profile {name!r}; known: {', '.join(CALIBRATED)}")
    return resources.files("specpilot").joinpath("mockvllm", "profiles", f"{name}.yaml").read_text()
