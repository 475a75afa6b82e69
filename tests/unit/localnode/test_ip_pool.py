"""Pod IPs: handed out in order, reused after removal, never one that something listens on."""

from __future__ import annotations

import socket

import pytest

from specpilot.localnode.agent import IpPool, listening_addresses


def test_addresses_go_out_in_order_and_come_back() -> None:
    pool = IpPool("198.18.0.0/29", busy=set)
    assert [pool.take(), pool.take(), pool.take()] == ["198.18.0.1", "198.18.0.2", "198.18.0.3"]
    pool.give("198.18.0.2")
    assert pool.take() == "198.18.0.2"
    assert pool.take() == "198.18.0.4"


def test_an_address_in_use_is_skipped_and_kept_for_later() -> None:
    busy = {"198.18.0.1", "198.18.0.3"}
    pool = IpPool("198.18.0.0/29", busy=lambda: set(busy))
    assert pool.take() == "198.18.0.2"
    pool.give("198.18.0.2")
    busy.add("198.18.0.2")
    assert pool.take() == "198.18.0.4"
    busy.clear()
    assert pool.take() == "198.18.0.2"


def test_an_exhausted_network_says_so() -> None:
    pool = IpPool("198.18.0.0/30", busy=set)
    pool.take(), pool.take()
    with pytest.raises(RuntimeError, match="exhausted"):
        pool.take()


def test_a_listening_socket_shows_and_a_bound_one_does_not() -> None:
    with socket.socket() as listening, socket.socket() as bound:
        listening.bind(("127.0.3.7", 0))
        listening.listen()
        bound.bind(("127.0.3.8", 0))
        found = listening_addresses()
    assert "127.0.3.7" in found
    assert "127.0.3.8" not in found
