"""Waiting on a condition in async tests: poll it until it holds, and fail saying what never happened."""

from __future__ import annotations

import asyncio
import time
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
        await asyncio.sleep(every)
