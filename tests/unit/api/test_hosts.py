"""Hosts a pilot names: a Service in every spelling teams write, or a host outside; addresses never called."""

from __future__ import annotations

import pytest

from specpilot.api.hosts import Service, cluster_domain, never_called, service_of


@pytest.mark.parametrize(
    ("host", "namespace", "service"),
    [
        ("checks", "team-a", Service("checks", "team-a")),
        ("checks", None, None),  # no namespace to read a short name in
        ("checks.team-b", "team-a", Service("checks", "team-b")),
        ("checks.team-b.svc", "team-a", Service("checks", "team-b")),
        ("checks.team-b.svc.cluster.local", "team-a", Service("checks", "team-b")),
        ("checks.team-b.svc.cluster.local.", "team-a", Service("checks", "team-b")),
        ("Checks.Team-B.SVC", "team-a", Service("checks", "team-b")),
        ("kubernetes.default", "team-a", Service("kubernetes", "default")),
        ("example.com.", "team-a", None),  # absolute: a name outside
        ("hooks.corp.example", "team-a", None),
        ("checks.team-b.svc.cluster", "team-a", None),
        ("checks.team-b.svc.evil.example", "team-a", None),
        ("10.0.0.5", "team-a", None),
        ("fd00:ec2::254", "team-a", None),
        ("a..b", "team-a", None),
    ],
)
def test_a_host_names_a_service_in_any_spelling(host: str, namespace: str | None, service: Service | None) -> None:
    assert service_of(host, namespace) == service


def test_a_service_is_called_by_a_name_no_search_path_can_turn() -> None:
    assert Service("checks", "team-b").called == "checks.team-b.svc"
    assert Service("checks", "team-b").spellings == (
        "checks.team-b",
        "checks.team-b.svc",
        "checks.team-b.svc.cluster.local",
    )


@pytest.mark.parametrize(
    ("address", "never"),
    [
        ("169.254.169.254", True),
        ("169.254.0.1", True),
        ("fd00:ec2::254", True),
        ("fe80::1%eth0", True),
        ("::ffff:169.254.169.254", True),
        ("10.96.0.1", False),
        ("127.0.0.1", False),
        ("198.18.0.7", False),
        ("fd00:ec2::253", False),
        ("metadata.google.internal", False),  # a name: the resolver checks what it resolves to
    ],
)
def test_link_local_and_metadata_addresses_are_never_called(address: str, never: bool) -> None:
    assert never_called(address) is never


@pytest.mark.parametrize("address", ["100.100.100.200", "168.63.129.16", "::ffff:168.63.129.16"])
def test_alibaba_and_azure_metadata_addresses_are_never_called(address: str) -> None:
    assert never_called(address)


def test_a_cluster_with_another_domain_reads_its_services_in_it() -> None:
    assert service_of("checks.team-b.svc.corp.internal", "team-a", "corp.internal") == Service("checks", "team-b")
    assert service_of("checks.team-b.svc.cluster.local", "team-a", "corp.internal") is None
    found = service_of("checks", "team-a", "corp.internal")
    assert found is not None and found.spellings[-1] == "checks.team-a.svc.corp.internal"


@pytest.mark.parametrize(
    ("resolv_conf", "domain"),
    [
        ("search team-a.svc.corp.internal svc.corp.internal corp.internal\nnameserver 10.96.0.10\n", "corp.internal"),
        (
            "nameserver 10.96.0.10\nsearch team-a.svc.cluster.local svc.cluster.local cluster.local ec2.internal",
            "cluster.local",
        ),
        ("search example.com\nnameserver 1.1.1.1\n", None),
        ("", None),
    ],
    ids=["custom", "default", "outside-a-cluster", "empty"],
)
def test_the_cluster_domain_is_read_from_the_resolvers_search_path(resolv_conf: str, domain: str | None) -> None:
    assert cluster_domain(resolv_conf) == domain
