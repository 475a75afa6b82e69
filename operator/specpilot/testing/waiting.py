"""Waiting on a condition in tests: poll it until it holds, and fail saying what never happened.

`eventually` in async tests, `wait_until` in blocking code (the cluster tier, servers started as
processes). These are the only sleeps a test needs to wait on something: wait for the event you mean.
"""

from __future__ import annotations

import asyncio
import time
import urllib.request
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


async def eventually(what: str, check: Callable[[], T], *, within: float = 10, every: float = 0.005) -> T:
    """Poll `check` until it returns something truthy, and return that; fail after `within` s."""
    deadline = time.monotonic() + within
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what}")
        await asyncio.sleep(every)  # the poll's period


def wait_until(what: str, check: Callable[[], T], timeout: float = 60, every: float = 0.2) -> T:
    """Poll `check` until it returns something truthy, and return that; fail after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)  # the poll's period


def answers(url: str) -> bool:
    """Whether `url` answers an HTTP GET with success (an error status is not an answer yet)."""
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except OSError:
        return False


def wait_http(url: str, *, timeout: float = 30) -> None:
    """Until a server answers at `url` with success."""
    wait_until(f"{url} to answer", lambda: answers(url), timeout=timeout)
