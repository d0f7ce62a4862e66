"""Real-browser fixtures: a `streamlit run dashboard.py` server on this test's database, and
headless Chromium (the system's /usr/bin/chromium, never a downloaded one).

A plugin of the root conftest (``pytest_plugins``), so every folder shares one definition:
one session-wide Playwright, whichever folders' browser tests run in one session (a second
``sync_playwright`` inside the first one's loop is refused)."""

import os
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Locator, Page, expect, sync_playwright
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from outbox_monitor.demo.pgcluster import free_port
from outbox_monitor.service.serve import streamlit_command
from tests.browser_support import (
    CHROMIUM,
    CHROMIUM_ARGS,
    ELEMENT_TIMEOUT_MS,
    guard_navigation,
    settled,
    stop,
    wait_healthy,
)

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOTS = ROOT / "test-artifacts" / "screenshots"
FAILURES = ROOT / "test-artifacts" / "failures"
ACTOR = "browser-test"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Keeps each phase's report on the test (``item.report_call``) so the browser fixtures
    can tell, at teardown, that the test failed."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"report_{report.when}", report)


def _failed(request: pytest.FixtureRequest) -> bool:
    report = getattr(request.node, "report_call", None)
    return report is not None and report.failed


def _failure_path(request: pytest.FixtureRequest, suffix: str) -> Path:
    FAILURES.mkdir(parents=True, exist_ok=True)
    return FAILURES / (re.sub(r"[^\w.-]+", "_", request.node.nodeid)[-150:] + suffix)


@pytest.fixture
def dashboard(dsn: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """The dashboard served by ``streamlit run`` against this test's database; its base URL.
    A failed test's ``streamlit run`` log goes to test-artifacts/failures/."""
    with serve_dashboard(dsn, tmp_path) as url:
        yield url
    log = tmp_path / "streamlit.log"
    if _failed(request) and log.exists():
        _failure_path(request, ".streamlit.log").write_bytes(log.read_bytes())


@pytest.fixture
def dashboard_at(tmp_path: Path):
    """``with dashboard_at(dsn) as url:`` serves the dashboard against another DSN (e.g.
    through a proxy the test controls); ``dashboard_at(dsn, outage_retry="15s")`` adds
    settings (``OUTBOX_MONITOR_<NAME>``)."""
    return lambda dsn, **settings: serve_dashboard(dsn, tmp_path, **settings)


@contextmanager
def serve_dashboard(dsn: str, tmp_path: Path, **settings: str) -> Iterator[str]:
    """Serve the dashboard with ``streamlit run`` against ``dsn`` (plus ``settings`` as
    ``OUTBOX_MONITOR_<NAME>`` variables) until the block ends; yields its base URL."""
    port = free_port()
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("OUTBOX_MONITOR_") and name != "DATABASE_URL"
    }
    env.update(HOME=str(home), OUTBOX_MONITOR_DSN=dsn, OUTBOX_MONITOR_ACTOR=ACTOR)
    env.update({f"OUTBOX_MONITOR_{name.upper()}": value for name, value in settings.items()})
    command = streamlit_command(address="127.0.0.1", port=port)
    log_path = tmp_path / "streamlit.log"
    with log_path.open("w") as log:
        server = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(url, server, log_path)
            yield url
        finally:
            stop(server)


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        new_context = chromium.new_context
        # every context's pages load again what a host network change aborted
        chromium.new_context = lambda **options: guard_navigation(new_context(**options))
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Browser, request: pytest.FixtureRequest) -> Iterator[Page]:
    """A tab in a fresh context; a failed test's last screen and text go to
    test-artifacts/failures/ (what the page showed, for a failure seen once in CI)."""
    # tall enough for a whole page: Streamlit scrolls inside its own container, so a
    # full-page screenshot only holds the viewport
    context = browser.new_context(viewport={"width": 1400, "height": 2000})
    context.set_default_timeout(ELEMENT_TIMEOUT_MS)
    tab = context.new_page()
    # what the browser saw, for a failure: console errors, page errors, failed requests and
    # every response's status (a blank page after 60 s was seen once in CI, server log clean)
    events: list[str] = []
    tab.on(
        "console",
        lambda m: m.type in ("error", "warning") and events.append(f"console {m.type}: {m.text}"),
    )
    tab.on("pageerror", lambda error: events.append(f"pageerror: {error}"))
    tab.on("requestfailed", lambda r: events.append(f"requestfailed: {r.url} {r.failure}"))
    tab.on("response", lambda r: events.append(f"response {r.status}: {r.url}"))
    yield tab
    if _failed(request):
        try:
            tab.screenshot(path=str(_failure_path(request, ".png")), timeout=10_000)
            text = f"{tab.url}\n\n{tab.inner_text('body', timeout=10_000)}"
        except Exception as error:  # the page may be gone: the failure itself is reported
            text = f"no capture: {error}"
        _failure_path(request, ".txt").write_text(text + "\n\n" + "\n".join(events[-300:]))
    context.close()


@pytest.fixture
def screenshot(page: Page):
    """``screenshot("overview")`` saves the page to test-artifacts/screenshots/overview.png."""

    def save(name: str) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return save


@pytest.fixture
def choose(page: Page):
    """``choose("Error group", re.compile("40c9…"))`` picks an option of a selectbox (in
    ``within``, default the page), once the page's run has ended (a click on a widget still
    being drawn leaves the list closed). A click that lands as a live refresh reruns it
    leaves it closed too: it clicks again."""

    def pick(label: str, option: str | re.Pattern, within: Locator | None = None) -> None:
        selectbox = (within or page).locator('[data-testid="stSelectbox"]').filter(has_text=label)
        choice = page.get_by_role("option", name=option)
        expect(selectbox).to_be_visible()
        settled(page)
        for _ in range(5):
            selectbox.click()
            try:
                choice.wait_for(timeout=3_000)
                break
            except PlaywrightTimeout:
                page.keyboard.press("Escape")
        choice.click()

    return pick
