"""Calls the node makes right after a pod is bound are retried while the API server catches up."""

from __future__ import annotations

import time

import pytest
from kubernetes.client import ApiException

from specpilot.localnode import containers


class Flaky:
    """Fails with `status` the first `failures` times, then answers."""

    def __init__(self, status: int, failures: int) -> None:
        self.status, self.failures, self.calls = status, failures, 0

    def __call__(self, value: str) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise ApiException(status=self.status)
        return value


@pytest.fixture(autouse=True)
def no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "sleep", lambda seconds: None)


def test_a_lagging_status_is_retried_until_the_call_answers() -> None:
    call = Flaky(404, failures=2)
    assert containers.authorized(call, "token", lagging=(403, 404)) == "token"
    assert call.calls == 3


def test_a_status_that_is_not_lagging_fails_at_once() -> None:
    call = Flaky(404, failures=1)
    with pytest.raises(ApiException):
        containers.authorized(call, "config")  # a missing configMap is missing: 404 is not retried by default
    assert call.calls == 1


def test_retries_are_bounded() -> None:
    call = Flaky(403, failures=1000)
    with pytest.raises(ApiException):
        containers.authorized(call, "x")
    assert call.calls == containers.AUTHORIZER_RETRIES
