"""What the operator's installer lets a pilot do beyond its namespace: the hosts the operator calls
for it (webhooks, sampled probes' score webhooks, a Prometheus) and the engine images it runs. A
pilot outside the policy is an invalid spec naming the field: nothing is deployed for it and nothing
is called.

Anyone who may create a pilot makes the operator's pod send HTTP requests to the URLs in its spec,
and run an image of their choosing in their namespace; the policy bounds both. A pilot may call its
own namespace's Services, in any spelling (`api.hosts`); every other host only where a pattern allows
it. Patterns are shell globs (`fnmatch`): hosts as `host` or `host:port`, a Service matched in each of
its qualified spellings (so `prometheus-operated.monitoring:9090` and `*.monitoring` allow it however a
pilot writes it), images as the whole reference. The API server and link-local addresses are never
allowed, whatever the patterns say; nor are engine pods that would run as the operator's own
ServiceAccount (in the default namespaced install the operator serves pilots in its own namespace).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from specpilot.api.common import endpoint
from specpilot.api.hosts import API_SERVER, CLUSTER_DOMAIN, Service, never_called, service_of
from specpilot.api.spec import SpeculationPilotSpec
from specpilot.api.validate import Problem, listed_cases

SETTINGS = "the operator's --allow-outbound, the chart's policy.outboundHosts"


@dataclass(frozen=True)
class Policy:
    """Hosts a pilot may call besides its own namespace's Services, and engine images (empty: any image)."""

    outbound: tuple[str, ...] = ()
    images: tuple[str, ...] = ()
    endpoints: tuple[str, ...] = ()  # the Prometheus endpoints the operator holds credentials for, by name
    accounts: tuple[tuple[str, str], ...] = ()  # (namespace, name): the operator's own ServiceAccount
    cluster_domain: str = CLUSTER_DOMAIN  # the cluster's DNS domain, for the long spelling of a Service

    def problems(self, spec: SpeculationPilotSpec, namespace: str) -> list[Problem]:
        """What the spec of a pilot in `namespace` asks beyond the policy, by field."""
        return [
            *self._outbound(spec, namespace),
            *self._endpoint(spec),
            *self._image(spec),
            *self._account(spec, namespace),
        ]

    def _account(self, spec: SpeculationPilotSpec, namespace: str) -> Iterator[Problem]:
        """The engine pods never run as the operator's ServiceAccount: they run the pilot's image, and would
        hold every right the operator has."""
        template = spec.engine.pod_template if spec.engine is not None else None
        name = template.service_account_name if template is not None else None
        if name is not None and (namespace, name) in self.accounts:
            yield Problem(
                "spec.engine.podTemplate.serviceAccountName",
                f"{name} is the operator's own ServiceAccount, whose rights the engine pods never get: name a "
                "ServiceAccount made for the engine, or leave the field unset",
            )

    def _endpoint(self, spec: SpeculationPilotSpec) -> Iterator[Problem]:
        """A named Prometheus endpoint is the installer's own, so its URL needs no outbound pattern; but it
        must be one the operator holds."""
        source = spec.analysis.metrics_source
        name = source.prometheus.endpoint if source is not None else None
        if name is not None and name not in self.endpoints:
            known = ", ".join(self.endpoints) or "none"
            yield Problem(
                "spec.analysis.metricsSource.prometheus.endpoint",
                f"the operator holds no Prometheus endpoint named {name!r} (it holds: {known}; the operator's "
                "--prometheus-endpoints, the chart's prometheusEndpoints)",
            )

    def admit(self, spec: SpeculationPilotSpec, namespace: str) -> SpeculationPilotSpec | list[Problem]:
        """The spec as the operator calls it (`as_called`), or what it asks beyond the policy."""
        return self.problems(spec, namespace) or as_called(spec, namespace, self.cluster_domain)

    def _outbound(self, spec: SpeculationPilotSpec, namespace: str) -> Iterator[Problem]:
        for field, url in outbound_urls(spec):
            refused = self.refusal(url, namespace)
            if refused is not None:
                host = urlsplit(url).netloc.rpartition("@")[2]  # never a credential, though validation refuses them
                yield Problem(field, f"the operator may not call {host}: {refused}")

    def refusal(self, url: str, namespace: str) -> str | None:
        """Why a pilot in `namespace` may not have the operator call `url`; None when it may."""
        found = endpoint(url)
        if found is None:
            return "the URL names no port the operator can call"
        _, host, port = found
        service = service_of(host, namespace, self.cluster_domain)
        if service == API_SERVER:
            return "it never calls the Kubernetes API server for a pilot"
        if service is None and never_called(host):
            return "it never calls link-local or cloud metadata addresses"
        if service is not None and service.namespace == namespace:
            return None
        names = service.spellings if service is not None else (host,)
        if any(fnmatchcase(n, p) or fnmatchcase(f"{n}:{port}", p) for n in names for p in self.outbound):
            return None
        allowed = ", ".join(self.outbound) or "none"
        return (
            f"it calls the pilot's own namespace's Services ({namespace}) and the hosts its installer allows "
            f"({allowed}; {SETTINGS}: a Service as name.namespace, a namespace's Services as *.namespace)"
        )

    def own_service(self, url: str, namespace: str) -> Service | None:
        """The Service of the pilot's own namespace that `url` names, which the operator calls without a
        pattern: if it is of type ExternalName, its target is judged as well (`followed`)."""
        found = endpoint(url)
        service = service_of(found[1], namespace, self.cluster_domain) if found is not None else None
        return service if service is not None and service.namespace == namespace else None

    def followed(self, url: str, service: Service, target: str, namespace: str) -> tuple[str, str | None]:
        """`url` with its host replaced by the ExternalName `target` of `service` (a Service of the pilot's
        namespace), and why the operator may not call that target (None: it may)."""
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port is not None else ""
        followed = urlunsplit(parts._replace(netloc=f"{target.lower().removesuffix('.')}{port}"))
        refused = self.refusal(followed, namespace)
        if refused is None:
            return followed, None
        return followed, (
            f"{service.name} is a Service of type ExternalName for {target}, and the operator may not call "
            f"{target}: {refused}"
        )

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


def outbound_urls(spec: SpeculationPilotSpec) -> list[tuple[str, str]]:
    """Every URL the operator calls for a pilot, named by its field: webhooks, sampled cases' score
    webhooks, the Prometheus source."""
    urls = [(f"spec.quality.webhooks[{i}].url", hook.url) for i, hook in enumerate(spec.quality.webhooks)]
    urls += [
        (f"{field}.score.webhook.url", case.score.webhook.url)
        for field, case in listed_cases(spec)
        if case.score is not None and case.score.webhook is not None
    ]
    source = spec.analysis.metrics_source
    if source is not None and source.prometheus.url is not None:
        urls.append(("spec.analysis.metricsSource.prometheus.url", source.prometheus.url))
    return urls


def called_url(url: str, namespace: str, domain: str = CLUSTER_DOMAIN) -> str:
    """`url` as the operator calls it for a pilot in `namespace`: a Service written short (`name`,
    `name.ns`) as `name.ns.svc`; anything else as written."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    service = service_of(host, namespace, domain)
    if service is None or host.removesuffix(".") in (service.called, f"{service.called}.{domain}"):
        return url
    port = f":{parts.port}" if parts.port is not None else ""
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = f"{userinfo}@{service.called}{port}" if userinfo else f"{service.called}{port}"
    return urlunsplit(parts._replace(netloc=netloc))


def as_called(spec: SpeculationPilotSpec, namespace: str, domain: str = CLUSTER_DOMAIN) -> SpeculationPilotSpec:
    """The spec with every URL the operator calls (`outbound_urls`) as it calls it (`called_url`)."""
    doc = spec.to_wire()
    changed = False
    for field, url in outbound_urls(spec):
        called = called_url(url, namespace, domain)
        if called != url:
            _set(doc, field.removeprefix("spec."), called)
            changed = True
    return SpeculationPilotSpec.from_wire(doc) if changed else spec


def _set(doc: dict[str, Any], field: str, value: str) -> None:
    """Set the value at a field path as `outbound_urls` names it (`a.b[1].c`)."""
    *parents, last = field.split(".")
    node: Any = doc
    for part in parents:
        name, _, index = part.partition("[")
        node = node[name] if not index else node[name][int(index.rstrip("]"))]
    node[last] = value


# The policy of an operator started without one: the pilot's own namespace's Services only, any image.
DEFAULT = Policy()
