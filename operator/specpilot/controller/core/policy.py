"""What the operator's installer lets a pilot do beyond its namespace: the hosts the operator calls
for it (webhooks, sampled probes' score webhooks, a Prometheus) and the engine images it runs. A
pilot outside the policy is an invalid spec naming the field: nothing is deployed for it and nothing
is called.

Anyone who may create a pilot makes the operator's pod send HTTP requests to the URLs in its spec,
and run an image of their choosing in their namespace; the policy bounds both. Patterns are shell
globs (`fnmatch`): hosts as `host` or `host:port`, images as the whole reference.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from fnmatch import fnmatchcase
from urllib.parse import urlsplit

from specpilot.api.common import endpoint
from specpilot.api.spec import SpeculationPilotSpec
from specpilot.api.validate import Problem, listed_cases

# In-cluster Services, which every policy allows: `<service>.<namespace>.svc[.cluster.local]`.
IN_CLUSTER = ("*.svc", "*.svc.cluster.local")


@dataclass(frozen=True)
class Policy:
    """Allowed outbound hosts (besides in-cluster Services) and engine images (empty: any image)."""

    outbound: tuple[str, ...] = ()
    images: tuple[str, ...] = ()

    def problems(self, spec: SpeculationPilotSpec) -> list[Problem]:
        return [*self._outbound(spec), *self._image(spec)]

    def _outbound(self, spec: SpeculationPilotSpec) -> Iterator[Problem]:
        urls = [(f"spec.quality.webhooks[{i}].url", hook.url) for i, hook in enumerate(spec.quality.webhooks)]
        urls += _score_urls(spec)
        if spec.analysis.metrics_source is not None:
            urls.append(("spec.analysis.metricsSource.prometheus.url", spec.analysis.metrics_source.prometheus.url))
        for field, url in urls:
            if not self.allows_url(url):
                allowed = ", ".join((*self.outbound, *IN_CLUSTER))
                yield Problem(
                    field,
                    f"the operator may not call {urlsplit(url).netloc}: it calls in-cluster Services and the hosts "
                    f"its installer allows ({allowed}; the operator's --allow-outbound, the chart's "
                    "policy.outboundHosts)",
                )

    def allows_url(self, url: str) -> bool:
        found = endpoint(url)
        if found is None:
            return False
        _, host, port = found
        return any(fnmatchcase(host, p) or fnmatchcase(f"{host}:{port}", p) for p in (*IN_CLUSTER, *self.outbound))

    def _image(self, spec: SpeculationPilotSpec) -> Iterator[Problem]:
        if spec.engine is not None:
            yield from self.image_problems(spec.engine.image, "spec.engine.image")

    def image_problems(self, image: str, field: str) -> Iterator[Problem]:
        """An engine image outside the allowed patterns, named by `field` (a workload's is read each tick)."""
        if self.images and not any(fnmatchcase(image, pattern) for pattern in self.images):
            yield Problem(
                field,
                f"image {image!r} is not one the operator runs: allowed are {', '.join(self.images)} (the operator's "
                "--allow-image, the chart's policy.engineImages)",
            )


def _score_urls(spec: SpeculationPilotSpec) -> list[tuple[str, str]]:
    """Every sampled case's score webhook, named by its field."""
    return [
        (f"{field}.score.webhook.url", case.score.webhook.url)
        for field, case in listed_cases(spec)
        if case.score is not None and case.score.webhook is not None
    ]


# The policy of an operator started without one: in-cluster Services only, any image.
DEFAULT = Policy()
