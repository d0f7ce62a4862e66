"""The Overview's retrying in a real headless Chromium (issue 30 item 1): the Retrying tile
and a retry error group's error text, with no scheduler running (the read fills the cache)."""

import re

import psycopg
import pytest
from playwright.sync_api import expect

from outbox_monitor.figures import error_grouping

pytestmark = pytest.mark.browser


def test_the_overview_shows_the_retrying_tile_and_a_retry_groups_error(
    dashboard, page, rows, screenshot
):
    for order in (1001, 1002, 1003):
        rows.add(
            event_type="order.paid",
            attempts=1,
            created_ago=300,
            available_ago=-60,
            last_error=f"HTTP 503 from erp for order {order}",
        )
    rows.add(event_type="order.paid", created_ago=30)  # never tried: not retrying

    page.goto(dashboard)
    tile = page.locator('[data-testid="stMetric"]').filter(has_text="Retrying")
    expect(tile).to_be_visible()
    expect(tile.locator('[data-testid="stMetricValue"]')).to_have_text("3")
    expect(
        page.get_by_text("3 rows retrying in 1 retry error group (all event types).")
    ).to_be_visible()
    grid = page.locator('[data-testid="stDataFrame"]').filter(has_text="rows retrying")
    expect(grid).to_be_visible()
    # the grid's accessible table holds each cell's value
    expect(grid.get_by_text("HTTP 503 from erp for order 1003", exact=True)).to_be_attached()
    screenshot("overview-retrying")


def test_counts_taken_earlier_say_their_age_when_no_group_was_retrying(
    dashboard, page, rows, db, conn, screenshot
):
    """The groups were counted 40 s ago (a scheduler's sample) with nothing retrying; a row
    failed since: beside the tile's 1, the groups' line says when nothing was retrying."""
    rows.add(event_type="order.paid", created_ago=30)
    error_grouping.refresh_retry_error_groups(db)
    conn.execute(
        "UPDATE outbox_monitor.retry_error_groups_refreshed"
        " SET refreshed_at = refreshed_at - interval '40 seconds'"
    )
    rows.add(event_type="order.paid", attempts=1, last_error="HTTP 503 from erp for order 1")

    page.goto(dashboard)
    tile = page.locator('[data-testid="stMetric"]').filter(has_text="Retrying")
    expect(tile.locator('[data-testid="stMetricValue"]')).to_have_text("1")
    expect(
        page.get_by_text(
            re.compile(r"No row was retrying when the groups were counted [45]\ds ago")
        )
    ).to_be_visible()
    screenshot("overview-retrying-counted-earlier")


def test_a_count_that_times_out_shows_the_last_counts_and_why(
    dashboard, page, rows, db, conn, dsn, screenshot
):
    """Counts 2 minutes old; counting them again hits the statement timeout (a session
    holds the counts' time row for the page's whole load): Chromium shows the last counts,
    their age and why, and the rest of the Overview below them."""
    rows.add(event_type="order.paid", attempts=1, last_error="HTTP 503 from erp for order 7")
    error_grouping.refresh_retry_error_groups(db)
    conn.execute(
        "UPDATE outbox_monitor.retry_error_groups_refreshed"
        " SET refreshed_at = refreshed_at - interval '2 minutes'"
    )
    with psycopg.connect(dsn) as holding:
        holding.execute("SELECT FROM outbox_monitor.retry_error_groups_refreshed FOR UPDATE")
        page.goto(dashboard)
        expect(
            page.get_by_text(re.compile(r"Counting them again failed: a monitor query"))
        ).to_be_visible()
        expect(
            page.get_by_text(re.compile(r"1 row retrying in 1 retry error group .*counted 2m"))
        ).to_be_visible()
        expect(page.get_by_text("Dead tuples")).to_be_visible()  # the health tiles below
        screenshot("overview-retrying-count-timed-out")
