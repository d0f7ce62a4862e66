"""What the newcomer tripped on (issue 15 item 8), in a real headless Chromium: the Overview
has a URL of its own, and ``/`` still opens it."""

import re
import time

import pytest
from playwright.sync_api import expect

from outbox_monitor.alerts.links import OVERVIEW_PATH
from outbox_monitor.alerts.message import dashboard_link
from outbox_monitor.figures import error_grouping
from outbox_monitor.ui.cache import CACHE_TTL_SECONDS
from tests.browser_support import choose_row, settled

pytestmark = pytest.mark.browser


def test_the_overview_opens_at_its_own_url_and_at_the_root(dashboard, page, rows):
    rows.add(created_ago=60)

    page.goto(dashboard_link(dashboard, f"{OVERVIEW_PATH}?window=1h&event_type=order.paid"))
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    expect(page.get_by_text("Queue depth").filter(visible=True).first).to_be_visible()
    expect(page.get_by_text("Page not found")).to_have_count(0)
    assert page.url.startswith(f"{dashboard}/overview?") and "event_type=order.paid" in page.url

    page.goto(f"{dashboard}/?event_type=order.paid")
    expect(page).to_have_url(re.compile(r"/overview\?event_type=order.paid$"))
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    expect(page.get_by_text("Queue depth").filter(visible=True).first).to_be_visible()
    expect(page.get_by_text("Page not found")).to_have_count(0)
    # the sidebar's Overview entry is the page shown, and it links to /overview
    link = page.locator('[data-testid="stSidebarNav"] a').filter(has_text="Overview")
    expect(link).to_have_attribute("href", re.compile(r"/overview$"))


def test_the_error_group_picker_never_shows_a_stale_count(dashboard, page, rows, db, choose):
    for _ in range(3):
        rows.add_failed()
    rows.add_failed(last_error="other")
    [group] = [g for g in error_grouping.error_groups(db) if g["failed"] == 3]
    page.goto(f"{dashboard}/dead_letters")
    choose("Error group", re.compile(group["group_id"]))
    main = page.locator('[data-testid="stMain"]')
    expect(main.get_by_text("3 rows, first failed")).to_be_visible()

    rows.add_failed()  # one more dead letter of the group, seen after the cache's TTL
    time.sleep(CACHE_TTL_SECONDS + 1)
    main.locator("h3").first.click()
    page.keyboard.press("r")  # rerun, as the live refresh or any widget would
    expect(main.get_by_text("4 rows, first failed")).to_be_visible()
    # the picker keeps the label it was chosen with: it must hold no count to go stale
    picked = main.locator('[data-testid="stSelectbox"] input').input_value()
    assert picked == f"{group['group_id']} · order.paid · HTTP 500 upstream"


LONG_ERROR = (
    "HTTP 502 from https://payments.example.com/v2/charges: upstream connect error or "
    "disconnect/reset before headers. reset reason: connection termination; retried 3 "
    "times over 45 s by worker-7 on queue"
)
PAGES = ("overview", "events", "dead_letters", "alerts", "controls", "health", "actions")
# How the grid wraps a text cell, measured in the page with its own font: words on lines no
# wider than the column less its padding (8.5 px a side); lines of 1.4 × the 14 px text.
WRAPPED_LINES = """([text, width]) => {
    const grid = document.querySelector('[data-testid="stDataFrame"]');
    const context = document.createElement("canvas").getContext("2d");
    context.font = `14px ${getComputedStyle(grid).fontFamily}`;
    let lines = 1, line = "";
    for (const word of text.split(" ")) {
        const longer = line ? `${line} ${word}` : word;
        if (line && context.measureText(longer).width > width - 17) { lines += 1; line = word; }
        else line = longer;
    }
    return lines;
}"""
LAST_ERROR_PX = {"dead_letters": 400, "events": 280}
"""The last error column's width on each page (its ``format.Column``)."""


def assert_cell_shows_in_full(page, table, error: str, width: int) -> None:
    """The grid's cell holds ``error`` whole (its accessible table, the cell's text) and its
    row is tall enough to draw every wrapped line of it (rows over 64 px wrap)."""
    cell = table.locator('table[role="grid"] td').filter(has_text=error[:40])
    expect(cell.first).to_have_text(error)
    lines = page.evaluate(WRAPPED_LINES, [error, width])
    header_px, line_px, padding_px = 35, 14 * 1.4, 2 * 3
    height = table.bounding_box()["height"] - header_px
    assert height > 64, f"rows of {height} px draw one line of {lines}"
    assert lines * line_px + padding_px <= height, f"{lines} lines in a {height} px row"


def test_a_long_last_error_is_readable_at_1440_px(dashboard, page, rows, db, screenshot):
    assert len(LONG_ERROR) == 198  # with "#1" below: 200 characters
    error = LONG_ERROR + "#1"
    row_id = rows.add_failed(last_error=error)
    [group] = error_grouping.error_groups(db)
    page.set_viewport_size({"width": 1440, "height": 900})

    page.goto(f"{dashboard}/dead_letters?error_group={group['group_id']}")
    main = page.locator('[data-testid="stMain"]')
    expect(main.locator("h3").first).to_be_visible()
    table = main.locator('[data-testid="stDataFrame"]').nth(1)
    # a click by coordinates lands where the grid is once the page's run has ended (a run
    # still drawing moves it down), not where it was drawn first
    settled(page)
    assert_cell_shows_in_full(page, table, error, LAST_ERROR_PX["dead_letters"])
    choose_row(page, table, 0)
    expect(main.get_by_text(f"Row {row_id} · full last error")).to_be_visible()
    shown = main.locator('[data-testid="stCode"]').filter(has_text="HTTP 502").last
    assert shown.inner_text().strip() == error
    screenshot("1440-dead_letters-detail")

    page.goto(f"{dashboard}/events")  # the Events list: the same cell, wrapped
    expect(main.get_by_role("heading", name="Events").first).to_be_visible()
    listed = main.locator('[data-testid="stDataFrame"]').first
    assert_cell_shows_in_full(page, listed, error, LAST_ERROR_PX["events"])
    screenshot("1440-events-long-error")

    for name in PAGES:
        page.goto(f"{dashboard}/{name}")
        expect(main.get_by_role("heading").first).to_be_visible()
        settled(page)  # its charts and tables are drawn, not a fixed wait
        screenshot(f"1440-{name}")


def documents_loaded(page) -> list[str]:
    """The page's documents requested from now on (its first load, each reload; Streamlit's
    own page switches load none). Vite preloads a chunk (``modulepreload``) and imports it:
    the browser sends one request for both or two, so a test counts loads, not requests (a
    loaded CI saw one)."""
    documents: list[str] = []

    def on_request(request) -> None:
        if request.is_navigation_request() and request.frame == page.main_frame:
            documents.append(request.url)

    page.on("request", on_request)
    return documents


def test_a_stylesheet_lost_under_load_is_fetched_again(dashboard, page, rows):
    rows.add_failed()
    failed: list[str] = []

    def fail_once(route) -> None:
        # the dataframe grid's own stylesheet fails once, as a request under load may
        if "/DataFrame." in route.request.url and not failed:
            failed.append(route.request.url)
            route.abort()
        else:
            route.continue_()

    page.route("**/static/css/*.css", fail_once)
    page.goto(f"{dashboard}/dead_letters")
    main = page.locator('[data-testid="stMain"]')
    expect(main.locator('[data-testid="stDataFrame"]').first).to_be_visible()
    expect(main.get_by_text("Unable to preload CSS")).to_have_count(0)
    assert len(failed) == 1
    loaded = page.evaluate(
        "[...document.styleSheets].some((s) => (s.href || '').includes('/DataFrame.'))"
    )
    assert loaded


def test_a_script_chunk_lost_under_load_reloads_the_page(dashboard, page, rows):
    rows.add_failed()
    failed: list[str] = []
    documents = documents_loaded(page)

    def fail_on_first_load(route) -> None:
        # the data grid's code fails to load while the page is first loaded, as the
        # sidebar's inputs did at a demo's start under load
        if "/DataFrame." in route.request.url and len(documents) == 1:
            failed.append(route.request.url)
            route.abort()
        else:
            route.continue_()

    page.route("**/static/js/*.js", fail_on_first_load)
    page.goto(f"{dashboard}/dead_letters")
    main = page.locator('[data-testid="stMain"]')
    expect(main.locator('[data-testid="stDataFrame"]').first).to_be_visible()
    expect(page.get_by_text("Failed to fetch dynamically imported module")).to_have_count(0)
    assert 1 <= len(failed) <= 2 and len(documents) == 2  # one reload
    assert page.evaluate("Number(sessionStorage.getItem('outboxMonitorChunkReload')) > 0")


def test_a_chunk_lost_before_the_listener_exists_reloads_the_page(dashboard, page, rows):
    # the listener is itself an st.html element whose code loads lazily: hold that code back
    # until the grid's code has failed twice and Streamlit shows its error, as under load
    rows.add_failed()
    failed: list[str] = []
    held = []
    documents = documents_loaded(page)

    def hold_the_listener(route) -> None:
        if "/DataFrame." in route.request.url and len(documents) == 1:
            failed.append(route.request.url)
            route.abort()
        elif "/Html." in route.request.url and not held:
            held.append(route)
        else:
            route.continue_()

    page.route("**/static/js/*.js", hold_the_listener)
    page.goto(f"{dashboard}/dead_letters")
    main = page.locator('[data-testid="stMain"]')
    expect(main.get_by_text("Failed to fetch dynamically imported module")).to_be_visible()
    assert 1 <= len(failed) <= 2 and len(held) == 1
    held[0].continue_()
    expect(main.locator('[data-testid="stDataFrame"]').first).to_be_visible()
    assert len(documents) == 2  # one reload
    expect(page.get_by_text("Failed to fetch dynamically imported module")).to_have_count(0)
    assert page.evaluate("Number(sessionStorage.getItem('outboxMonitorChunkReload')) > 0")


def test_a_stylesheet_lost_before_the_listener_exists_reloads_the_page(dashboard, page, rows):
    # as under load in a fresh-clone CI: the grid's stylesheet failed while the listener's own
    # code had not loaded yet, and "Unable to preload CSS" stood in the grid's place
    rows.add_failed()
    failed: list[str] = []
    held = []

    def fail_the_stylesheet_once(route) -> None:
        if "/DataFrame." in route.request.url and not failed:
            failed.append(route.request.url)
            route.abort()
        else:
            route.continue_()

    def hold_the_listener(route) -> None:
        if "/Html." in route.request.url and not held:
            held.append(route)
        else:
            route.continue_()

    page.route("**/static/css/*.css", fail_the_stylesheet_once)
    page.route("**/static/js/*.js", hold_the_listener)
    page.goto(f"{dashboard}/dead_letters")
    main = page.locator('[data-testid="stMain"]')
    expect(main.get_by_text("Unable to preload CSS")).to_be_visible()
    assert len(failed) == 1 and len(held) == 1
    held[0].continue_()
    expect(main.locator('[data-testid="stDataFrame"]').first).to_be_visible()
    expect(page.get_by_text("Unable to preload CSS")).to_have_count(0)
    assert page.evaluate("Number(sessionStorage.getItem('outboxMonitorChunkReload')) > 0")
