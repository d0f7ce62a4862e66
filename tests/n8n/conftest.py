"""Fixtures of the n8n end-to-end tests: the installed n8n and the local downstream.

The tests need n8n installed by ``n8n/install.sh`` (a cache folder outside the repo).
Without it they are skipped with the install command, unless ``OUTBOX_MONITOR_REQUIRE_N8N``
is set (CI sets it), when a missing n8n fails them instead.
"""

import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from outbox_monitor.demo.downstream import Downstream
from outbox_monitor.demo.n8n_install import N8N_VERSION, N8nNotFound, cache_folder, find_n8n

REQUIRE_ENV = "OUTBOX_MONITOR_REQUIRE_N8N"
TOKEN = "Bearer n8n-e2e-token"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "n8n: runs the real n8n worker (n8n/install.sh first)")


INSTALL_WAIT_SECONDS = 30 * 60.0
"""``make test`` installs n8n in the background while the suite runs; these tests then run
last (``tests/conftest.py``'s ``pytest_collection_modifyitems``) and wait this long at most
for that install."""


def wait_for_installer(version: str = N8N_VERSION, timeout: float = INSTALL_WAIT_SECONDS) -> None:
    """Block while ``n8n/install.sh`` holds its lock (an install in progress)."""
    lock_path = cache_folder(version).parent / f".n8n-{version}.lock"
    if not lock_path.exists():
        return
    deadline = time.monotonic() + timeout
    with lock_path.open("a") as lock:
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() > deadline:
                    pytest.fail(f"n8n/install.sh still running after {timeout:g} s")
                time.sleep(2)
            else:
                fcntl.flock(lock, fcntl.LOCK_UN)
                return


@pytest.fixture(scope="session")
def n8n_binary() -> Path:
    """The installed n8n executable (waiting for an install in progress); skip, or fail
    under ``OUTBOX_MONITOR_REQUIRE_N8N`` (set by ``make test``)."""
    if os.environ.get(REQUIRE_ENV):
        wait_for_installer()
    try:
        return find_n8n()
    except N8nNotFound as error:
        message = f"{error} — {error.hint}"
        if os.environ.get(REQUIRE_ENV):
            pytest.fail(f"{message} (the install's log: test-artifacts/n8n-install.log)")
        pytest.skip(message)


@pytest.fixture
def downstream() -> Iterator[Downstream]:
    """The local downstream on 127.0.0.1, requiring ``Authorization: TOKEN``."""
    with Downstream(authorization=TOKEN) as server:
        yield server
