"""Where the engines' metrics come from: a Prometheus that already scrapes the arms."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import ConfigDict, Field, StringConstraints

from specpilot.api.common import ApiModel, Check, Duration, Rule, cel, duration_within
from specpilot.api.spec.spec_fields import URL_WITHOUT_USERINFO, Name

LABEL_NAME_PATTERN = "^[a-zA-Z_][a-zA-Z0-9_]*$"  # plain text: it also sits in a CEL string
LabelName = Annotated[str, StringConstraints(pattern=LABEL_NAME_PATTERN, max_length=128)]
LabelValue = Annotated[str, StringConstraints(min_length=1, max_length=1024)]
Labels = Annotated[
    dict[Annotated[str, StringConstraints(max_length=128)], LabelValue],
    Field(max_length=16),
    Check(
        Rule(
            cel=f"self.all(name, name.matches('{LABEL_NAME_PATTERN}') && !name.startsWith('__'))",
            message="label names must match [a-zA-Z_][a-zA-Z0-9_]* and not start with __ (reserved: the operator "
            "picks the metric name)",
        ),
        holds=lambda labels: all(re.fullmatch(LABEL_NAME_PATTERN, n) and not n.startswith("__") for n in labels),
    ),
]
ArmLabelSet = Annotated[Labels, Field(min_length=1)]

ARM_LABELS_DIFFER = Rule(
    cel="self.baseline != self.speculative",
    message="baseline and speculative must select different series",
    field_path=".speculative",
)


class PrometheusArms(ApiModel):
    """Labels that pick out each arm's engine series: every label must hold, values match exactly. They
    must be target labels (on `up` too), since a failed scrape is read from `up`."""

    model_config = ConfigDict(json_schema_extra=cel(ARM_LABELS_DIFFER))

    baseline: ArmLabelSet
    """Labels of the baseline arm's series, e.g. {namespace: team-a, specpilot_io_arm: baseline}."""
    speculative: ArmLabelSet
    """Labels of the speculative arm's series."""
    control: ArmLabelSet | None = None
    """Labels of the control arm's series; required unless control.enabled is false."""

    def of(self, arm: str) -> ArmLabelSet | None:
        """The labels of an arm by its name (baseline, speculative or control)."""
        found: ArmLabelSet | None = getattr(self, arm, None)
        return found


ONE_PROMETHEUS = Rule(
    cel="has(self.url) != has(self.endpoint)",
    message="set exactly one of url (a Prometheus the pilot names) and endpoint (one the operator holds "
    "credentials for)",
    field_path=".url",
)


class PrometheusSource(ApiModel):
    """A Prometheus server that already scrapes the arms' engine pods (every few seconds, so that a
    window holds several scrapes). The same window figures as direct scraping, as PromQL: counter
    increases over the window, quantiles from bucket increases, gauges over the window."""

    model_config = ConfigDict(json_schema_extra=cel(ONE_PROMETHEUS, URL_WITHOUT_USERINFO))

    url: Annotated[str, StringConstraints(pattern=r"^https?://[^\s/?#]+(/[^\s?#]*)?$", max_length=2048)] | None = None
    """Base URL of its HTTP API, without /api/v1, e.g. http://prometheus-operated.monitoring:9090 (a path
    prefix such as /prometheus is kept). Set this or endpoint."""
    endpoint: Name | None = None
    """A Prometheus the operator holds credentials for, by the name its installer gave it (the chart's
    prometheusEndpoints): its URL, token, password or client certificate, and headers such as a tenant's
    X-Scope-OrgID stay with the operator, and the pilot sees none of them. Set this or url."""
    timeout: Annotated[Duration, duration_within("1s", "5m")] = Duration("10s")
    """How long one query may take; a query that does not answer makes the window inconclusive."""
    labels: Labels = {}
    """Labels every query matches besides the arm's, e.g. {cluster: prod, job: vllm}."""
    namespace_label: LabelName = "namespace"
    """Label that names a series' Kubernetes namespace (`namespace` with kube-prometheus and the usual
    kubernetes_sd relabelling)."""
    pod_label: LabelName = "pod"
    """Label that names a series' pod: the default arm selection matches it, and reasons name pods by it."""
    arms: PrometheusArms | None = None
    """Labels that pick out each arm; by default the pilot's namespace (namespaceLabel) and the names of
    the arm's pods (podLabel matching `<pilot>-<arm>-<hash>-<suffix>`)."""


class MetricsSource(ApiModel):
    """Where the engines' metrics come from instead of scraping every pod directly."""

    prometheus: PrometheusSource
    """Query a Prometheus server's HTTP API."""
