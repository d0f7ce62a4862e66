"""A page loads whole while the host's network changes (issue 28 item 7): Chromium fails every
request in flight when a host interface comes or goes — loopback requests too — and the
podman tests' containers add and remove such interfaces while other workers' pages load. Here
a thread adds and deletes a veth pair, as podman does for a container, while the Alerts page
loads: Chromium aborts some of its scripts (proved, else the test proves nothing) and the
browser fixtures' guard (``browser_support.guard_navigation``) loads the page again."""

import subprocess
import threading
import time

import pytest
from playwright.sync_api import expect

from tests.browser_support import aborted_by_network_change

pytestmark = pytest.mark.browser

CHURN_SECONDS = 1.5
"""How long the interfaces come and go from the first load's start: within the ≈ 70 script
loads of Streamlit's frontend, and shorter than what the guard's further loads take."""


def churn(name: str, until: float) -> None:
    """Add the veth pair ``name``/``name``p with an address, bring it up and delete it, as a
    container's start and end do, until the monotonic instant ``until``."""
    while time.monotonic() < until:
        for command in (
            ["link", "add", name, "type", "veth", "peer", "name", f"{name}p"],
            ["addr", "add", "10.213.7.1/30", "dev", name],
            ["link", "set", name, "up"],
            ["link", "set", f"{name}p", "up"],
            ["link", "del", name],
        ):
            subprocess.run(["ip", *command], check=True)


def test_a_page_loads_whole_while_the_hosts_network_changes(dashboard, page):
    probe = subprocess.run(
        ["ip", "link", "add", "omprobe0", "type", "veth", "peer", "name", "omprobe0p"],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        pytest.skip(f"this machine refuses a veth pair to the tests: {probe.stderr.strip()}")
    subprocess.run(["ip", "link", "del", "omprobe0"], check=True)
    aborted: list[str] = []
    page.on("requestfailed", aborted_by_network_change(aborted))
    changing = threading.Thread(
        target=churn, args=("omchurn0", time.monotonic() + CHURN_SECONDS), daemon=True
    )
    changing.start()
    page.goto(f"{dashboard}/alerts")
    changing.join()

    expect(page.get_by_role("heading", name="Alerts")).to_be_visible()
    assert aborted, "no request was aborted: the interfaces' changes proved nothing here"
