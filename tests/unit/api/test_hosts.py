"""Hosts a pilot names: a Service in every spelling teams write, or a host outside; addresses never called."""

from __future__ import annotations

import pytest

from specpilot.api.hosts import Service, never_called, service_of


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
