"""The mock's profile: cost-model parameters, device memory, per-scope acceptance, start-up faults.

Read from a YAML file (`--profile PATH`, else env `SPECPILOT_MOCK_PROFILE`), with env
`SPECPILOT_MOCK_PROFILE_JSON` (inline JSON or YAML) merged on top. Every field has a default,
so `specpilot mock-vllm my-model` needs no profile; the defaults are invented, not measured.

Calibrated profiles (`profiles/*.yaml`, step costs fitted to steps measured on a GPU, with their
provenance) are named: `--profile h200-llama-3.1-8b-draft-1b` (or the env path set to the name), or
`calibrated: NAME` in a profile, whose other sections then merge on top of the named one (say, its
`acceptance`). Their `cost` section takes the additive form and a `draft` section the draft's own
step costs (`specpilot.wire.stepcost`). Example::

    model: {max_model_len: 4096, mean_output_tokens: 256, params_billion: 8, greedy_divergence: 0.001}
    cost: {step_time_s: 0.02, per_seq_s: 0.00005, per_token_s: 0.00008,
           prefill_per_token_s: 0.00008, draft_cost_ratio: 0.1}
    memory: {gpu_memory_gib: 80, weights_gib: 16, kv_bytes_per_token: 131072,
             draft_weights_gib: 1, draft_kv_bytes_per_token: 16384, block_size: 16}
    acceptance: {default: 0.7, scopes: {code: 0.85, chat: 0.55}}
    faults: [{kind: latency, factor: 3, start_s: 60, duration_s: 30}]
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import yaml

from specpilot.mockvllm.costmodel import CostParams, MemoryParams
from specpilot.mockvllm.faults import FaultError, FaultSpec, parse_fault
from specpilot.wire.stepcost import Form, StepCost

PROFILE_ENV = "SPECPILOT_MOCK_PROFILE"
PROFILE_INLINE_ENV = "SPECPILOT_MOCK_PROFILE_JSON"
DEFAULT_SCOPE = "default"

# Fields that must be strictly positive, or probabilities; every other number must be non-negative.
_POSITIVE = {"step_time_s", "block_size", "max_model_len", "mean_output_tokens", "gpu_memory_gib"}
_SECTIONS = {"model", "cost", "draft", "memory", "acceptance", "faults", "provenance", "calibrated"}
_PROBABILITIES = {"greedy_divergence"}

_Section = TypeVar("_Section")


class _Loader(yaml.SafeLoader):
    """YAML 1.1 reads `5e-05` (what JSON writes for small numbers) as a string; read it as a float."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)[eE][-+]?\d+$"),
    list("-+0123456789."),
)


class ProfileError(ValueError):
    """A profile that cannot be used; the message names the offending field."""


@dataclasses.dataclass(frozen=True)
class ModelParams:
    """What the mock pretends the target model is.

    `greedy_divergence` is natural numerical variation: the chance that a greedy answer departs
    from the canonical text (at a uniformly drawn position) when it runs alone; it grows with the
    number of requests in the batch it joins (see `textgen.divergence_chance`). Every arm of a pilot
    gets the same profile, so the same rate; 0, the default, keeps greedy answers identical everywhere.
    """

    max_model_len: int = 4096
    mean_output_tokens: int = 256
    params_billion: float = 8.0
    greedy_divergence: float = 0.0


@dataclasses.dataclass(frozen=True)
class Profile:
    """Everything the mock's behaviour depends on beyond the `vllm serve` flags."""

    model: ModelParams = dataclasses.field(default_factory=ModelParams)
    cost: CostParams = dataclasses.field(default_factory=CostParams)
    memory: MemoryParams = dataclasses.field(default_factory=MemoryParams)
    default_alpha: float = 0.7
    scope_alpha: Mapping[str, float] = dataclasses.field(default_factory=dict)
    faults: tuple[FaultSpec, ...] = ()
    draft: StepCost | None = None  # the draft's own step costs; None: `cost.draft_cost_ratio` of the target's
    provenance: Mapping[str, str] = dataclasses.field(default_factory=dict)  # where calibrated costs come from

    def alpha(self, scope: str) -> float:
        """Draft acceptance probability for a task group."""
        return self.scope_alpha.get(scope, self.default_alpha)


def _section(cls: type[_Section], data: Any, name: str) -> _Section:
    """Build a frozen parameter dataclass from a mapping, checking keys and number types."""
    if data is None:
        return cls()
    if not isinstance(data, Mapping):
        raise ProfileError(f"profile section {name!r} must be a mapping")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = set(data) - set(fields)
    if unknown:
        raise ProfileError(f"unknown field(s) in profile section {name!r}: {', '.join(sorted(unknown))}")
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key == "form":
            if value not in set(Form):
                raise ProfileError(f"profile field {name}.form must be one of {', '.join(Form)}")
            values[key] = Form(value)
            continue
        wants_int = str(fields[key].type).startswith("int")
        if value is None and "None" in str(fields[key].type):
            values[key] = None
            continue
        ok_type = int if wants_int else (int, float)
        if isinstance(value, bool) or not isinstance(value, ok_type):
            raise ProfileError(f"profile field {name}.{key} must be {'an integer' if wants_int else 'a number'}")
        if value < 0 or (key in _POSITIVE and value == 0):
            raise ProfileError(f"profile field {name}.{key} must be {'positive' if key in _POSITIVE else '>= 0'}")
        if key in _PROBABILITIES and value > 1:
            raise ProfileError(f"profile field {name}.{key} must be a probability in [0, 1]")
        values[key] = value if wants_int else float(value)
    return cls(**values)


def _probability(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise ProfileError(f"{where} must be a probability in [0, 1], got {value!r}")
    return float(value)


def parse_profile(data: Any) -> Profile:
    """Validate a profile given as plain data (the parsed YAML)."""
    if data is None:
        return Profile()
    if not isinstance(data, Mapping):
        raise ProfileError("a profile must be a mapping")
    if data.get("calibrated") is not None:
        base = calibrated_profile(data["calibrated"])
        data = _merge(base, {key: value for key, value in data.items() if key != "calibrated"})
    unknown = set(data) - _SECTIONS
    if unknown:
        raise ProfileError(f"unknown profile section(s): {', '.join(sorted(unknown))}")
    acceptance = data.get("acceptance") or {}
    if not isinstance(acceptance, Mapping) or set(acceptance) - {"default", "scopes"}:
        raise ProfileError("profile section 'acceptance' takes only 'default' and 'scopes'")
    scopes = acceptance.get("scopes") or {}
    if not isinstance(scopes, Mapping):
        raise ProfileError("acceptance.scopes must map scope names to probabilities")
    faults = data.get("faults") or []
    if not isinstance(faults, list):
        raise ProfileError("profile section 'faults' must be a list")
    try:
        fault_specs = tuple(parse_fault(f) for f in faults)
    except FaultError as exc:
        raise ProfileError(f"profile faults: {exc}") from None
    draft = data.get("draft")
    if draft is not None and (not isinstance(draft, Mapping) or "step_time_s" not in draft):
        raise ProfileError("profile section 'draft' must be a mapping with the draft's step_time_s")
    provenance = data.get("provenance") or {}
    if not isinstance(provenance, Mapping):
        raise ProfileError("profile section 'provenance' must be a mapping")
    return Profile(
        model=_section(ModelParams, data.get("model"), "model"),
        cost=_section(CostParams, data.get("cost"), "cost"),
        memory=_section(MemoryParams, data.get("memory"), "memory"),
        default_alpha=_probability(acceptance.get("default", 0.7), "acceptance.default"),
        scope_alpha={str(k): _probability(v, f"acceptance.scopes.{k}") for k, v in scopes.items()},
        faults=fault_specs,
        draft=None if draft is None else _section(StepCost, draft, "draft"),
        provenance={str(k): str(v) for k, v in provenance.items()},
    )


def calibrated_names() -> tuple[str, ...]:
    """The calibrated profiles the package carries."""
    return tuple(sorted(p.name.removesuffix(".yaml") for p in _profiles().iterdir() if p.name.endswith(".yaml")))


@functools.cache
def calibrated_profile(name: str) -> Mapping[str, Any]:
    """A calibrated profile's data, by name."""
    if not isinstance(name, str) or name not in calibrated_names():
        raise ProfileError(f"no calibrated profile {name!r}; known: {', '.join(calibrated_names())}")
    data = yaml.load(_profiles().joinpath(f"{name}.yaml").read_text(), Loader=_Loader)
    if not isinstance(data, Mapping) or "calibrated" in data:
        raise ProfileError(f"calibrated profile {name!r} is not a plain profile")
    return data


def _profiles() -> Any:
    return resources.files("specpilot.mockvllm").joinpath("profiles")


def _merge(base: Any, override: Any) -> Any:
    """Deep-merge mappings; anything else in `override` replaces what `base` had."""
    if isinstance(base, Mapping) and isinstance(override, Mapping):
        merged = dict(base)
        for key, value in override.items():
            merged[key] = _merge(base.get(key), value)
        return merged
    return override


def load_profile(path: str | None, env: Mapping[str, str]) -> Profile:
    """Load the profile from `path` (or the env path) and the inline env override."""
    data: Any = None
    source = path or env.get(PROFILE_ENV)
    try:
        if source in calibrated_names():
            data = {"calibrated": source}
        elif source:
            data = yaml.load(Path(source).read_text(), Loader=_Loader)
        inline = env.get(PROFILE_INLINE_ENV)
        if inline:
            data = _merge(data, yaml.load(inline, Loader=_Loader))
    except OSError as exc:
        raise ProfileError(f"cannot read profile {source}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ProfileError(f"profile is not valid YAML/JSON: {exc}") from None
    return parse_profile(data)
