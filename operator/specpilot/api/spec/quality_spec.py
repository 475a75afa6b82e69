"""Quality gates, separate from speed: the probes and the business regression webhooks."""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field

from specpilot.api.common import ApiModel, Duration, cel
from specpilot.api.spec.probes_spec import Probes
from specpilot.api.spec.secretref import SecretHeader
from specpilot.api.spec.spec_fields import (
    URL_WITHOUT_USERINFO,
    Fraction,
    Name,
    WebhookMetadata,
    WebhookTimeout,
    WebhookUrl,
)


class Webhook(ApiModel):
    """A business regression check called once per window and scope; a non-2xx answer fails it."""

    model_config = ConfigDict(json_schema_extra=cel(URL_WITHOUT_USERINFO))

    name: Name
    """Webhook name, unique within the pilot."""
    url: WebhookUrl
    """http or https URL that receives the scope, window and both compared arms as JSON."""
    secret_header: SecretHeader | None = None
    """A header whose value comes from a Secret, e.g. the webhook's token: URLs carry no credentials."""
    critical: Annotated[bool, Field(strict=True)] = False
    """A failing critical webhook flips the scope back at once; others count as a failed check."""
    timeout: WebhookTimeout = Duration("10s")
    """How long to wait for an answer; no answer fails the check."""
    metadata: WebhookMetadata = {}
    """Extra key/value pairs passed along."""


class Quality(ApiModel):
    """Quality gates, separate from speed: verification is probability computation, not fact checking."""

    probes: Probes | None = None
    """Agreement probes; none run unless set."""
    min_agreement: Fraction = 0.95
    """Lowest share of the speculative arm's stop, toolCall, structured and cancel probe answers that must
    pass where the baseline's pass (accumulated over rounds). Greedy text and sampled scores are judged
    against the baseline's own variation at analysis.confidence instead."""
    webhooks: Annotated[
        list[Webhook],
        Field(
            max_length=8,
            json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
        ),
    ] = []
    """Business regression webhooks."""
