"""The addresses the operator connects to for a pilot; what it writes about a call it made holds no URL's
userinfo and no value it sent."""

from __future__ import annotations

from ipaddress import ip_address, ip_network

import pytest

from specpilot.fetch.outbound import API_SERVER, LOOPBACK, NEVER, REFUSING, Addresses, allowing_loopback, scrub

IN_CLUSTER = Addresses(api_server=frozenset({ip_address("10.96.0.1"), ip_address("fd00:10:96::1")}))
INSTALLER_ALLOWS = Addresses(
    api_server=IN_CLUSTER.api_server, allowed=(ip_network("10.96.0.1/32"), ip_network("127.0.0.0/8"))
)


@pytest.mark.parametrize(
    ("address", "default", "in_cluster", "allowed"),
    [
        ("127.0.0.1", LOOPBACK, LOOPBACK, None),
        ("127.3.2.1", LOOPBACK, LOOPBACK, None),
        ("::1", LOOPBACK, LOOPBACK, LOOPBACK),
        ("::ffff:127.0.0.1", LOOPBACK, LOOPBACK, None),
        ("0.0.0.0", LOOPBACK, LOOPBACK, LOOPBACK),  # connecting to it reaches loopback
        ("10.96.0.1", None, API_SERVER, None),
        ("fd00:10:96::1", None, API_SERVER, API_SERVER),
        ("169.254.169.254", NEVER, NEVER, NEVER),
        ("100.100.100.200", NEVER, NEVER, NEVER),
        ("168.63.129.16", NEVER, NEVER, NEVER),
        ("fe80::1%eth0", NEVER, NEVER, NEVER),
        ("10.0.0.5", None, None, None),
        ("hooks.example", None, None, None),  # a name: judged on what it resolves to
    ],
)
def test_addresses_refused_by_default_in_cluster_and_as_the_installer_allows(
    address: str, default: str | None, in_cluster: str | None, allowed: str | None
) -> None:
    assert REFUSING.refusal(address) == default
    assert IN_CLUSTER.refusal(address) == in_cluster
    assert INSTALLER_ALLOWS.refusal(address) == allowed


def test_metadata_addresses_are_refused_even_when_named() -> None:
    named = Addresses(allowed=(ip_network("169.254.0.0/16"), ip_network("0.0.0.0/0")))
    assert named.refusal("169.254.169.254") == NEVER and named.refusal("127.0.0.1") is None
    assert allowing_loopback().refusal("127.0.0.1") is None and allowing_loopback().refusal("169.254.1.1") == NEVER


@pytest.mark.parametrize(
    ("text", "secrets", "scrubbed"),
    [
        ("may not call http://alice:hunter2@hooks.example/x", (), "may not call http://<secret>@hooks.example/x"),
        ("GET HTTPS://tok@prom.monitoring:9090/api", (), "GET HTTPS://<secret>@prom.monitoring:9090/api"),
        ("redirect to http://h/?token=Bearer+abc%2F1", ("Bearer abc/1",), "redirect to http://h/?token=<secret>"),
        ("denied: Bearer abc/1 and abc", ("abc", "Bearer abc/1"), "denied: <secret> and <secret>"),
        ("mail alice@example.com about http://h/a@b", (), "mail alice@example.com about http://h/a@b"),
    ],
    ids=["userinfo", "scheme-case", "url-encoded-value", "longest-first", "not-userinfo"],
)
def test_scrub(text: str, secrets: tuple[str, ...], scrubbed: str) -> None:
    assert scrub(text, secrets) == scrubbed
