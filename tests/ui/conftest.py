"""AppTest fixtures: the dashboard pointed at this test's fresh database, clean caches."""

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from tests.alerting import LOADED_DEADLINE

DASHBOARD = Path(__file__).resolve().parents[2] / "dashboard.py"
ACTOR = "ui-test"
TIMEOUT_SECONDS = 2 * LOADED_DEADLINE
"""A page's script run (AppTest's deadline; about a second once warm): the first run of a
worker imports the dashboard cold, which took more than 30 s at load average 24 on 2 cores
and more than 60 s under ``nice -n 10`` at load 25."""

OpenPage = Callable[..., AppTest]


@pytest.fixture(autouse=True)
def fresh_caches() -> Iterator[None]:
    """Streamlit caches are per process: every test starts and ends without them, which
    also closes the pools of the previous test (``on_release``)."""
    st.cache_data.clear()
    st.cache_resource.clear()
    yield
    st.cache_data.clear()
    st.cache_resource.clear()


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch, dsn: str) -> pytest.MonkeyPatch:
    """Only this test's settings in the environment: its DSN and a fixed actor."""
    for name in list(os.environ):
        if name.startswith("OUTBOX_MONITOR_") or name == "DATABASE_URL":
            monkeypatch.delenv(name)
    monkeypatch.setenv("OUTBOX_MONITOR_DSN", dsn)
    monkeypatch.setenv("OUTBOX_MONITOR_ACTOR", ACTOR)
    return monkeypatch


@pytest.fixture
def open_page(environment: pytest.MonkeyPatch) -> OpenPage:
    """``open_page("dead_letters", event_type="order.paid")`` runs the dashboard on that page
    with those URL query parameters and returns the ``AppTest``; ``user=`` is what the run
    reads as ``st.user`` (an OIDC sign-in: ``{"is_logged_in": True, "email": …}``)."""

    def run(page: str = "overview", *, user: dict | None = None, **query: str) -> AppTest:
        at = AppTest.from_file(DASHBOARD, default_timeout=TIMEOUT_SECONDS)
        if user is not None:
            at.user = user
        at.query_params.update(query)
        return at.switch_page(f"pages/{page}.py").run()

    return run
