"""Every page at 1440×900 in a real headless Chromium (issue 30 item 5): the sidebar open, each
table's key columns are among its header cells and the grid needs no horizontal scroll (all
its shown columns are within its visible box, which is as wide as ``format.GRID_WIDTH_PX``
says); each page's first screen is saved as ``docs/images/1440-<page>.png`` (by
``make docs-images``)."""

import re

import pytest
from playwright.sync_api import expect

from outbox_monitor.figures import error_grouping
from outbox_monitor.ui import format
from tests.browser_support import DOCS_IMAGES, SCREEN_1440, settled
from tests.health import idle_in_transaction
from tests.tables_rows import KEYS, seed_every_table, write_rules

pytestmark = pytest.mark.browser

SIDEBAR_PX = 300
"""Streamlit's open sidebar (18.75 rem): the main area is what is left of 1440 px."""
TABS = {
    "alerts": {
        "State": ["alerts.state"],
        "Notifications": ["alerts.notifications"],
        "Transitions": ["alerts.transitions"],
    },
    "actions": {"Reap stuck locks": ["actions.reap.sample"], "Audit log": ["actions.audit"]},
}
"""Pages whose tables sit in tabs: a grid in a closed tab has no size, so each is opened."""
GRID_BOX = """(grid) => {
    const scroller = grid.querySelector('.dvn-scroller');
    return {
        width: grid.getBoundingClientRect().width,
        scrollWidth: scroller.scrollWidth,
        clientWidth: scroller.clientWidth,
    };
}"""


def key_class(key: str) -> str:
    """The CSS class Streamlit gives a keyed element's container (``st-key-…``)."""
    return "st-key-" + re.sub(r"[^A-Za-z0-9_-]", "-", key)


def check_grid(page, key: str, labels: list[str]) -> dict:
    """The table ``key`` shows ``labels`` and fits: returns its measured box."""
    grid = page.locator(f".{key_class(key)} [data-testid='stDataFrame']")
    grid.scroll_into_view_if_needed()
    # the grid's accessible table (its header cells) is drawn once the grid is
    headers = grid.locator('table[role="grid"] th[role="columnheader"]')
    expect(headers.first).to_be_attached()
    box = {**grid.evaluate(GRID_BOX), "headers": headers.all_inner_texts()}
    missing = [label for label in labels if label not in box["headers"]]
    assert not missing, f"{key}: {missing} not among the headers {box['headers']}"
    assert box["scrollWidth"] <= box["clientWidth"] + 1, f"{key} scrolls sideways: {box}"
    assert box["width"] >= format.GRID_WIDTH_PX, f"{key} is narrower than assumed: {box}"
    return box


def test_every_page_fits_its_tables_at_1440_px(dashboard, page, conn, db, rows, dsn, tmp_path):
    seed_every_table(conn, db, rows, write_rules(tmp_path))
    [group] = [g for g in error_grouping.error_groups(db) if "HTTP 502" in g["fingerprint"]]
    DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
    page.set_viewport_size(SCREEN_1440)
    main = page.locator('[data-testid="stMain"]')
    with idle_in_transaction(dsn, "forgotten-report"):
        for name, tables in KEYS.items():
            query = f"?error_group={group['group_id']}" if name == "dead_letters" else ""
            page.goto(f"{dashboard}/{name}{query}")
            expect(main.get_by_role("heading").first).to_be_visible()
            settled(page)
            sidebar = page.locator('[data-testid="stSidebar"]')
            assert sidebar.bounding_box()["width"] >= SIDEBAR_PX, "the sidebar is not open"
            # the first screen once drawn: its tables there, no element still a placeholder
            expect(main.get_by_test_id("stDataFrame").first).to_be_visible()
            expect(page.get_by_test_id("stSkeleton")).to_have_count(0)
            page.screenshot(path=str(DOCS_IMAGES / f"1440-{name}.png"))
            tabs = TABS.get(name, {"": list(tables)})
            for tab, keys in tabs.items():
                if tab:
                    main.get_by_role("tab", name=tab).click()
                    settled(page)
                for key in keys:
                    check_grid(page, key, tables.get(key, []))
