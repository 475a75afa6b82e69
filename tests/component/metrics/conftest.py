"""The router harness of tests/component/router (a real router with fake arms), reused as is by the
scraping tests."""

from __future__ import annotations

from tests.component.router.conftest import make_router

__all__ = ["make_router"]
