"""Local mode serves the person at this machine only: ``streamlit run dashboard.py``
listens on every interface, and a browser on another machine gets the "Sign-in required"
page instead of an admin session (docs/security.md)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from outbox_monitor.demo.pgcluster import free_port
from tests.browser_support import (
    outward_address,
    stop,
    wait_healthy,
)

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.browser


def test_a_browser_on_another_machine_is_refused_in_local_mode(dsn, rows, page: Page, tmp_path):
    address = outward_address()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address to come from")
    rows.add()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_MONITOR_")}
    env.update(HOME=str(tmp_path), OUTBOX_MONITOR_DSN=dsn, OUTBOX_MONITOR_ACTOR="local-admin")
    command = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(ROOT / "dashboard.py"),
        "--server.headless=true",
        f"--server.port={port}",
        "--browser.gatherUsageStats=false",
        "--server.fileWatcherType=none",
    ]  # no --server.address: Streamlit listens on every interface
    log_path = tmp_path / "streamlit.log"
    with log_path.open("w") as log:
        server = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", server, log_path)

        page.goto(f"http://{address}:{port}/")
        expect(page.get_by_role("heading", name="Sign-in required")).to_be_visible()
        refusal = page.get_by_text("and this request comes from")
        expect(refusal).to_be_visible()
        expect(refusal.locator("code").first).to_have_text(address)
        expect(page.get_by_text("Queue depth")).to_have_count(0)

        page.goto(f"http://127.0.0.1:{port}/")  # the person at this machine
        expect(page.get_by_role("heading", name="Overview")).to_be_visible()
        expect(page.get_by_text("local-admin")).to_be_visible()
    finally:
        stop(server)  # SIGKILL when SIGTERM is not enough in time: never left running
