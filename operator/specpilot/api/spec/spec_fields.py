"""Constrained field types of the spec, and the rules, that several of its parts share."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field, StringConstraints

from specpilot.api.common import DNS_LABEL_PATTERN, DNS_SUBDOMAIN_PATTERN, Check, Duration, Rule, duration_within

# Flags the operator renders from the spec; setting them in extraArgs would break the frozen engine,
# the speculation config or the metrics the analysis reads.
OWNED_FLAGS = (
    "--model",
    "--host",
    "--port",
    "--served-model-name",
    "--revision",
    "--tokenizer",
    "--max-model-len",
    "--tensor-parallel-size",
    "-tp",
    "--pipeline-parallel-size",
    "-pp",
    "--data-parallel-size",
    "-dp",
    "--gpu-memory-utilization",
    "--device-memory-utilization",
    "--speculative-config",
    "-sc",
    "--spec-method",
    "--spec-model",
    "--spec-tokens",
    "--disable-log-stats",
)
OWNED_FLAG_PATTERN = "^(" + "|".join(OWNED_FLAGS) + ")(=.*)?$"  # plain text: it also sits in a CEL string

ExtraArgs = Annotated[
    list[Annotated[str, StringConstraints(min_length=1, max_length=1024)]],
    Field(max_length=64),
    Check(
        Rule(
            cel=f"self.all(arg, !arg.matches('{OWNED_FLAG_PATTERN}'))",
            message="must not set flags the operator renders from the spec: " + ", ".join(OWNED_FLAGS),
        ),
        holds=lambda args: not any(re.fullmatch(OWNED_FLAG_PATTERN, arg) for arg in args),
    ),
]
Replicas = Annotated[int, Field(strict=True, ge=1, le=64)]
TensorParallelSize = Annotated[int, Field(strict=True, ge=1, le=16)]
Fraction = Annotated[float, Field(strict=True, ge=0, le=1)]
Ratio = Annotated[float, Field(strict=True, ge=0.1, le=10)]
Quantile = Annotated[float, Field(strict=True, ge=0.5, lt=1)]
Name = Annotated[str, StringConstraints(pattern=DNS_LABEL_PATTERN, min_length=1, max_length=63)]
DeploymentName = Annotated[str, StringConstraints(pattern=DNS_SUBDOMAIN_PATTERN, max_length=253)]
HeaderName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$", min_length=1, max_length=128)]
ModelRef = Annotated[str, StringConstraints(min_length=1, max_length=256)]
Revision = Annotated[str, StringConstraints(min_length=1, max_length=128)]
WebhookUrl = Annotated[str, StringConstraints(pattern=r"^https?://[^\s/?#]+([/?#]\S*)?$", max_length=2048)]
WebhookTimeout = Annotated[Duration, duration_within("1s", "5m")]
WebhookMetadata = Annotated[dict[str, Annotated[str, StringConstraints(max_length=1024)]], Field(max_length=16)]
URL_WITHOUT_USERINFO = Rule(
    cel="!has(self.url) || !self.url.matches('^https?://[^/?#]*@')",
    message="a URL carries no credentials (user:password@host), which would show wherever it is printed: a "
    "webhook takes them from a Secret (secretHeader), a Prometheus from an endpoint the operator holds (endpoint)",
    reason="FieldValueForbidden",
    field_path=".url",
)
