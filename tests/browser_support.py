"""What every real-browser test shares: Debian's Chromium and its flags, and waits.

Every deadline of the browser tests (a server's start and stop, an element's appearance) is
derived here from ``SLOWDOWN``, never set test by test."""

import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, Locator, Page, Request, expect
from playwright.sync_api import Error as PlaywrightError

CHROMIUM = "/usr/bin/chromium"
"""The system's Chromium (Debian package), never a downloaded one."""
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SLOWDOWN = float(os.environ.get("OUTBOX_MONITOR_TEST_SLOWDOWN") or 1)
"""How many times slower than the loaded 2-core CI machine the deadlines below were measured
on this one may be (``OUTBOX_MONITOR_TEST_SLOWDOWN``, default 1): every deadline is
multiplied by it."""
START_TIMEOUT_SECONDS = 60 * SLOWDOWN
"""Until a served dashboard answers ``/_stcore/health`` (≈ 1 s on a quiet machine; past
30 s with load average 16-21 on 2 cores, run 1 of issue 28)."""
STOP_TIMEOUT_SECONDS = 30 * SLOWDOWN
"""Until a served dashboard ends after SIGTERM (≈ 1 s quiet; past 10 s under that load),
then it is killed."""
ELEMENT_TIMEOUT_MS = 60_000 * SLOWDOWN
"""Until an element a test waits for appears: a fresh server's first run of a page takes
≈ 4 s on a quiet machine and went past 20 s under that load (the page's ``main`` still
empty). A real miss still fails, later."""

expect.set_options(timeout=ELEMENT_TIMEOUT_MS)


def healthy(url: str) -> bool:
    """Whether the Streamlit server at ``url`` answers its health check with ``ok``."""
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=1) as response:
            return response.read() == b"ok"
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def outward_address() -> str | None:
    """This machine's address on its outward interface (no packet is sent), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
        except OSError:
            return None
        address = probe.getsockname()[0]
    return None if address.startswith("127.") else address


def wait_healthy(url: str, process: subprocess.Popen, log_path: Path) -> None:
    """Wait until the Streamlit server ``process`` at ``url`` answers its health check.

    Fails the test (quoting the end of ``log_path``) when it exits first or does not
    answer within ``START_TIMEOUT_SECONDS``.
    """
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while not healthy(url):
        if process.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"the dashboard at {url} did not start:\n{log_path.read_text()[-3000:]}")
        time.sleep(0.2)


def stop(process: subprocess.Popen) -> int:
    """End ``process``: SIGTERM, then SIGKILL when it is still running after
    ``STOP_TIMEOUT_SECONDS``; returns its exit code once it has exited (``-9`` when killed),
    never leaving it running."""
    if process.poll() is None:
        process.terminate()
    try:
        return process.wait(timeout=STOP_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


def settled(page: Page) -> None:
    """Wait until the page's script run has ended (Streamlit's own ``data-test-script-state``
    of ``stApp``): what it draws is all there and stays where it is. Call it once the page
    shows something of the run meant (a run not yet started is ``notRunning`` too)."""
    app = page.locator('[data-testid="stApp"]')
    expect(app).to_have_attribute("data-test-script-state", "notRunning")


NETWORK_CHANGED = "net::ERR_NETWORK_CHANGED"
"""How Chromium fails every request in flight when it sees a network interface of the host
come or go (its netlink watcher), loopback ones included: the podman tests' containers add and
remove interfaces while other workers' pages load. One of the ≈ 70 scripts of Streamlit's
frontend failing so leaves the page blank for good (issue 28 item 7: L3's
``test_a_failing_receiver_shows_on_the_alerts_page``, two chunks failed, body empty after 60 s)."""


def guard_navigation(context: BrowserContext) -> BrowserContext:
    """Make every page of ``context`` load again what Chromium aborted because the host's
    network changed (``NETWORK_CHANGED``): each ``page.goto`` waits until Streamlit's app has
    drawn its root (``stApp``) or a request failed so, and in that case loads the URL again,
    for at most an element's timeout (``ELEMENT_TIMEOUT_MS``), saying so on stderr. Nothing
    else is retried: any other failure stays the test's. Returns ``context``."""
    context.on("page", _guard_page)
    return context


def _guard_page(page: Page) -> None:
    navigate = page.goto

    def goto(url: str, **kwargs):
        deadline = time.monotonic() + ELEMENT_TIMEOUT_MS / 1000
        while True:
            aborted: list[str] = []
            listener = aborted_by_network_change(aborted)
            page.on("requestfailed", listener)
            try:
                response = navigate(url, **kwargs)
                _drawn_or_aborted(page, aborted)
            except PlaywrightError as error:  # the document's own request aborted so
                if NETWORK_CHANGED not in str(error) or time.monotonic() > deadline:
                    raise
                aborted.append(url)
            finally:
                page.remove_listener("requestfailed", listener)
            if not aborted or time.monotonic() > deadline:
                return response
            print(f"{url}: Chromium aborted {len(aborted)} requests ({NETWORK_CHANGED}): again")

    page.goto = goto  # type: ignore[method-assign]


def aborted_by_network_change(aborted: list[str]):
    """A ``requestfailed`` listener adding to ``aborted`` the URL of each request Chromium
    failed with ``NETWORK_CHANGED``."""

    def seen(request: Request) -> None:
        if NETWORK_CHANGED in (request.failure or ""):
            aborted.append(request.url)

    return seen


def _drawn_or_aborted(page: Page, aborted: list[str]) -> None:
    """Until Streamlit's root is drawn or a request was aborted (``aborted`` filled by the
    caller's listener), at most an element's timeout; at once for a page that is not
    Streamlit's (no ``#root``)."""
    if page.locator("#root").count() == 0:
        return
    app = page.locator('[data-testid="stApp"]')
    deadline = time.monotonic() + ELEMENT_TIMEOUT_MS / 1000
    while not aborted and app.count() == 0 and time.monotonic() < deadline:
        page.wait_for_timeout(50)  # lets Playwright deliver the page's events


DOCS_IMAGES_ENV = "OUTBOX_MONITOR_DOCS_IMAGES"
"""Set to 1 (``make docs-images``) to save the docs' screenshots into ``docs/images``."""
DOCS_IMAGES = (
    Path(__file__).resolve().parents[1] / "docs" / "images"
    if os.environ.get(DOCS_IMAGES_ENV) == "1"
    else Path(__file__).resolve().parents[1] / "test-artifacts" / "docs-images"
)
"""Where the screens the docs show are saved (``1440-<page>.png``, issue 30: every page;
``overview-outage.png``): ``docs/images`` when ``OUTBOX_MONITOR_DOCS_IMAGES=1``, else
``test-artifacts/docs-images`` (a test run leaves the checkout as it was)."""
SCREEN_1440 = {"width": 1440, "height": 900}
"""A laptop's first screen, the size the issue measures at."""
GRID_HEADER_PX = 35
"""The height of a table's header row (Streamlit's grid)."""


def choose_row(page: Page, grid: Locator, index: int) -> None:
    """Tick the row-selection checkbox of data row ``index`` (from 0) of ``grid`` (a
    ``stDataFrame``), once the page's run has ended: the grid is a canvas, so the click goes
    to the checkbox's place, found from the number of rows in the grid's accessible table and
    the grid's height (rows are taller than 35 px when a long value wraps)."""
    settled(page)
    rows = grid.locator('table[role="grid"] tbody tr[role="row"]')
    expect(rows.first).to_be_attached()
    box = grid.bounding_box()
    row_px = (box["height"] - GRID_HEADER_PX) / rows.count()
    page.mouse.click(box["x"] + 15, box["y"] + GRID_HEADER_PX + (index + 0.5) * row_px)
