"""How the operator reads a host a pilot names: an in-cluster Service in any of the spellings teams
write, or a host outside the cluster; and the addresses it never calls, whatever a policy allows.

A Service is written `name` (in the pilot's namespace), `name.ns`, `name.ns.svc` or
`name.ns.svc.<cluster domain>` (`cluster.local` unless the cluster says otherwise: `cluster_domain`). The
operator's pod resolves names against its own namespace, so it calls
the short forms as `name.ns.svc`: `name` alone would reach its own namespace's Service, and `name.ns`
falls through to the public DNS where no such Service exists (`evil.dev` for a pilot in `dev`).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

CLUSTER_DOMAIN = "cluster.local"  # Kubernetes' default, where the resolver's search path says nothing else

# Link-local addresses, where clouds serve instance metadata and credentials (169.254.169.254, AWS'
# fd00:ec2::254), and the metadata addresses outside them (Alibaba's 100.100.100.200, Azure's WireServer
# 168.63.129.16): never called, whatever the policy says.
NEVER_NETWORKS = tuple(
    ipaddress.ip_network(net)
    for net in ("169.254.0.0/16", "fe80::/10", "fd00:ec2::254/128", "100.100.100.200/32", "168.63.129.16/32")
)


@dataclass(frozen=True, slots=True)
class Service:
    """A Service by name and namespace."""

    name: str
    namespace: str
    domain: str = field(default=CLUSTER_DOMAIN, compare=False)  # the cluster's DNS domain

    @property
    def called(self) -> str:
        """The host the operator calls it by: one that no search path or outside DNS can turn elsewhere."""
        return f"{self.name}.{self.namespace}.svc"

    @property
    def spellings(self) -> tuple[str, ...]:
        """Every qualified way to write it, for matching a policy's patterns against."""
        return (f"{self.name}.{self.namespace}", self.called, f"{self.called}.{self.domain}")


# The Kubernetes API server's Service: never called for a pilot, in any spelling.
API_SERVER = Service("kubernetes", "default")


def service_of(host: str, namespace: str | None, domain: str = CLUSTER_DOMAIN) -> Service | None:
    """The Service `host` names in a cluster whose DNS domain is `domain`, a one-label name read in
    `namespace` (None: no namespace to read it in); None for an IP address or a host outside the cluster."""
    host = host.lower()
    absolute = host.endswith(".")
    labels = host.removesuffix(".").split(".")
    if not all(labels) or is_address(host):
        return None
    if labels[2:] == ["svc", *domain.split(".")]:
        return Service(labels[0], labels[1], domain)
    if absolute:
        return None  # an absolute name other than the long form is a name outside
    if len(labels) == 1:
        return Service(labels[0], namespace, domain) if namespace is not None else None
    if len(labels) == 2 or labels[2:] == ["svc"]:
        return Service(labels[0], labels[1], domain)
    return None


def cluster_domain(resolv_conf: str) -> str | None:
    """The cluster's DNS domain as a pod's resolver configuration names it: the search path's
    `svc.<domain>` entry (kubelet writes `<ns>.svc.<domain> svc.<domain> <domain>`); None without one."""
    for line in resolv_conf.splitlines():
        words = line.split()
        if words[:1] == ["search"]:
            found = [entry.removesuffix(".").lower() for entry in words[1:] if entry.lower().startswith("svc.")]
            if found:
                return found[0].removeprefix("svc.")
    return None


def is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def parsed_ip(address: str) -> IpAddress | None:
    """`address` as the IP address a connection reaches (an IPv6 zone is no part of it, and an IPv4-mapped
    IPv6 address is its IPv4 one); None where it is no IP address."""
    try:
        found = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(found, ipaddress.IPv6Address) and found.ipv4_mapped is not None:
        return found.ipv4_mapped
    return found


def never_ip(found: IpAddress) -> bool:
    """Whether the operator never calls `found` (link-local or a cloud's metadata address)."""
    return any(found in net for net in NEVER_NETWORKS)


def never_called(address: str) -> bool:
    """Whether an IP address is one the operator never calls (link-local or a cloud's metadata address)."""
    found = parsed_ip(address)
    return found is not None and never_ip(found)
