"""How windows are closed and judged: the thresholds a window fails at, and the crossover forecast."""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field

from specpilot.api.common import ApiModel, Duration, Rule, cel, duration_within
from specpilot.api.spec.prometheus_spec import MetricsSource
from specpilot.api.spec.spec_fields import DeploymentName, Fraction, Quantile, Ratio
from specpilot.wire.profiles import CalibratedProfile


class QuantileRatio(ApiModel):
    """A latency quantile of the speculative arm relative to the baseline's."""

    quantile: Quantile
    """Quantile compared, in [0.5, 1)."""
    max_ratio: Ratio
    """Highest acceptable speculative / baseline ratio of that quantile."""


class KvCacheUsage(ApiModel):
    """A hard limit on the speculative arm's KV-cache usage (vllm:kv_cache_usage_perc)."""

    max: Annotated[float, Field(strict=True, gt=0, le=1)] = 0.95
    """Usage fraction (0 to 1) the speculative arm must not stay above for sustainedFor."""
    sustained_for: Annotated[Duration, duration_within("5s", "1h")] = Duration("2m")
    """How long usage above max is tolerated; at most analysis.window."""


ITL_QUANTILE = 0.99  # the inter-token-latency quantile measured when interTokenLatency is not judged
MIN_SAMPLES = 50  # requests each arm needs in a window, unless analysis.minSamples says otherwise


class Thresholds(ApiModel):
    """When a window fails. Ratios compare the speculative arm with the baseline on the same scope."""

    max_time_per_committed_token_ratio: Ratio = 1.0
    """Highest speculative / baseline ratio of decode time per committed token: the measure that decides
    whether speculation pays. 1.0 fails any window where speculation is slower."""
    ttft: QuantileRatio = QuantileRatio(quantile=0.99, max_ratio=1.2)
    """Time to first token."""
    inter_token_latency: QuantileRatio | None = None
    """Opt-in, for teams that care about stream cadence: the gap between streamed chunks (vLLM's
    inter-token latency). A speculative step streams several tokens per chunk, so its gaps are longer
    by nature although each token comes sooner; speed per token is what
    maxTimePerCommittedTokenRatio judges. Unset, the gap is measured but not judged."""
    end_to_end: QuantileRatio = QuantileRatio(quantile=0.95, max_ratio=1.05)
    """End-to-end request latency."""
    kv_cache_usage: KvCacheUsage = KvCacheUsage()
    """Sustained KV-cache usage of the speculative arm; fires directly."""
    max_error_rate: Fraction = 0.01
    """Highest share of the speculative arm's requests that fail (5xx other than 503, errors); fires
    directly."""
    max_timeout_rate: Fraction = 0.01
    """Highest share that exceeds the scope's deadline; fires directly."""
    max_rejection_rate: Fraction = 0.01
    """Highest share rejected by the engine (429, 503); fires directly."""
    min_acceptance_length: Annotated[float, Field(strict=True, ge=1, le=17)] | None = None
    """Lowest mean committed tokens per speculative round (1 + accepted / drafts); at most
    1 + numSpeculativeTokens. Unset, acceptance is reported but not judged."""

    @property
    def itl_quantile(self) -> float:
        """The inter-token-latency quantile the engines' figures are read at."""
        return self.inter_token_latency.quantile if self.inter_token_latency is not None else ITL_QUANTILE


WINDOW_COVERS_INTERVAL = Rule(
    cel="duration(self.window) >= duration(self.interval)",
    message="window must be at least interval",
    field_path=".window",
)
WINDOW_COVERS_KV_CACHE = Rule(
    cel="duration(self.thresholds.kvCacheUsage.sustainedFor) <= duration(self.window)",
    message="thresholds.kvCacheUsage.sustainedFor must not exceed window",
    field_path=".thresholds.kvCacheUsage.sustainedFor",
)


ONE_FORECAST_PROFILE = Rule(
    cel="has(self.profile) != has(self.configMap)",
    message="set exactly one of profile (a calibrated profile the operator carries) and configMap (one "
    "`kubectl specpilot calibrate NAME` wrote in the pilot's namespace)",
    field_path=".profile",
)


class Forecast(ApiModel):
    """The step costs the operator forecasts each scope's crossover from, once its windows measured its
    acceptance per draft position and its lengths: where speculation should stop paying, before the pilot
    runs there. Measured bands outside the forecast's interval say the profile does not describe the pods."""

    model_config = ConfigDict(json_schema_extra=cel(ONE_FORECAST_PROFILE))

    profile: CalibratedProfile | None = None
    """A calibrated profile by name: h200-llama-3.1-8b-draft-1b, h200-llama-3.1-8b-eagle or h200-qwen2.5-32b
    (step costs measured on an NVIDIA H200). Set this or configMap."""
    config_map: DeploymentName | None = None
    """A ConfigMap in the pilot's namespace whose stepcost.json `kubectl specpilot calibrate NAME` wrote
    (the larger model measured is the target, the smaller the draft); the operator fits its step costs.
    Set this or profile."""


class Analysis(ApiModel):
    """How windows are closed and judged, per scope, speculative arm against baseline."""

    model_config = ConfigDict(json_schema_extra=cel(WINDOW_COVERS_INTERVAL, WINDOW_COVERS_KV_CACHE))

    interval: Annotated[Duration, duration_within("5s", "1h")] = Duration("1m")
    """How often each scope's window is closed and judged."""
    window: Annotated[Duration, duration_within("5s", "24h")] = Duration("5m")
    """How far back a window reaches; at least interval."""
    warmup: Annotated[Duration, duration_within("0s", "1h")] = Duration("1m")
    """How long both arms must have been ready before a window is judged, so that cold starts (weights
    loading, graph capture, empty caches) are kept apart from steady operation."""
    min_samples: Annotated[int, Field(strict=True, ge=1, le=1_000_000)] = MIN_SAMPLES
    """Requests each arm needs in a window; fewer make the window inconclusive, never a pass."""
    failure_limit: Annotated[int, Field(strict=True, ge=1, le=100)] = 3
    """Consecutive failing windows that flip a scope back to ordinary decoding."""
    confidence: Annotated[float, Field(strict=True, ge=0.5, lt=1)] = 0.95
    """Confidence level of the statistical comparisons of latency-type metrics."""
    thresholds: Thresholds = Thresholds()
    """Limits that make a window fail."""
    metrics_source: MetricsSource | None = None
    """Where the engines' metrics come from. Unset, the operator scrapes every ready engine pod's /metrics
    itself; the routers' per-request samples are read from the routers either way."""
    forecast: Forecast | None = None
    """The step-cost profile each scope's crossover is forecast from; unset, no forecast."""
