"""`specpilot operator`: run the operator (Kopf) over one namespace, several, or the whole cluster."""

from __future__ import annotations

import argparse
import asyncio
import base64
import ipaddress
import json
import logging
import os
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import kopf
from prometheus_client import start_http_server

from specpilot import __version__
from specpilot.api.common import DNS_SUBDOMAIN_PATTERN
from specpilot.api.hosts import API_SERVER, CLUSTER_DOMAIN, cluster_domain
from specpilot.controller.collect import Collector
from specpilot.controller.core.policy import Policy
from specpilot.controller.evidence_store import ConfigMapEvidence
from specpilot.controller.handlers import register, settings
from specpilot.controller.kube import ApiError, Kube
from specpilot.controller.metrics import OperatorMetrics
from specpilot.controller.quality_gates import HttpQuality
from specpilot.controller.reconcile import Controller
from specpilot.controller.route_owner import ConfigMapRoutes
from specpilot.fetch.endpoints import PrometheusCredentials, PrometheusEndpoint, load_endpoints
from specpilot.fetch.outbound import Addresses, outbound_session
from specpilot.kubeaccess import Credentials, KubeAccess, NoCredential, load_access

# The routers' image outside a pod (the operator run from a shell) when --router-image names none: this
# version's, where the release workflow publishes it.
PUBLISHED_IMAGE = f"ghcr.io/specpilot/specpilot:{__version__}"
OPERATOR_CONTAINER = "operator"  # the operator's container in its pod (the chart's and the kustomize base's)
IN_CLUSTER_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
RESOLV_CONF = Path("/etc/resolv.conf")
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, kw_only=True)
class OperatorConfig:
    """The operator's start-up configuration, validated."""

    namespaces: tuple[str, ...]  # empty: the whole cluster
    router_image: str | None  # None: the operator's own pod's image (`router_image`)
    liveness: str | None  # HOST:PORT of /healthz
    metrics: str | None  # HOST:PORT of /metrics
    peering: str | None  # the (Cluster)KopfPeering's name; None runs standalone
    priority: int
    log_level: str
    log_format: str  # "text", or "json": one JSON object per line, for log shippers
    policy: Policy  # the hosts the operator may call for a pilot, the engine images it may run
    prometheus: PrometheusCredentials  # named endpoints, and the credentials for the Prometheus under one URL
    allowed: tuple[Network, ...] = ()  # addresses the operator may connect to that by default it never does


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not port.isdigit():
        raise ValueError(f"expected HOST:PORT or :PORT, got {text!r}")
    return host or "0.0.0.0", int(port)


def _listed(text: str | None) -> list[str]:
    return [item.strip() for item in (text or "").split(",") if item.strip()]


def _peering_name(text: str) -> str | None:
    """The peering object's name, or None (standalone) for ''."""
    if text and (len(text) > 253 or not re.fullmatch(DNS_SUBDOMAIN_PATTERN, text)):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an object name: lowercase letters, digits, '-' and '.', at most 253, "
            "starting and ending alphanumeric"
        )
    return text or None


def _prometheus_flags(p: argparse.ArgumentParser, environ: Mapping[str, str]) -> None:
    p.add_argument(
        "--prometheus-auth-url",
        default=environ.get("SPECPILOT_PROMETHEUS_AUTH_URL"),
        help="the Prometheus the credentials below are for: sent only to pilots' Prometheus URLs under it",
    )
    p.add_argument(
        "--prometheus-token-file",
        default=environ.get("SPECPILOT_PROMETHEUS_TOKEN_FILE"),
        help="a file holding a bearer token for it (read at each query, so it may rotate)",
    )
    p.add_argument(
        "--prometheus-ca-file", default=environ.get("SPECPILOT_PROMETHEUS_CA_FILE"), help="a CA bundle to verify it"
    )
    p.add_argument(
        "--prometheus-endpoints",
        default=environ.get("SPECPILOT_PROMETHEUS_ENDPOINTS"),
        metavar="FILE",
        help="a YAML file of named Prometheus endpoints with their credentials, in Prometheus' http_config "
        "shapes (authorization, basic_auth, tls_config, http_headers); pilots name one as "
        "metricsSource.prometheus.endpoint (env SPECPILOT_PROMETHEUS_ENDPOINTS)",
    )


def _prometheus(p: argparse.ArgumentParser, args: argparse.Namespace) -> PrometheusCredentials:
    """The named endpoints of --prometheus-endpoints, and the one of the --prometheus-auth-url flags."""
    if (args.prometheus_token_file or args.prometheus_ca_file) and not args.prometheus_auth_url:
        p.error(
            "--prometheus-token-file and --prometheus-ca-file need --prometheus-auth-url: the Prometheus they are for"
        )
    try:
        named = load_endpoints(args.prometheus_endpoints) if args.prometheus_endpoints else {}
    except ValueError as error:
        p.error(f"--prometheus-endpoints: {error}")
    flags = args.prometheus_auth_url
    bearer = PrometheusEndpoint.bearer(flags, args.prometheus_token_file, args.prometheus_ca_file) if flags else None
    return PrometheusCredentials(named, bearer)


def _policy_flags(p: argparse.ArgumentParser, environ: Mapping[str, str]) -> None:
    """What pilots may call and run: the operator's policy."""
    p.add_argument(
        "--allow-outbound",
        action="append",
        default=_listed(environ.get("SPECPILOT_ALLOW_OUTBOUND")),
        metavar="HOST[:PORT]",
        help="a host (glob) the operator may call for pilots' webhooks and Prometheus, besides the Services of "
        "a pilot's own namespace; another namespace's Service as SERVICE.NAMESPACE, its Services as *.NAMESPACE "
        "(repeatable; env SPECPILOT_ALLOW_OUTBOUND, comma-separated)",
    )
    p.add_argument(
        "--service-account",
        default=environ.get("SPECPILOT_SERVICE_ACCOUNT"),
        metavar="NAMESPACE/NAME",
        help="the operator's own ServiceAccount, which no pilot's engine pods may run as (env "
        "SPECPILOT_SERVICE_ACCOUNT, which the chart sets from the pod's own; default: the one its in-cluster "
        "token names)",
    )
    p.add_argument(
        "--allow-address",
        action="append",
        default=_listed(environ.get("SPECPILOT_ALLOW_ADDRESSES")),
        metavar="CIDR",
        help="an address or network the operator may connect to for pilots although by default it never does: "
        "loopback or the Kubernetes API server's (a cluster whose pods run on loopback); link-local and cloud "
        "metadata addresses stay refused (repeatable; env SPECPILOT_ALLOW_ADDRESSES, comma-separated)",
    )
    p.add_argument(
        "--cluster-domain",
        default=environ.get("SPECPILOT_CLUSTER_DOMAIN"),
        help="the cluster's DNS domain, for Services written in full (env SPECPILOT_CLUSTER_DOMAIN; default: "
        f"the svc.DOMAIN entry of {RESOLV_CONF}'s search path, else {CLUSTER_DOMAIN})",
    )
    p.add_argument(
        "--allow-image",
        action="append",
        default=_listed(environ.get("SPECPILOT_ALLOW_IMAGES")),
        metavar="IMAGE",
        help="an engine image (glob) pilots may run; none given: any image (repeatable; env "
        "SPECPILOT_ALLOW_IMAGES, comma-separated)",
    )


def _service_account(p: argparse.ArgumentParser, given: str | None) -> tuple[tuple[str, str], ...]:
    """The operator's own ServiceAccount as (namespace, name): as given, else as its in-cluster token says."""
    found = given if given is not None else token_account(IN_CLUSTER_TOKEN)
    if found is None:
        return ()
    namespace, _, name = found.partition("/")
    if not re.fullmatch(DNS_SUBDOMAIN_PATTERN, namespace) or not re.fullmatch(DNS_SUBDOMAIN_PATTERN, name):
        p.error(f"--service-account: expected NAMESPACE/NAME, got {found!r}")
    return ((namespace, name),)


def token_account(path: Path) -> str | None:
    """NAMESPACE/NAME of the ServiceAccount a token file's JWT names (its unverified `sub` claim: only the
    operator's own mounted token is read); None without one."""
    try:
        payload = path.read_text().split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (OSError, IndexError, ValueError):
        return None
    parts = str(claims.get("sub", "") if isinstance(claims, dict) else "").split(":")
    return f"{parts[2]}/{parts[3]}" if len(parts) == 4 and parts[:2] == ["system", "serviceaccount"] else None


def _allowed_networks(p: argparse.ArgumentParser, given: Sequence[str]) -> tuple[Network, ...]:
    try:
        return tuple(ipaddress.ip_network(text, strict=False) for text in given)
    except ValueError as error:
        p.error(f"--allow-address: {error} (an address or a network in CIDR notation: 127.0.0.0/8)")


def _cluster_domain(given: str | None) -> str:
    """The domain given, else the one the resolver's search path names, else Kubernetes' default."""
    if given:
        return given.strip(".").lower()
    try:
        return cluster_domain(RESOLV_CONF.read_text()) or CLUSTER_DOMAIN
    except OSError:
        return CLUSTER_DOMAIN


def api_server_addresses(environ: Mapping[str, str], server: str) -> frozenset[Address]:
    """The API server's addresses the operator knows without asking: the `kubernetes` Service's ClusterIP
    that pods are given (KUBERNETES_SERVICE_HOST), and the address it calls the server at."""
    found: set[Address] = set()
    for host in (environ.get("KUBERNETES_SERVICE_HOST", ""), urlsplit(server).hostname or ""):
        try:
            found.add(ipaddress.ip_address(host))
        except ValueError:
            continue
    return frozenset(found)


class StartError(Exception):
    """What stops the operator at start-up, with the fix."""


async def router_image(given: str | None, kube: Kube, environ: Mapping[str, str]) -> str:
    """The routers' image: as given, else the operator's own container's image as its pod runs it, so that
    whatever set the operator's image (the chart's values, kustomize's `images:`) sets the routers' too;
    outside a pod, this version's published image."""
    if given:
        return given
    namespace, name = environ.get("POD_NAMESPACE"), environ.get("POD_ID")
    if not namespace or not name:
        logging.getLogger("specpilot.operator").info("no POD_NAMESPACE and POD_ID: routers run %s", PUBLISHED_IMAGE)
        return PUBLISHED_IMAGE
    fix = "give --router-image (env SPECPILOT_ROUTER_IMAGE), or let the operator list pods in its namespace"
    try:
        pod = await kube.pod(namespace, name)
    except ApiError as error:
        raise StartError(f"the routers' image: own pod {namespace}/{name} unreadable ({error}): {fix}") from error
    containers = ((pod or {}).get("spec") or {}).get("containers") or []
    images = [c.get("image") for c in containers if c.get("name") == OPERATOR_CONTAINER] or [
        c.get("image") for c in containers[:1]
    ]
    if not images or not images[0]:
        raise StartError(f"the routers' image: own pod {namespace}/{name} not found: {fix}")
    return str(images[0])


async def _cluster_ips(kube: Kube) -> frozenset[Address]:
    """The `kubernetes` Service's ClusterIPs, where the operator may read it (cluster-wide)."""
    try:
        service = await kube.get("v1", "Service", API_SERVER.namespace, API_SERVER.name)
    except ApiError:
        return frozenset()  # namespaced: KUBERNETES_SERVICE_HOST names the same address
    ips = ((service or {}).get("spec") or {}).get("clusterIPs") or []
    return frozenset(ipaddress.ip_address(ip) for ip in ips if ip and ip != "None")


def _check_addresses(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The liveness and metrics endpoints' HOST:PORT, each refused at start-up when it does not parse."""
    for flag in ("liveness", "metrics"):
        value = getattr(args, flag)
        if value:
            try:
                _address(value)
            except ValueError as error:
                p.error(f"--{flag}: {error}")


def parse_args(argv: Sequence[str], environ: Mapping[str, str]) -> OperatorConfig:
    p = argparse.ArgumentParser(prog="specpilot operator", description="Reconcile SpeculationPilots.")
    p.add_argument(
        "--namespace",
        action="append",
        default=_listed(environ.get("SPECPILOT_NAMESPACES")),
        help="namespace to watch (repeatable; env SPECPILOT_NAMESPACES, comma-separated)",
    )
    p.add_argument("--all-namespaces", action="store_true", help="watch every namespace")
    p.add_argument(
        "--router-image",
        default=environ.get("SPECPILOT_ROUTER_IMAGE"),
        help=f"the routers' image (env SPECPILOT_ROUTER_IMAGE; default: its own pod's, else {PUBLISHED_IMAGE})",
    )
    p.add_argument("--liveness", default=":8081", help="HOST:PORT of the liveness endpoint /healthz ('' disables)")
    p.add_argument("--metrics", default=":8082", help="HOST:PORT of the Prometheus /metrics endpoint ('' disables)")
    p.add_argument(
        "--peering",
        default=environ.get("SPECPILOT_PEERING"),
        type=_peering_name,
        help="Kopf peering object, one per installation: replicas sharing it stand by for each other ('': none)",
    )
    p.add_argument(
        "--priority",
        type=int,
        help="peering priority, the highest works (default: random, so that one of equal replicas works)",
    )
    _policy_flags(p, environ)
    _prometheus_flags(p, environ)
    p.add_argument("--log-level", default=environ.get("SPECPILOT_LOG_LEVEL", "INFO"))
    p.add_argument(
        "--log-format",
        choices=("text", "json"),
        default=environ.get("SPECPILOT_LOG_FORMAT", "text"),
        help="text, or json: one object per line with the pilot it concerns (env SPECPILOT_LOG_FORMAT)",
    )
    args = p.parse_args(list(argv))
    prometheus = _prometheus(p, args)
    if bool(args.namespace) == args.all_namespaces:
        p.error("give --namespace (one or more) or --all-namespaces")
    _check_addresses(p, args)
    return OperatorConfig(
        namespaces=tuple(args.namespace),
        router_image=args.router_image,
        liveness=args.liveness or None,
        metrics=args.metrics or None,
        peering=args.peering,
        priority=args.priority if args.priority is not None else random.randrange(1, 1_000_000),
        log_level=args.log_level.upper(),
        log_format=args.log_format,
        policy=Policy(
            outbound=tuple(args.allow_outbound),
            images=tuple(args.allow_image),
            endpoints=tuple(prometheus.named),
            accounts=_service_account(p, args.service_account),
            cluster_domain=_cluster_domain(args.cluster_domain),
        ),
        allowed=_allowed_networks(p, args.allow_address),
        prometheus=prometheus,
    )


async def run(config: OperatorConfig) -> None:
    metrics = OperatorMetrics()
    if config.metrics:
        host, port = _address(config.metrics)
        start_http_server(port, host, registry=metrics.registry)
    liveness = None
    if config.liveness:
        host, port = _address(config.liveness)
        liveness = f"http://{host}:{port}/healthz"
    access = load_access()
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(timeout=timeout, cookie_jar=aiohttp.DummyCookieJar()) as api:
        kube = Kube(access, api, observe=metrics.observe_apply)
        found = api_server_addresses(os.environ, access.server) | await _cluster_ips(kube)
        addresses = Addresses(api_server=found, allowed=config.allowed)
        # every call made for a pilot: it follows no redirect, and connects to no address refused
        async with outbound_session(addresses=addresses, timeout=timeout) as http:
            image = await router_image(config.router_image, kube, os.environ)
            await _serve(config, kube=kube, http=http, metrics=metrics, access=access, liveness=liveness, image=image)


async def _serve(
    config: OperatorConfig,
    *,
    kube: Kube,
    http: aiohttp.ClientSession,
    metrics: OperatorMetrics,
    access: KubeAccess,
    liveness: str | None,
    image: str,
) -> None:
    """Kopf, with the controller over the API server (`kube`) and the session for pilots' calls (`http`)."""
    controller = Controller(
        kube=kube,
        routes=ConfigMapRoutes(kube, http),
        evidence=ConfigMapEvidence(kube),
        quality=HttpQuality(http, kube),
        collector=lambda: Collector.over_http(http, config.prometheus),
        metrics=metrics,
        router_image=image,
        policy=config.policy,
    )
    registry = kopf.OperatorRegistry()
    register(registry, controller, access.credentials if isinstance(access.credentials, Credentials) else None)
    await kopf.operator(
        registry=registry,
        settings=settings(peering=config.peering is not None),
        clusterwide=not config.namespaces,
        namespaces=config.namespaces,
        liveness_endpoint=liveness,
        peering_name=config.peering,
        priority=config.priority,
        standalone=config.peering is None,
    )


def configure_logging(config: OperatorConfig) -> None:
    """Text lines, or Kopf's JSON formatter: one object per line, with the Kubernetes object a line
    concerns under `object`."""
    if config.log_format == "json":
        kopf.configure(log_format=kopf.LogFormat.JSON, log_refkey="object")
        logging.getLogger().setLevel(config.log_level)
    else:
        logging.basicConfig(level=config.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def main(argv: list[str]) -> int:
    config = parse_args(argv, os.environ)
    configure_logging(config)
    if config.log_level != "DEBUG":
        # Kopf logs every watch handler's success ("Handler ... succeeded"); the operator logs what happened.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    try:
        asyncio.run(run(config))
    except (NoCredential, StartError) as error:  # never anonymous calls to the API server, nor a guessed image
        logging.getLogger("specpilot.operator").error("%s", error)
        return 1
    return 0
