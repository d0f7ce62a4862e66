"""The Timeline page in a real headless Chromium (issue 15 item 5): opened as an alert's link
(``/timeline?at=…``) it renders the chart of the changes around that instant and the table;
the sidebar lists the page."""

import re
from datetime import UTC, timedelta

import pytest
from playwright.sync_api import expect

from tests.timeline_rows import seed

pytestmark = pytest.mark.browser


def test_the_timeline_renders_around_the_linked_instant(
    dashboard, page, conn, db, rows, screenshot
):
    seed(conn, db, rows)
    centre = (rows.t0 - timedelta(minutes=30)).astimezone(UTC).replace(microsecond=0)

    page.goto(f"{dashboard}/timeline?window=1h&at={centre:%Y-%m-%dT%H:%M:%SZ}")

    expect(page.get_by_role("heading", name="Timeline", exact=True)).to_be_visible()
    expect(page.get_by_text(f"around {centre:%Y-%m-%d %H:%M:%S} UTC (±30m)")).to_be_visible()
    # the chart, drawn by Vega (SVG): one lane per kind, its labels on the y axis
    chart = page.locator(".vega-embed").first
    expect(chart.locator("svg")).to_be_visible()
    expect(chart).to_contain_text("alertactionerror groupbreaker")
    # a time axis spanning the hour: ticks every 10 min (an empty domain drew none); an hour
    # across midnight UTC labels them with the day too (charts.DATE_TIME_FORMAT)
    tick_label = re.compile(r"^([A-Z][a-z]{2} \d\d )?\d\d:\d0$")
    ticks = chart.locator("svg text").filter(has_text=tick_label)
    expect(ticks.first).to_be_visible()
    assert ticks.count() in (6, 7)  # 7 when the range starts on a whole ten minutes
    expect(page.locator("[data-testid='stDataFrame']").first).to_be_visible()
    expect(page.get_by_role("link", name="Timeline")).to_be_visible()  # in the sidebar
    screenshot("timeline")
